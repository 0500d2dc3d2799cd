"""Process control with real subprocesses: stand-in servers (tests/standins/standin_sglang.py) for
crash-at-start, never-healthy, fallback health endpoint, group stop (SIGKILL escalation), Ctrl-C /
SIGTERM of `sgl-eagle3 launch`, detach + stop; plus ONE real SGLang 0.5.23 server on CPU."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, requires_sglang, sigint_default, subprocess_env
from test_flags import write_model

from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.serve import server

STANDINS = Path(__file__).parent / "standins"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gone(pgid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not server.pgid_alive(pgid):
            return True
        time.sleep(0.05)
    return False


@contextlib.contextmanager
def detached_cpu_server(tmp_path: Path, extra_env: dict[str, str], extra_args: list[str]):
    """A real non-speculative SGLang CPU server on the tiny target, started with our own
    `launch --detach` and stopped with `stop` (whose exit and the group's end are checked).
    Yields (port, log path, pid-file info, env)."""
    from sglang_eagle3_ext import tiny

    env = subprocess_env(sgl_kernel=True, extra={"SGLANG_USE_CPU_ENGINE": "1", **extra_env})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env["PYTHONPATH"]])
    models = tiny.build(tmp_path / "tiny", acceptance="random")
    port, pid_file, log = free_port(), tmp_path / "srv.json", tmp_path / "server.log"
    argv = [sys.executable, "-m", "sglang_eagle3_ext", "launch", "--no-spec", "--model", str(models.target),
            "--port", str(port), "--log", str(log), "--timeout", "240", "--no-sglang-check", "--detach",
            "--pid-file", str(pid_file),
            # exported probe settings reach a server only with --profile (stepenv: never stray probes)
            *(["--profile"] if extra_env.get("EAGLE3_PROFILE") == "1" else []),
            "--", "--device", "cpu", "--mem-fraction-static", "0.05",
            "--max-total-tokens", "2048", *extra_args]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:] + (log.read_text()[-3000:] if log.exists() else "")
    info = json.loads(pid_file.read_text())
    try:
        yield port, log, info, env
    finally:
        s = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "stop", "--pid-file", str(pid_file)],
                           env=env, capture_output=True, text=True, timeout=60)
    assert s.returncode == 0, s.stderr
    assert gone(info["pgid"], within=10)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it holds no resources and no group membership that matters
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture()
def standin(tmp_path):
    target = write_model(tmp_path / "target", "LlamaForCausalLM")

    def make(mode: str, **kw) -> server.LaunchConfig:
        env = {"STANDIN_MODE": mode, "PYTHONPATH": str(STANDINS), "STANDIN_PIDFILE": str(tmp_path / "pids")}
        return server.LaunchConfig(model=str(target), no_spec=True, port=free_port(), server_module="standin_sglang",
                                   log=str(tmp_path / f"{mode}.log"), env=env, sglang_check=False, **kw)
    return make


def pids(tmp_path) -> tuple[int, int]:
    a, b = (tmp_path / "pids").read_text().split()
    return int(a), int(b)


def test_healthy_status_and_group_stop(standin, tmp_path):
    seen: list[str] = []
    srv = server.Server(standin("child"), on_status=seen.append)
    with srv:
        assert srv.status == "ready" and srv.health_path == "/health"
        leader, child = pids(tmp_path)
        assert os.getpgid(child) == srv.pgid == leader
        with urllib.request.urlopen(srv.url + "/health", timeout=2) as r:
            assert r.status == 200
    assert gone(srv.pgid) and not pid_alive(child)
    for label in ("loading weights", "capturing CUDA graphs", "ready"):
        assert label in seen, seen
    log = srv.log_path.read_text()
    assert "--model-path" in log and "--no-spec" not in log  # argv reached the server as a list


def test_crash_at_start(standin):
    srv = server.Server(standin("crash"))
    with pytest.raises(server.ServerFailed) as ei:
        srv.start()
    assert ei.value.exit_code == 1 and "exited with code 3" in str(ei.value)
    assert any("standin crash while loading weights" in ln for ln in ei.value.log_tail)
    assert len(ei.value.log_tail) <= server.TAIL_LINES
    assert gone(srv.pgid)


def test_never_healthy_times_out(standin):
    srv = server.Server(standin("never", timeout=2.0))
    t0 = time.monotonic()
    with pytest.raises(server.ServerFailed, match="not healthy after 2 s"):
        srv.start()
    assert time.monotonic() - t0 < 120 and gone(srv.pgid)  # a hang guard (the health wait is 2 s)


def test_health_fallback_endpoint(standin):
    with server.Server(standin("no_health")) as srv:
        assert srv.health_path == "/v1/models"
    assert gone(srv.pgid)


def test_sigkill_after_grace(standin, tmp_path):
    srv = server.Server(standin("stubborn"), grace=1.0)
    srv.start()
    _, child = pids(tmp_path)
    t0 = time.monotonic()
    srv.stop()
    assert 0.9 < time.monotonic() - t0 < 10
    assert gone(srv.pgid) and not pid_alive(child)


def test_port_in_use_refused(standin):
    cfg = standin("healthy")
    with socket.socket() as s:
        s.bind(("127.0.0.1", cfg.port))
        s.listen()
        srv = server.Server(cfg)
        with pytest.raises(UserError, match="already in use") as ei:
            srv.start()
    assert ei.value.exit_code == 2 and srv.proc is None and not srv.log_path.exists()


def launch_cli(cfg: server.LaunchConfig, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sglang_eagle3_ext", "launch", "--model", cfg.model, "--no-spec",
            "--port", str(cfg.port), "--log", cfg.log, "--server-module", cfg.server_module,
            "--no-sglang-check", *extra]


def cli_env(cfg: server.LaunchConfig) -> dict[str, str]:
    env = dict(os.environ, **cfg.env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(STANDINS)])
    return env


def wait_for(proc: subprocess.Popen, needle: str, timeout: float = 30) -> str:
    out = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        out += line
        if needle in line:
            return out
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"{needle!r} not seen; got {out!r}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cli_signal_stops_group(standin, tmp_path, sig):
    cfg = standin("child")
    proc = subprocess.Popen(launch_cli(cfg), env=cli_env(cfg), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=sigint_default)
    try:
        out = wait_for(proc, "ready:")
        assert "[launch] loading weights" in out  # status lines (no tty: plain lines)
        leader, child = pids(tmp_path)
        proc.send_signal(sig)  # Ctrl-C reaches only the launcher: the server has its own session
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert gone(leader) and not pid_alive(child)


def test_cli_crash_prints_tail_exit_1(standin):
    cfg = standin("crash")
    p = subprocess.run(launch_cli(cfg), env=cli_env(cfg), capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "last" in p.stderr and "standin crash while loading weights" in p.stderr
    assert "error: server exited with code 3" in p.stderr


def test_cli_detach_and_stop(standin, tmp_path):
    cfg = standin("child")
    pid_file = tmp_path / "srv.json"
    p = subprocess.run(launch_cli(cfg, "--detach", "--pid-file", str(pid_file)), env=cli_env(cfg),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    info = json.loads(pid_file.read_text())
    assert info["url"] == f"http://127.0.0.1:{cfg.port}" and info["log"] == cfg.log
    assert server.pgid_alive(info["pgid"])  # outlived the launcher
    leader, child = pids(tmp_path)
    s = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "stop", "--pid-file", str(pid_file),
                        "--grace", "5"], env=cli_env(cfg), capture_output=True, text=True, timeout=60)
    assert s.returncode == 0, s.stderr
    assert "stopped" in s.stdout and not pid_file.exists()
    assert gone(info["pgid"]) and not pid_alive(child)


# ------------------------------------------------------------------ one real SGLang server on CPU

@pytest.mark.slow
@pytest.mark.sglang
@requires_sglang
def test_real_sglang_cpu_server(tmp_path):
    """`sgl-eagle3 launch --no-spec` starting real SGLang 0.5.23 on CPU (sgl_kernel stub, reference
    sglang-on-cpu.md 2d), one /generate, then `sgl-eagle3 stop`. EAGLE3 itself needs a GPU.

    With EAGLE3_PROFILE and EAGLE3_PROFILE_TOGGLE=SIGUSR2 set, our plugin loads the probes in the
    scheduler, which installs the toggle: two real SIGUSR2 (pause, resume) leave it serving (a
    process without the handler would be terminated by SIGUSR2)."""
    with detached_cpu_server(tmp_path, {"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_TOGGLE": "SIGUSR2"},
                             []) as (port, log, info, _env):
        _toggle_checks(port, log, info)


def _toggle_checks(port: int, log: Path, info: dict) -> None:
    def generate() -> dict:
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/generate", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}).encode())
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    assert generate()["meta_info"]["completion_tokens"] >= 1
    assert "fired up and ready to roll" in log.read_text()
    pids = server.scheduler_pids(info["pgid"])
    assert len(pids) == 1
    for _ in range(2):
        os.kill(pids[0], signal.SIGUSR2)
        time.sleep(0.5)
    assert generate()["meta_info"]["completion_tokens"] >= 1
    text = log.read_text()
    assert "paused by signal" in text and "resumed by signal" in text
