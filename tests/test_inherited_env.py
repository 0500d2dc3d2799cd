"""What our commands' servers inherit from the shell: an exported SGLANG_EAGLE3_NCCL, aux-layer
override or probe setting never silently reaches a server (serve/stepenv.py). Real subprocesses:
the "server" is a stand-in module that writes the environment it received."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from test_flags import write_model
from test_launch import model_env, no_popen, run_cli  # noqa: F401  (fixtures)
from test_scan import _free_port

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.serve import server
from sglang_eagle3_ext.serve.launch_config import LaunchConfig

ENV_DUMP = """
import json, os, sys, time
out = sys.argv[sys.argv.index("--model-path") + 1]
with open(out + ".tmp", "w") as f:
    json.dump(dict(os.environ), f)
os.rename(out + ".tmp", out)
time.sleep(30)
"""


def _child_env(tmp_path: Path, environ: dict[str, str], **cfg_values) -> dict[str, str]:
    """Start a stand-in server with ``environ`` as the shell's environment; return what it got."""
    (tmp_path / "envdump_standin.py").write_text(ENV_DUMP)
    dump = tmp_path / "env.json"
    cfg = LaunchConfig(model=str(dump), no_spec=True, log=str(tmp_path / "s.log"), port=_free_port(),
                       python=sys.executable, server_module="envdump_standin", **cfg_values)
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    srv = server.Server(cfg, environ={**base, **environ})
    try:
        srv.start(wait=False)
        deadline = time.monotonic() + 30
        while not dump.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return json.loads(dump.read_text())
    finally:
        srv.stop(grace=1)


STRAY = {"SGLANG_EAGLE3_NCCL": "tuned", "EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_OUT": "/tmp/stray.jsonl",
         "EAGLE3_PROFILE_EVERY": "7", "EAGLE3_PROFILE_SPEC": "9,9,9", "EAGLE3_PROFILE_TOGGLE": "SIGUSR2"}


def test_exported_nccl_and_probes_never_reach_a_plain_server(tmp_path):
    """--nccl none and no --profile: the exported preset name and every probe setting are dropped
    (was: passed on, so a `nccl: [none, tuned]` sweep measured tuned against tuned and stray
    probes appended to one file). Other variables still pass."""
    env = _child_env(tmp_path, {**STRAY, "MY_OWN": "kept"}, nccl="none")
    assert not set(STRAY) & set(env), sorted(set(STRAY) & set(env))
    assert env["MY_OWN"] == "kept"


def test_profile_server_gets_its_own_values_and_the_exported_knobs(tmp_path):
    """With --profile: EAGLE3_PROFILE / _SPEC / _OUT / _EVERY come from the launch's flags; probe
    settings no flag sets (the toggle signal, as the profiling guide asks) are inherited."""
    out = tmp_path / "p.jsonl"
    env = _child_env(tmp_path, STRAY, profile=True, profile_out=str(out), nccl="none")
    assert env["EAGLE3_PROFILE"] == "1" and env["EAGLE3_PROFILE_OUT"] == str(out)
    assert env["EAGLE3_PROFILE_TOGGLE"] == "SIGUSR2" and env["EAGLE3_PROFILE_EVERY"] == "7"
    assert "EAGLE3_PROFILE_SPEC" not in env and "SGLANG_EAGLE3_NCCL" not in env  # no spec: none set


@pytest.mark.parametrize("value", ["2,30,58", "emb,1"])
def test_exported_aux_layers_is_refused_by_server_start(tmp_path, value):
    """A stray SGLANG_EAGLE3_AUX_LAYERS would rewire every draft: refused before anything spawns,
    unless the launch sets its own (--aux-layers wins)."""
    cfg = LaunchConfig(model=str(tmp_path), no_spec=True, log=str(tmp_path / "s.log"), port=_free_port())
    with pytest.raises(UserError, match="SGLANG_EAGLE3_AUX_LAYERS set in this shell") as ei:
        server.Server(cfg, environ={"SGLANG_EAGLE3_AUX_LAYERS": value}).start(wait=False)
    assert ei.value.exit_code == 2 and "unset SGLANG_EAGLE3_AUX_LAYERS" in str(ei.value)
    assert not (tmp_path / "s.log").exists()
    env = _child_env(tmp_path, {"SGLANG_EAGLE3_AUX_LAYERS": value}, aux_layers="1,2")
    assert env["SGLANG_EAGLE3_AUX_LAYERS"] == "1,2"


def test_commands_refuse_an_exported_aux_override(model_env, tmp_path, capsys, monkeypatch):  # noqa: F811
    """launch (its dry run too) and sweep refuse with one line, exit 2, nothing written."""
    monkeypatch.setenv("SGLANG_EAGLE3_AUX_LAYERS", "2,30,58")
    t = f"{model_env['SGLANG_EAGLE3_TINY']}/target"
    for argv in (["launch", "--model", t, "--no-spec", "--dry-run", "--no-sglang-check"],
                 ["sweep", str(REPO / "examples/sweep-tiny.yaml"), "--out", str(tmp_path / "sw")]):
        rc, out, err = run_cli(argv, capsys)
        assert rc == 2 and "SGLANG_EAGLE3_AUX_LAYERS set in this shell" in err, (argv, err)
        assert len(err.strip().splitlines()) == 1 and "\nexport" not in out
    assert not (tmp_path / "sw").exists()
    # the launch's own --aux-layers wins over the exported one: no refusal
    d = f"{model_env['SGLANG_EAGLE3_TINY']}/draft"
    rc, out, err = run_cli(["launch", "--model", t, "--draft", d, "--steps", "2", "--topk", "1", "--draft-tokens",
                            "3", "--aux-layers", "0,1,2", "--dry-run", "--no-sglang-check"], capsys)
    assert rc == 0 and "export SGLANG_EAGLE3_AUX_LAYERS=0,1,2" in out, err


def test_dry_run_names_what_it_drops_and_inherits(model_env, capsys, monkeypatch, no_popen):  # noqa: F811
    """Was "# env additions: none" while the shell's SGLANG_EAGLE3_NCCL=tuned and probes would
    reach the server: the dry run prints an `unset` line (pasted, the shell then runs what the
    launch runs) and a note; with --profile it names the probe settings it inherits."""
    for k, v in STRAY.items():
        monkeypatch.setenv(k, v)
    t = f"{model_env['SGLANG_EAGLE3_TINY']}/target"
    rc, out, err = run_cli(["launch", "--model", t, "--no-spec", "--dry-run", "--no-sglang-check"], capsys)
    assert rc == 0, err
    unset = next(line for line in out.splitlines() if line.startswith("unset "))
    assert set(unset.split()[1:]) == set(STRAY)
    assert "SGLANG_EAGLE3_NCCL='tuned' exported in this shell is not passed to the server" in err
    assert "without --profile the probes stay off" in err
    rc, out, err = run_cli(["launch", "--model", t, "--no-spec", "--profile", "--dry-run", "--no-sglang-check"],
                           capsys)
    assert rc == 0 and "# inherited from this shell" in out and "EAGLE3_PROFILE_TOGGLE=SIGUSR2" in out
    assert "export EAGLE3_PROFILE=1" in out
    unset = next(line for line in out.splitlines() if line.startswith("unset "))
    assert set(unset.split()[1:]) == {"SGLANG_EAGLE3_NCCL", "EAGLE3_PROFILE_SPEC"}


def test_sweep_scan_demo_say_what_their_servers_do_not_get(tmp_path, capsys, monkeypatch):
    """The commands that start servers of their own say once what they drop."""
    from sglang_eagle3_ext.serve.stepenv import command_notes

    monkeypatch.setenv("SGLANG_EAGLE3_NCCL", "tuned")
    monkeypatch.setenv("EAGLE3_PROFILE_OUT", "/tmp/x.jsonl")
    notes = command_notes("sweep")
    assert len(notes) == 2 and "not passed to the servers it starts" in notes[0]
    monkeypatch.setenv("SGLANG_EAGLE3_HOLD", "8")  # still refused first, in one line
    rc = cli.main(["demo", "--out", str(tmp_path / "demo"), "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_layers_check_does_not_credit_an_exported_override_to_the_flag(tmp_path, capsys, monkeypatch):
    """`layers check` with SGLANG_EAGLE3_AUX_LAYERS exported: the rule line names the variable
    (was: "--aux-layers 2,30,58 (our override ...)", a flag nobody gave)."""
    target = write_model(tmp_path / "t", "LlamaForCausalLM", num_hidden_layers=32)
    draft = write_model(tmp_path / "d", "LlamaForCausalLMEagle3", num_hidden_layers=1)
    monkeypatch.setenv("SGLANG_EAGLE3_AUX_LAYERS", "2,16,29")
    cli.main(["layers", "check", "--target", str(target), "--draft", str(draft), "--sglang-version", "0.5.23"])
    text = capsys.readouterr().out
    assert "--aux-layers 2,16,29" not in text.replace("launch --aux-layers", "")
    assert "SGLANG_EAGLE3_AUX_LAYERS=2,16,29 exported in this shell" in text
    cli.main(["layers", "check", "--target", str(target), "--draft", str(draft), "--sglang-version", "0.5.23",
              "--aux-layers", "2,16,29"])
    assert "--aux-layers 2,16,29 (our override" in capsys.readouterr().out


def test_launch_says_preset_file_and_a_profile_out_that_holds_records(model_env, tmp_path, capsys,  # noqa: F811
                                                                      monkeypatch, no_popen):  # noqa: F811
    """SGLANG_EAGLE3_PRESETS: the launch names the file it read; --profile-out naming a file that
    already holds window records says a server appends after them."""
    presets = tmp_path / "mypresets"
    presets.mkdir()
    (presets / "tiny.yaml").write_text(f"model: {model_env['SGLANG_EAGLE3_TINY']}/target\nno_spec: true\n")
    monkeypatch.setenv("SGLANG_EAGLE3_PRESETS", str(presets))
    prof = tmp_path / "p.jsonl"
    prof.write_text('{"schema": "eagle3_prof/3", "window": 1}\n{"schema": "eagle3_prof/3", "window": 2}\n')
    rc, out, err = run_cli(["launch", "tiny", "--profile", "--profile-out", str(prof), "--dry-run",
                            "--no-sglang-check"], capsys)
    assert rc == 0, err
    assert f"preset tiny: read {presets / 'tiny.yaml'}" in err
    assert "already holds 2 window record(s)" in err


@pytest.mark.parametrize("flag", ["--profile-out", "--log"])
def test_unknown_users_home_is_one_line(model_env, capsys, flag, no_popen):  # noqa: F811
    """Was: "unexpected RuntimeError at pathlib.py ... (a bug in sgl-eagle3)"."""
    t = f"{model_env['SGLANG_EAGLE3_TINY']}/target"
    rc, out, err = run_cli(["launch", "--model", t, "--no-spec", "--profile", flag, "~nouser_xyz/f",
                            "--dry-run", "--no-sglang-check"], capsys)
    assert rc == 2 and f"{flag} ~nouser_xyz/f: names the home folder of an unknown user" in err, err
    assert "a bug" not in err


def test_profile_out_fifo_or_folder_is_never_read_for_the_note(model_env, tmp_path, capsys, no_popen):  # noqa: F811
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t = f"{model_env['SGLANG_EAGLE3_TINY']}/target"
    for target in (fifo, tmp_path):
        rc, out, err = run_cli(["launch", "--model", t, "--no-spec", "--profile", "--profile-out", str(target),
                                "--dry-run", "--no-sglang-check"], capsys)
        assert "already holds" not in err and "a bug" not in err, err
