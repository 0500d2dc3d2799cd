"""`stop` signals only a process group it recorded and can verify (defect 3 of issue 18).

Every case runs the real CLI in its own session, so a regression that signals "group 0" (its own
group) kills only that child, never pytest; a real `sleep` group stands for the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.serve import server


def _stop(pid_file) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "stop", "--pid-file", str(pid_file),
                           "--grace", "1"], capture_output=True, text=True, timeout=60,
                          start_new_session=True)


@pytest.fixture()
def victim():
    """A live process group (its own session) that a bad pid file might point at."""
    p = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield p
    p.kill()
    p.wait()


def _alive(p: subprocess.Popen) -> bool:
    return p.poll() is None


@pytest.mark.parametrize("info", [
    {"pgid": 0, "argv": [sys.executable, "-m", "sglang.launch_server"]},
    {"pgid": -1, "argv": [sys.executable, "-m", "sglang.launch_server"]},
], ids=["pgid0", "pgid-1"])
def test_bad_pgid_is_one_line_and_signals_nothing(tmp_path, info):
    """Only cases a regression cannot turn into kill(-1, ...): pgid 0 is the child's own group
    (its own session here), pgid -1 is EINVAL for killpg."""
    f = tmp_path / "srv.json"
    f.write_text(json.dumps(info))
    r = _stop(f)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f.exists()


@pytest.mark.parametrize("pgid", [1, True, "123", 5.0, None])
def test_pgid_that_would_reach_every_process_is_refused_before_any_signal(tmp_path, pgid):
    """pgid 1 (or True == 1) would be kill(-1, sig): every process of the user. Checked in
    process on read_pid_file alone, which never signals, so a regression cannot hurt the box."""
    f = tmp_path / "srv.json"
    f.write_text(json.dumps({"pid": pgid, "pgid": pgid, "argv": [sys.executable, "-m", "x"]}))
    with pytest.raises(UserError) as e:
        server.read_pid_file(f)
    assert e.value.exit_code == 2


def test_missing_argv_refuses_a_live_group(tmp_path, victim):
    f = tmp_path / "srv.json"
    f.write_text(json.dumps({"pid": victim.pid, "pgid": victim.pid, "url": "http://x"}))
    r = _stop(f)
    assert r.returncode == 2 and "cannot be verified" in r.stderr, r.stderr
    time.sleep(0.2)
    assert _alive(victim)


def test_pid_other_than_pgid_refused(tmp_path, victim):
    f = tmp_path / "srv.json"
    f.write_text(json.dumps({"pid": os.getpid(), "pgid": victim.pid,
                             "argv": ["python", "-m", "sleep"]}))
    r = _stop(f)
    assert r.returncode == 2 and "not touching it" in r.stderr, r.stderr
    assert _alive(victim)


def test_group_running_another_program_refused(tmp_path, victim):
    f = tmp_path / "srv.json"
    f.write_text(json.dumps({"pid": victim.pid, "pgid": victim.pid,
                             "argv": [sys.executable, "-m", "sglang.launch_server"]}))
    r = _stop(f)
    assert r.returncode == 1 and "another program" in r.stderr, r.stderr
    assert _alive(victim)


def test_verified_group_is_stopped(tmp_path):
    """The positive case: a leader running ``python -m <module>`` as recorded is stopped."""
    p = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"],
                         start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # reap it as soon as it dies (a detached server is reparented; a zombie child of pytest would
    # keep its group "alive")
    threading.Thread(target=p.wait, daemon=True).start()
    try:
        f = tmp_path / "srv.json"
        f.write_text(json.dumps({"pid": p.pid, "pgid": p.pid, "url": "u",
                                 "argv": [sys.executable, "-m", "http.server"]}))
        time.sleep(0.3)
        r = _stop(f)
        assert r.returncode == 0 and "stopped" in r.stdout, r.stderr
        assert p.wait(timeout=10) is not None and not f.exists()
    finally:
        p.kill()
        p.wait()
