"""Small hostile inputs (issue 23, cases 19 and 20): a worker that does not compile meets the
plugin; EAGLE3_PROFILE=garbage/disable; the demo's printed profile hint with an odd path."""

from __future__ import annotations

import logging
import shlex

import pytest
from test_plugin import _small_root, fresh  # noqa: F401 - fresh is a fixture

from sglang_eagle3_ext.runtime import plugin, probes, settings, sglang_env
from sglang_eagle3_ext.runtime.plugin import hookplan, procstate


@pytest.mark.parametrize("raw", ["garbage", "disable", "disabled", "2", "tru"])
def test_profile_words_that_are_not_yes_leave_the_probes_off_and_say_so(raw, capsys):
    assert settings.PROFILE.get({"EAGLE3_PROFILE": raw}) is False
    s = probes.settings({"EAGLE3_PROFILE": raw})
    assert s["enabled"] is False
    assert f"EAGLE3_PROFILE={raw!r} is not 1/0" in capsys.readouterr().err
    assert hookplan.switches({"EAGLE3_PROFILE": raw})["profile"] is False


@pytest.mark.parametrize("raw,on", [("1", True), ("true", True), ("YES", True), (" on ", True),
                                    ("0", False), ("off", False), ("no", False), ("", False)])
def test_the_usual_words_still_work(raw, on):
    assert settings.PROFILE.get({"EAGLE3_PROFILE": raw}) is on


def test_worker_that_does_not_compile_is_one_warning_no_traceback(fresh, tmp_path, capsys):  # noqa: F811
    env = _small_root(tmp_path)
    worker = env.path(sglang_env.V2_FILE)
    worker.write_text(worker.read_text() + "\ndef broken(:\n")
    fresh.setattr(plugin, "locate", lambda *a: env)
    fresh.setenv("EAGLE3_PROFILE", "1")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    h = Keep()
    procstate.logger.addHandler(h)
    try:
        plugin.register()  # never raises
    finally:
        procstate.logger.removeHandler(h)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    bad = [r for r in records if r.levelno >= logging.WARNING]
    assert len(bad) == 1 and bad[0].exc_info is None, [r.getMessage() for r in records]
    assert "not valid Python" in bad[0].getMessage() or "invalid syntax" in bad[0].getMessage()
    assert procstate._S.registered == []


def test_demo_profile_hint_quotes_its_path(release_copy, tmp_path, capsys, monkeypatch):
    """The demo's step-5 line is pasted by users: an --out with a space, ; and [ ] stays one word
    (and rich does not eat the brackets). The real demo, dry run, plugin route (as test_demo.py)."""
    from sglang_eagle3_ext import cli
    from sglang_eagle3_ext.commands import demo

    monkeypatch.setattr(demo, "gpu_name", lambda: "Fake GPU")
    root = release_copy("0.5.16")
    out = tmp_path / "my out;[x]"
    assert cli.main(["demo", "--sglang-root", str(root), "--dry-run", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "profile: sgl-eagle3 profile" in ln)
    assert shlex.split(line.split("profile: ", 1)[1])[-1] == str(out / "profile.jsonl"), line
