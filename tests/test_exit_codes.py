"""One exit-code rule for every command (docs/reference/architecture.md, "Exit codes"): 2 when what
was given is wrong (a flag, a value, a path, a file missing, malformed or of another kind), 1 when
the input was fine and the run failed or a check found a problem, 0 when done.

A new user's mistakes go through the real CLI entry (``cli.main``, what the console script calls;
in process, so the set stays fast), each on committed samples or files made here; one case also
runs the console script as a subprocess. Before this rule was applied, a text file given to
`profile`, a --sglang-root without SGLang, and a sweep whose model folder is missing exited 1.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

import pytest
from conftest import REPO

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.runtime import errors

H200 = REPO / "docs" / "data" / "h200-2026-11-29" / "run2" / "core"
LAYERS = REPO / "tests" / "data" / "layers"
PROBES = H200 / "configs" / "eagle3-s4-k1-d5-no-nccl" / "prof.jsonl"
BENCH = H200 / "configs" / "no-spec-no-nccl" / "bench.json"
NOPE = "/nonexistent/sgl-eagle3-test"


def _files(tmp) -> dict[str, str]:
    (tmp / "notes.txt").write_text("hello, not a probe file\n")
    (tmp / "empty.jsonl").write_text("")
    (tmp / "bad.yaml").write_text("name: [unclosed\n")
    (tmp / "record.jsonl").write_text(json.dumps({"schema": "eagle3_prof/3", "cycles": 1, "mode": "wall",
                                                  "phases": {}}) + "\n")
    (tmp / "empty_dir").mkdir()
    return {k: str(tmp / v) for k, v in (("notes", "notes.txt"), ("empty", "empty.jsonl"), ("yaml", "bad.yaml"),
                                         ("record", "record.jsonl"), ("dir", "empty_dir"))}


# (name, argv with {placeholders}); every one is a mistake in what was given: exit 2, one line
BAD_INPUT = [
    ("unknown flag", ["bench", "--url", "http://127.0.0.1:9", "--num-requets", "3"]),
    ("unknown command", ["benchmark"]),
    ("missing value", ["profile", "--baseline-tps"]),
    ("profile: no such file", ["profile", NOPE + ".jsonl"]),
    ("profile: a bench result", ["profile", str(BENCH)]),
    ("profile: a sweep folder", ["profile", str(H200)]),
    ("profile: a text file", ["profile", "{notes}"]),
    ("profile: an empty file", ["profile", "{empty}"]),
    ("profile: a malformed record", ["profile", "{record}"]),
    ("profile: a negative baseline", ["profile", str(PROBES), "--baseline-tps", "-3"]),
    ("compare: no such file", ["compare", NOPE + ".json"]),
    ("compare: a probe file", ["compare", str(PROBES)]),
    ("sweep: no such file", ["sweep", NOPE + ".yaml"]),
    ("sweep: malformed YAML", ["sweep", "{yaml}"]),
    ("sweep: nothing given", ["sweep"]),
    ("sweep --report: not a sweep folder", ["sweep", "--report", "{dir}"]),
    ("sweep: model folders missing", ["sweep", str(REPO / "examples" / "sweep-kimi.yaml"), "--out", "{dir}/sw"]),
    ("launch: unknown preset", ["launch", "no-such-preset", "--dry-run"]),
    ("launch: preset variable unset", ["launch", str(REPO / "launch" / "kimi-k25-eagle3.yaml"), "--dry-run"]),
    ("launch: no such model folder", ["launch", "--model", NOPE, "--no-spec", "--dry-run"]),
    ("launch: a folder without config.json", ["launch", "--model", "{dir}", "--no-spec", "--dry-run"]),
    ("layers check: no such target", ["layers", "check", "--target", NOPE, "--draft", str(LAYERS / "draft_2_30_58")]),
    ("layers check: bad --trained-on", ["layers", "check", "--target", str(LAYERS / "kimi_k25_target"), "--draft",
                                        str(LAYERS / "draft_2_30_58"), "--trained-on", "a,b"]),
    ("--sglang-root: no such folder", ["patch", "status", "--sglang-root", NOPE]),
    ("--sglang-root: not an SGLang tree", ["patch", "status", "--sglang-root", "{dir}"]),
    ("bench: bad --concurrency", ["bench", "--url", "http://127.0.0.1:9", "--concurrency", "x"]),
    ("stop: no such pid file", ["stop", "--pid-file", NOPE + ".pid"]),
    ("tiny: unknown shape", ["tiny", "--out", "{dir}/t", "--shape", "no-such-shape"]),
    ("adaptive write: no such sweep", ["adaptive", "write", "--from", NOPE, "--out", "{dir}/a.json"]),
    ("calibrate: no such scan", ["calibrate", NOPE + ".json", str(PROBES), "--out", "{dir}/c.json"]),
    ("scan: bad --steps", ["scan", "--model", NOPE, "--steps", "a-b", "--dry-run"]),
    ("traffic: not a tiny build", ["traffic", "--build", "{dir}", "--out", "{dir}/t.json"]),
]

# the input is fine; the run failed or the check found a problem: exit 1
FAILED = [
    ("bench: nothing listens there", ["bench", "--url", "http://127.0.0.1:9", "--runs", "1", "--warmup", "0"]),
    ("layers check: a wiring problem", ["layers", "check", "--target", str(LAYERS / "kimi_k25_target"), "--draft",
                                        str(LAYERS / "draft_2_30_58"), "--trained-on", "2,30,58"]),
]


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except SystemExit as exc:  # argparse: the console script's sys.exit(main()) gives the same code
            rc = exc.code if isinstance(exc.code, int) else 1
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture()
def clean_env(monkeypatch):
    for var in ("KIMI_K25_PATH", "KIMI_K25_EAGLE3_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("SGLANG_EAGLE3_DEBUG", raising=False)  # a bug of ours: "unexpected", exit 1


def test_every_bad_input_is_exit_2_in_one_line(tmp_path, clean_env):
    files = _files(tmp_path)
    wrong = []
    for name, argv in BAD_INPUT:
        rc, _, err = _cli([a.format(**files) for a in argv])
        mine = [ln for ln in err.splitlines() if ln.startswith("error: ")]
        usage = "usage: sgl-eagle3" in err  # argparse: its usage lines, then "...: error: ..."
        if rc != errors.BAD_INPUT or "Traceback" in err or not (usage or len(err.strip().splitlines()) == len(mine) == 1):
            wrong.append(f"{name}: exit {rc}: {err.strip()[-300:]}")
    assert not wrong, "\n".join(wrong)


def test_a_failed_run_or_check_is_exit_1(clean_env):
    for name, argv in FAILED:
        rc, _, err = _cli(argv)
        assert rc == errors.FAILED and "Traceback" not in err, (name, rc, err)


def test_the_console_script_exits_with_the_same_codes(tmp_path):
    """The real process: sys.exit(main()) for our line, argparse's own exit for a usage error."""
    for argv, rc in ((["profile", str(BENCH)], 2), (["profile", "--no-such-flag"], 2), (["--version"], 0)):
        p = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", *argv], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
        assert p.returncode == rc and "Traceback" not in p.stderr, (argv, p.returncode, p.stderr)
