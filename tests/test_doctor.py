"""`doctor` says what this machine can and cannot do, and why, with or without SGLang importable;
it flags misspelt variable names and values our readers refuse.

Real subprocesses: a Python without SGLang is this venv's Python run with ``-S`` (no
site-packages) and a PYTHONPATH holding only our own dependencies; the README's CPU box is this
venv without the tests' torchvision stub, where SGLang is installed but its server does not import.
The capability rules are also checked on synthetic reports (a GPU machine cannot be had here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.commands import doctor
from sglang_eagle3_ext.runtime import settings

SITE = Path(next(p for p in sys.path if p.endswith("site-packages")))


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith((*settings.PREFIXES, "EAGLE3_"))}
    env.update(PYTHONPATH=str(REPO), COLUMNS="200", SGLANG_EAGLE3_CACHE=str(tmp_path / "cache"))
    env.update(extra)
    return env


def test_without_sglang_it_reports_instead_of_refusing(tmp_path):
    """Our package and its own dependencies only (no SGLang, no torch): exit 0, one screen."""
    deps = tmp_path / "deps"
    deps.mkdir()
    for name in ("rich", "pygments", "yaml", "markdown_it", "mdurl", "libcst", "typing_extensions.py"):
        if (SITE / name).exists():
            (deps / name).symlink_to(SITE / name)
    env = _env(tmp_path, PYTHONPATH=f"{deps}{os.pathsep}{REPO}")
    p = subprocess.run([sys.executable, "-S", "-m", "sglang_eagle3_ext", "doctor"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "SGLang: not installed in this Python" in p.stdout
    assert "torch: not importable" in p.stdout
    assert "yes  measure a running server (bench, compare)" in p.stdout
    assert "no  start EAGLE-3 servers" in p.stdout and "no SGLang" in p.stdout
    assert "No server can start here" in p.stdout  # not "no GPU": without torch it cannot tell
    assert len(p.stdout.splitlines()) <= 30 and "Traceback" not in p.stderr
    j = subprocess.run([sys.executable, "-S", "-m", "sglang_eagle3_ext", "doctor", "--json"], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    info = json.loads(j.stdout)
    assert info["sglang"] is None and info["sglang_missing"] and info["can"]


def test_readme_box_says_plainly_that_no_server_can_start(tmp_path):
    """The README's CPU venv: SGLang installed, its server does not import (no torchvision), no
    GPU. The import is tried once, then its answer kept until a package changes."""
    probe = subprocess.run([sys.executable, "-c", "import torchvision"], env=_env(tmp_path), capture_output=True)
    if probe.returncode == 0:
        pytest.skip("torchvision imports here: SGLang's server may import")
    p = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "doctor"], env=_env(tmp_path), cwd=tmp_path,
                       capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "server imports in this Python: NO (ModuleNotFoundError: No module named 'torchvision')" in out, out
    assert "no  start EAGLE-3 servers" in out and "built without CUDA" in out
    assert "yes  plan servers" in out and "argument check is skipped" in out
    assert "No GPU here, so no server can start" in out
    again = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "doctor"], env=_env(tmp_path), cwd=tmp_path,
                           capture_output=True, text=True, timeout=400)
    assert "the last doctor's answer" in again.stdout and "No module named 'torchvision'" in again.stdout


def test_import_answer_is_asked_again_when_the_environment_changes(monkeypatch):
    from sglang_eagle3_ext.runtime.sglang_env import locate

    env = locate()
    a = doctor._import_key(env)
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    assert doctor._import_key(env) != a


@pytest.mark.parametrize("name,value,says", [
    ("SGLANG_EAGLE3_AUX_LAYER", "2,30,58", "did you mean SGLANG_EAGLE3_AUX_LAYERS?"),
    ("EAGLE3_PROFILEX", "1", "did you mean EAGLE3_PROFILE?"),
    ("EAGLE3_PROFILE_EVRY", "50", "did you mean EAGLE3_PROFILE_EVERY?"),
    ("SGLANG_EAGLE3_HOLD_STEPS", "4,x", "is not a comma list of distinct step counts"),
    ("SGLANG_EAGLE3_NCCL", "bogus", "unknown NCCL preset 'bogus'; known: debug, none, tuned"),
    ("SGLANG_EAGLE3_AUX_LAYERS", "2,x", "layer 'x' in '2,x' is not a layer number"),
    ("EAGLE3_PROFILE", "maybe", "is not 1/0, true/false"),
    ("SGLANG_EAGLE3_HOLD", "0", "is not a positive integer"),
    ("SGLANG_EAGLE3_POLICY", "/no/such/scan.json", "no such file"),
])
def test_env_problems_name_the_reason(name, value, says):
    problems = doctor.env_problems({name: value})
    assert says in problems[name], problems


def test_good_values_and_other_tools_variables_are_not_flagged():
    env = {"EAGLE3_PROFILE": "1", "SGLANG_EAGLE3_NCCL": "tuned", "SGLANG_EAGLE3_AUX_LAYERS": "2,30,58",
           "SGLANG_EAGLE3_HOLD_STEPS": "4,2,0", "NCCL_PROTO": "LL", "SGLANG_ENABLE_SPEC_V2": "1",
           settings.CACHE.old: "/tmp/x"}  # an old name, still read
    assert doctor.env_problems(env) == {}


def test_doctor_flags_them_in_its_report(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SGLANG_EAGLE3_CACHE", str(tmp_path))
    for k, v in {"SGLANG_EAGLE3_AUX_LAYER": "1", "EAGLE3_PROFILEX": "1", "SGLANG_EAGLE3_HOLD_STEPS": "4,x",
                 "SGLANG_EAGLE3_NCCL": "bogus"}.items():
        monkeypatch.setenv(k, v)
    assert cli.main(["doctor", "--quick"]) == 0
    out = capsys.readouterr().out
    flagged = [ln for ln in out.splitlines() if ln.strip().startswith("!")]
    assert len(flagged) == 4, out
    assert any("did you mean SGLANG_EAGLE3_AUX_LAYERS?" in ln for ln in flagged)
    assert any("SGLANG_EAGLE3_NCCL" in ln and "unknown NCCL preset" in ln for ln in flagged)
    assert "server imports in this Python: ? (not tried (--quick))" in out


def _report(**over) -> dict:
    info = {
        "sglang": {"version": "0.5.23", "has_plugins": True},
        "sglang_missing": None,
        "sglang_import": {"ok": True, "why": "imports"},
        "torch": {"available": True, "version": "2.9.1+cu128", "cuda": "12.8", "cuda_available": True,
                  "gpu_count": 1, "gpu_name": "NVIDIA H100 80GB HBM3"},
        "optional": {"transformers": True, "matplotlib": True},
    }
    info.update(over)
    info["can"] = doctor.capabilities(info)
    return info


def _can(info: dict, what: str) -> dict:
    return next(c for c in info["can"] if c["what"].startswith(what))


def test_a_gpu_box_with_a_working_sglang_can_do_everything():
    info = _report()
    assert all(c["ok"] for c in info["can"]), info["can"]
    assert "can start EAGLE-3 servers" in doctor.headline(info) and "H100" in doctor.headline(info)


def test_an_old_release_sends_scan_users_to_sweep():
    info = _report(sglang={"version": "0.5.9", "has_plugins": False})
    assert _can(info, "start EAGLE-3")["ok"]
    scan = _can(info, "one-start scan")
    assert not scan["ok"] and "use sweep" in scan["why"]


def test_cuda_torch_without_a_visible_gpu_says_so(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    info = _report(torch={"available": True, "version": "2.9.1+cu128", "cuda": "12.8", "cuda_available": False,
                          "gpu_count": 0, "gpu_name": None})
    start = _can(info, "start EAGLE-3")
    assert not start["ok"] and "no CUDA GPU visible to torch (CUDA_VISIBLE_DEVICES='')" in start["why"]


def test_a_bad_sglang_root_is_still_an_error(tmp_path, capsys):
    """The user named that tree: refusing it is right (a missing install is only reported)."""
    assert cli.main(["doctor", "--sglang-root", str(tmp_path / "nope")]) == 2  # a path typed wrong: 2
    assert "no such folder" in capsys.readouterr().err


def test_an_unpacked_tree_is_not_imported(capsys, tmp_path, monkeypatch):
    from sglang_eagle3_ext.serve import releases

    release_root = releases.fetch("0.5.23")
    monkeypatch.setenv("SGLANG_EAGLE3_CACHE", str(tmp_path))
    assert cli.main(["doctor", "--sglang-root", str(release_root)]) == 0
    out = capsys.readouterr().out
    assert "not tried (an unpacked tree" in out and "SGLang 0.5.23 (--sglang-root)" in out


def test_ctrl_c_while_sglang_imports_stops_doctor_and_its_child(tmp_path):
    """Ctrl-C while the child Python imports SGLang's server: doctor exits 130 at once and the
    child does not live on (it would otherwise finish its 8-30 s import alone)."""
    import signal
    import time

    from conftest import sigint_default

    p = subprocess.Popen([sys.executable, "-m", "sglang_eagle3_ext", "doctor"], env=_env(tmp_path), cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    children: list[int] = []
    deadline = time.monotonic() + 60
    while not children and time.monotonic() < deadline and p.poll() is None:
        try:
            children = [int(x) for x in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
        except OSError:
            pass
        time.sleep(0.05)
    assert children, "doctor started no child import"
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    if p.returncode == 0 and "Traceback" not in err:  # the child's import won the race: no Ctrl-C to test
        pytest.skip("doctor finished its report before Ctrl-C arrived")
    assert p.returncode == 130, (out, err)
    assert "Traceback" not in err
    time.sleep(0.2)
    for c in children:
        try:
            state = Path(f"/proc/{c}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue  # gone
        assert state == "Z", f"child {c} still running ({state})"


def test_an_interrupted_report_kills_the_import_at_once(monkeypatch, tmp_path):
    """Ctrl-C while torch imports (before doctor waits for the child): the child is killed, not
    waited for (it would finish its import first: exit 1 or 0, not SIGKILL)."""
    monkeypatch.setenv("SGLANG_EAGLE3_CACHE", str(tmp_path))
    started = []
    real = doctor._start_import

    def start(*a, **k):
        started.append(real(*a, **k))
        return started[-1]

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(doctor, "_start_import", start)
    monkeypatch.setattr(doctor, "_torch_info", interrupted)
    with pytest.raises(KeyboardInterrupt):
        doctor.collect(None, recheck=True)
    child = started[0]
    assert isinstance(child, subprocess.Popen)
    assert child.returncode == -9  # killed, not waited for
