"""A newcomer's path with no surprises: the README tour runs as written against committed samples,
the launch dry run works where SGLang's own check cannot import SGLang, a busy port names no log
that does not exist. Real CLI subprocesses, real files; nothing stood in."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys

import pytest
from conftest import REPO
from test_flags import write_model

README = (REPO / "README.md").read_text()


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EAGLE3_", "SGLANG_EAGLE3_"))}
    env["PYTHONPATH"] = str(REPO)  # no torchvision stub: the README's own environment
    env["COLUMNS"] = "120"
    env.update(extra or {})
    return env


def tour_commands() -> list[tuple[dict[str, str], list[str], int]]:
    """(env additions, argv after `sgl-eagle3`, expected exit code) of the README tour's first block."""
    block = README.split("## A short tour", 1)[1].split("```console", 1)[1].split("```", 1)[0]
    block = block.replace("\\\n", " ")
    cmds = []
    for line in block.splitlines():
        if not line.startswith("$ "):
            continue
        code, _, comment = line[2:].partition("#")
        m = re.search(r"exit (\d+)", comment)
        words = shlex.split(code)
        if words[0] == "source":
            continue
        env = {}
        while "=" in words[0]:
            k, v = words.pop(0).split("=", 1)
            env[k] = v
        assert words[0] == "sgl-eagle3", line
        cmds.append((env, words[1:], int(m.group(1)) if m else 0))
    return cmds


def test_tour_is_long_enough_and_uses_committed_samples():
    cmds = tour_commands()
    assert len(cmds) >= 6
    for _env, argv, _rc in cmds:
        for w in argv:
            if "/" in w and not w.startswith("-"):
                assert (REPO / w).exists(), w  # every path in the tour is in the repository
    assert "source .venv/bin/activate" in README


@pytest.mark.parametrize("env,argv,rc", tour_commands(), ids=lambda x: x[0] if isinstance(x, list) else None)
def test_readme_tour_runs_as_written(env, argv, rc):
    p = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", *argv], cwd=REPO, env=cli_env(env),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == rc, (argv, p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr


def test_readme_keeps_two_setup_commands():
    block = README.split("## Set up", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    assert len([ln for ln in block.splitlines() if ln.strip()]) == 2


def test_busy_port_names_no_log_that_does_not_exist(tmp_path):
    target = write_model(tmp_path / "target", "LlamaForCausalLM")
    log = tmp_path / "server.log"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "launch", "--model", str(target),
                            "--no-spec", "--port", str(port), "--log", str(log), "--no-sglang-check"],
                           env=cli_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "already in use" in p.stderr, p.stderr
    assert str(log) not in p.stderr and "log:" not in p.stderr and not log.exists()


def test_real_launch_still_stops_when_sglang_cannot_be_imported(tmp_path):
    """Only --dry-run goes on without SGLang's own check; a real launch refuses (exit 1, one line)."""
    probe = subprocess.run([sys.executable, "-c", "import torchvision"], env=cli_env(), capture_output=True)
    if probe.returncode == 0:
        pytest.skip("torchvision imports here: SGLang's own check runs for real")
    env = cli_env({"KIMI_K25_PATH": "tests/data/layers/kimi_k25_target",
                   "KIMI_K25_EAGLE3_PATH": "tests/data/layers/draft_2_30_58"})
    p = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "launch", "launch/kimi-k25-eagle3.yaml",
                        "--port", "1", "--log", str(tmp_path / "x.log")],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "could not import SGLang" in p.stderr and "Traceback" not in p.stderr
    d = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "launch", "launch/kimi-k25-eagle3.yaml",
                        "--profile", "--dry-run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert d.returncode == 0 and "skipped for this dry run" in d.stderr and "--tp-size 8" in d.stdout


@pytest.mark.slow
def test_gpu_bundle_builds_our_wheel_with_an_old_setuptools(tmp_path):
    """tools/gpu_bundle.py own_wheel() in a fresh venv whose setuptools (ensurepip's 65.x on Python
    3.11) is older than pyproject.toml's: it builds with isolation instead of failing. Needs the pip
    registry for the isolated build's setuptools."""
    import zipfile

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    code = ("import sys, pathlib; sys.path.insert(0, 'tools'); import gpu_bundle; "
            "print(gpu_bundle.build_backend_ok()); "
            f"print(gpu_bundle.own_wheel(pathlib.Path({str(tmp_path / 'out')!r})))")
    p = subprocess.run([str(py), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.split()
    if lines[0] == "True":
        pytest.skip("this Python's ensurepip setuptools already meets pyproject.toml")
    whl = lines[-1]
    with zipfile.ZipFile(whl) as z:
        eps = next(n for n in z.namelist() if n.endswith("entry_points.txt"))
        assert "sglang_eagle3_ext.runtime.plugin:register" in z.read(eps).decode()


@pytest.mark.slow
def test_ci_env_quiet_pip_still_fails_loudly(tmp_path):
    """tools/ci_env.sh's pipq (quiet: no conflict blocks, no "Location ... is ignored" lines) keeps
    pip's exit status and its ERROR lines (a missing local wheel: no registry lookup)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    script = ("set -euo pipefail\n"
              f"VENV={shlex.quote(str(venv))}\n"
              "eval \"$(sed -n '/^pipq() {/,/^}/p' tools/ci_env.sh)\"\n"
              "pipq --no-deps /nonexistent/missing-1.0-py3-none-any.whl\n"
              "echo SHOULD-NOT-PRINT\n")
    p = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "SHOULD-NOT-PRINT" not in p.stdout
    assert "ERROR" in p.stdout + p.stderr and "is ignored" not in p.stdout + p.stderr


def _pip_venv(tmp_path):
    """A throwaway venv with the shared env's own pip and setuptools (copied: no registry, and the
    shared .venv is never touched), to run tools/ci_env.sh's install functions against."""
    import shutil
    import sysconfig

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    src = sysconfig.get_paths()["purelib"]
    dst = next((venv / "lib").glob("python*/site-packages"))
    for name in os.listdir(src):
        if name.split("-")[0] in ("pip", "setuptools", "wheel", "_distutils_hack", "distutils"):
            copy = shutil.copytree if os.path.isdir(os.path.join(src, name)) else shutil.copy2
            copy(os.path.join(src, name), dst / name)
    pip = venv / "bin" / "pip"
    pip.write_text(f"#!/bin/sh\nexec {venv / 'bin' / 'python'} -m pip \"$@\"\n")
    pip.chmod(0o755)
    return venv


def test_ci_env_editable_install_is_quiet(tmp_path):
    """The set-up printed setuptools' "BuildBackendWarning: Editable installation" block (our layout
    maps launch/ and patches/ into the package, so setuptools installs through an import finder and
    says so). tools/ci_env.sh's editable() ignores that one message; the same pip without it prints
    the block, so this test can tell the two apart."""
    venv = _pip_venv(tmp_path)
    raw = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--no-build-isolation", "-e", "."],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert raw.returncode == 0, raw.stderr[-2000:]
    if "Editable installation" not in raw.stdout + raw.stderr:
        pytest.skip("this setuptools prints no editable-install notice")
    script = (f"set -euo pipefail\nVENV={shlex.quote(str(venv))}\n"
              "eval \"$(sed -n '/^pipq() {/,/^}/p;/^editable() {/,/^}/p' tools/ci_env.sh)\"\n"
              "editable --no-build-isolation\n")
    p = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stdout + p.stderr == "", p.stdout + p.stderr
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import sglang_eagle3_ext; print(sglang_eagle3_ext.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert where.stdout.strip() == str(REPO / "sglang_eagle3_ext" / "__init__.py"), where.stderr


def test_pytest_prints_no_swig_deprecation_warning(tmp_path):
    """sentencepiece 0.2.1 (a SWIG binding; transformers imports it) made pytest print three
    "builtin type Swig... has no __module__ attribute" DeprecationWarnings, one after the summary.
    pyproject.toml ignores those two messages; without its settings they print."""
    pytest.importorskip("sentencepiece")
    (tmp_path / "test_sp.py").write_text("def test_import():\n    import sentencepiece  # noqa: F401\n")

    def run(*cfg: str) -> str:
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *cfg, "test_sp.py"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout[-2000:]
        return p.stdout + p.stderr

    assert "DeprecationWarning" in run("-c", os.devnull)  # without our settings: the warnings print
    out = run("-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path))
    assert "DeprecationWarning" not in out and "warning" not in out.lower(), out

