"""`launch` / `stop` against hostile surroundings (issue 23, cases 4, 10, 11, 18 and part of 20).

Servers are the stand-in (tests/standins/standin_sglang.py, "child" mode: a leader and a
grandchild in their own session, like SGLang's schedulers); every process group a test may stop
is one that the stand-in reported as its own (STANDIN_PIDFILE) and that still runs the stand-in.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_flags import write_model
from test_server import STANDINS, free_port, gone

import sglang_eagle3_ext
from sglang_eagle3_ext import cli
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.serve import server

PKG_ROOT = Path(sglang_eagle3_ext.__file__).resolve().parent.parent  # the CLI children run this code


@pytest.fixture()
def stand(tmp_path):
    """(preset path, env for the CLI, the STANDIN_PIDFILE); stops whatever the stand-in started."""
    target = write_model(tmp_path / "target", "LlamaForCausalLM")
    pids = tmp_path / "standin.pids"
    preset = tmp_path / "p.yaml"
    preset.write_text(json.dumps({
        "model": str(target), "no_spec": True, "port": free_port(), "server_module": "standin_sglang",
        "log": str(tmp_path / "server.log"), "sglang_check": False, "timeout": 60,
        "env": {"STANDIN_MODE": "child", "STANDIN_PIDFILE": str(pids), "SECRET_TOKEN": "hunter2-value",
                "PYTHONPATH": str(STANDINS)},
    }))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PKG_ROOT), str(STANDINS)]))
    yield preset, env, pids
    if pids.exists():  # a server a failing test left: its group, verified as the stand-in's
        leader = int(pids.read_text().split()[0])
        try:
            if leader > 1 and b"standin_sglang" in Path(f"/proc/{leader}/cmdline").read_bytes():
                os.killpg(leader, signal.SIGKILL)
        except OSError:
            pass


def _launch(preset: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "launch", str(preset), *extra],
                          env=env, capture_output=True, text=True, timeout=90, start_new_session=True)


def _stop(pid_file: Path, env: dict[str, str]) -> None:
    s = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "stop", "--pid-file", str(pid_file),
                        "--grace", "5"], env=env, capture_output=True, text=True, timeout=60)
    assert s.returncode == 0, s.stderr


@pytest.mark.parametrize("where", ["pid-file under a file", "cache variable is a file"])
def test_unwritable_pid_file_is_refused_before_the_server_starts(stand, tmp_path, where):
    """Case 4: before the fix the server started, then "unexpected OSError" and it ran on."""
    preset, env, pids = stand
    (tmp_path / "afile").write_text("x")
    if where == "pid-file under a file":
        r = _launch(preset, env, "--detach", "--pid-file", str(tmp_path / "afile" / "srv.json"))
    else:
        r = _launch(preset, dict(env, SGLANG_EAGLE3_CACHE=str(tmp_path / "afile")), "--detach")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "pid file" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "unexpected" not in r.stderr
    assert not pids.exists() and not (tmp_path / "server.log").exists()  # nothing was started


def test_pid_file_write_failing_after_ready_stops_the_server(stand, tmp_path, monkeypatch, capsys):
    """The folder passed the check and broke meanwhile: exit 1, and the server is gone."""
    preset, env, pids = stand
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])

    def broken(srv, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(server, "write_pid_file", broken)
    rc = cli.main(["launch", str(preset), "--detach", "--pid-file", str(tmp_path / "srv.json")])
    err = capsys.readouterr().err
    assert rc == 1 and "stopped the server" in err, err
    leader, child = map(int, pids.read_text().split())
    assert gone(leader)
    assert not Path(f"/proc/{child}").exists() or b"standin" not in Path(f"/proc/{child}/cmdline").read_bytes()


def test_pid_file_is_private_never_follows_a_planted_link_and_holds_no_env_values(stand, tmp_path):
    """Case 18: a symlink planted at the old temp name (<pid file>.tmp) is left alone, the pid file
    is 0600 and names the env variables without their values."""
    preset, env, pids = stand
    pid_file = tmp_path / "shared" / "server.json"
    pid_file.parent.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (pid_file.parent / "server.json.tmp").symlink_to(victim)
    r = _launch(preset, env, "--detach", "--pid-file", str(pid_file))
    assert r.returncode == 0, r.stderr
    try:
        assert victim.read_text() == "precious"
        assert stat.S_IMODE(pid_file.stat().st_mode) == 0o600
        text = pid_file.read_text()
        assert "hunter2-value" not in text
        info = json.loads(text)
        assert "SECRET_TOKEN" in info["env_names"] and "env" not in info
        assert server.read_pid_file(pid_file)["pgid"] == info["pgid"]
    finally:
        _stop(pid_file, env)
    assert gone(info["pgid"])


@pytest.mark.parametrize("value", ["nan", "inf", "NaN"])
def test_timeout_nan_or_inf_is_one_line(tmp_path, capsys, value):
    """Case 10: --timeout nan used to wait forever (nan <= 0 is False)."""
    target = write_model(tmp_path / "t", "LlamaForCausalLM")
    rc = cli.main(["launch", "--model", str(target), "--no-spec", "--timeout", value, "--no-sglang-check",
                   "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2 and "finite" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("yaml_value", [".nan", ".inf"])
def test_timeout_nan_in_a_preset_is_one_line(tmp_path, capsys, yaml_value):
    target = write_model(tmp_path / "t", "LlamaForCausalLM")
    p = tmp_path / "p.yaml"
    p.write_text(f"model: {target}\nno_spec: true\ntimeout: {yaml_value}\n")
    rc = cli.main(["launch", str(p), "--no-sglang-check", "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2 and "timeout" in err and len(err.strip().splitlines()) == 1, err


def test_dry_run_env_lines_are_paste_safe(tmp_path, capsys):
    """Case 11: pasted into bash, the printed env block exports exactly the preset's values."""
    target = write_model(tmp_path / "t", "LlamaForCausalLM")
    values = {"MY_TOKEN": "it's a \"quoted\" $HOME `date` value; touch x", "EMPTYISH": " ", "PLAIN": "1"}
    p = tmp_path / "p.yaml"
    p.write_text(json.dumps({"model": str(target), "no_spec": True, "env": values}))
    assert cli.main(["launch", str(p), "--no-sglang-check", "--dry-run"]) == 0
    text = capsys.readouterr().out
    block = text.split("# command")[0]
    show = f"import os, json; print(json.dumps({{k: os.environ.get(k) for k in {sorted(values)!r}}}))"
    script = block + "\n" + shlex.join([sys.executable, "-c", show])
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == values
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("key", ["A=B", "X;touch FILE", "1ABC", "has space", ""])
def test_bad_env_names_are_refused_before_anything_is_created(tmp_path, capsys, key):
    target = write_model(tmp_path / "t", "LlamaForCausalLM")
    p = tmp_path / "p.yaml"
    log = tmp_path / "logs" / "server.log"
    p.write_text(json.dumps({"model": str(target), "no_spec": True, "log": str(log), "env": {key: "v"},
                             "port": free_port(), "sglang_check": False}))
    rc = cli.main(["launch", str(p)])
    err = capsys.readouterr().err
    assert rc == 2 and "not a valid environment variable name" in err, err
    assert not log.parent.exists()


def test_pgid_beyond_any_pid_is_one_line(tmp_path, capsys):
    """Case 20: a pgid of 2**63 raised OverflowError in killpg ("a bug in sgl-eagle3")."""
    f = tmp_path / "srv.json"
    f.write_text(json.dumps({"pid": 2**63, "pgid": 2**63, "argv": [sys.executable, "-m", "sglang.launch_server"]}))
    with pytest.raises(UserError, match="not a server group"):
        server.read_pid_file(f)  # never signals: read first, refuse
    assert cli.main(["stop", "--pid-file", str(f)]) == 2
    err = capsys.readouterr().err
    assert "unexpected" not in err and len(err.strip().splitlines()) == 1, err


def test_cache_path_of_an_unknown_user_is_one_line(monkeypatch, capsys):
    """Case 20: SGLANG_EAGLE3_CACHE=~nouser/x raised RuntimeError from expanduser."""
    monkeypatch.setenv("SGLANG_EAGLE3_CACHE", "~no-such-user-here/x")
    assert cli.main(["stop", "--all"]) == 2
    err = capsys.readouterr().err
    assert "unknown user" in err and "unexpected" not in err and len(err.strip().splitlines()) == 1, err


def test_sighup_to_a_foreground_launch_stops_the_server(stand):
    """A closed terminal (SIGHUP) takes the Ctrl-C path too (interrupts.as_interrupt)."""
    import time

    preset, env, pids = stand
    proc = subprocess.Popen([sys.executable, "-m", "sglang_eagle3_ext", "launch", str(preset)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and pids.read_text().strip()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        leader = int(pids.read_text().split()[0])
        os.killpg(proc.pid, signal.SIGHUP)  # the launcher's own session, never the server's
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert gone(leader)
