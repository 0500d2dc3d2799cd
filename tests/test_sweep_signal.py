"""SIGTERM (then SIGHUP, a closed terminal) to `sweep` mid-configuration stops that configuration's server, and `--resume` works
after (issue 23, case 5). Before the fix the sweep died at once, its server (own session) ran on
holding the port, `--resume` failed on the busy port and `stop --all` saw nothing.

Real processes: the sweep CLI in its own session, the real default factory (flags.validate on the
pinned 0.5.23 tree, server.Server), the stand-in SGLang in "never" mode (HTTP up, /health 503),
so the signal always lands while the config waits for its server. The only group signalled by
the test itself is the sweep's (the CLI child's own session); the stand-in's is checked, and
killed in cleanup only if it is still the stand-in.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_flags import write_model
from test_server import STANDINS, free_port, gone

import sglang_eagle3_ext
from sglang_eagle3_ext.serve import releases

PKG_ROOT = Path(sglang_eagle3_ext.__file__).resolve().parent.parent


def _sweep(spec: Path, out: Path, env: dict[str, str], *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sglang_eagle3_ext", "sweep", str(spec), "--out", str(out),
                             "--sglang-root", str(releases.fetch("0.5.23")), "--no-plots", *extra],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _leader_once_up(pids: Path, proc: subprocess.Popen, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pids.exists() and pids.read_text().strip():
            return int(pids.read_text().split()[0])
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    raise AssertionError("the stand-in server never came up")


def _kill_if_standin(pgid: int) -> None:
    try:
        if pgid > 1 and b"standin_sglang" in Path(f"/proc/{pgid}/cmdline").read_bytes():
            os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def test_sigterm_stops_the_server_and_resume_works(tmp_path):
    target = write_model(tmp_path / "target", "LlamaForCausalLM")
    draft = write_model(tmp_path / "draft", "LlamaForCausalLMEagle3")
    pids = tmp_path / "standin.pids"
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps({
        "name": "term",
        "launch": {"model": str(target), "draft": str(draft), "port": free_port(),
                   "server_module": "standin_sglang", "sglang_check": False, "timeout": 60,
                   "env": {"STANDIN_MODE": "never", "STANDIN_PIDFILE": str(pids), "PYTHONPATH": str(STANDINS)}},
        "matrix": {"steps": [1], "topk": [1]},
        "bench": {"runs": 1, "warmup": 0, "max_tokens": 4},
    }))
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PKG_ROOT), str(STANDINS)]))
    leaders: list[int] = []
    try:
        for extra, sig in (((), signal.SIGTERM), (("--resume",), signal.SIGHUP)):
            pids.unlink(missing_ok=True)
            proc = _sweep(spec, out, env, *extra)
            leaders.append(_leader_once_up(pids, proc))
            time.sleep(0.3)  # inside wait_healthy
            os.killpg(proc.pid, sig)  # the sweep's own session (start_new_session)
            text = proc.communicate(timeout=60)[0]
            assert proc.returncode == 130, text
            assert "Traceback" not in text and "unexpected" not in text, text
            assert gone(leaders[-1]), f"the server outlived the sweep: {text}"
            doc = json.loads((out / "results.json").read_text())
            assert [c["status"] for c in doc["configs"]] == ["interrupted"], doc["configs"]
            assert "already in use" not in text  # the resume found the port free
        assert leaders[0] != leaders[1]  # --resume started the interrupted config again
    finally:
        for pgid in leaders:
            _kill_if_standin(pgid)
