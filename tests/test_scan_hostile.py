"""scan and the scan's readers under hostile use (issue 34): a scan that measures nothing, signals,
exported step-control variables, step bounds, --out, the policy's main cells.

What is faked and why: no GPU, so the server is tests/standins/standin_scan.py (a real subprocess,
started by the real server.Server from the argv and env the scan builds; see tests/test_scan.py),
and a server that ignores SIGTERM is that stand-in with STANDIN_SCAN_IGNORE_TERM=1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, sigint_default
from test_flags import write_model
from test_scan import STANDINS, _argv, _free_port

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import scan_doc
from sglang_eagle3_ext.runtime import policy

ENV_PP = f"{STANDINS}:{REPO}"


@pytest.fixture()
def models(tmp_path):
    return (str(write_model(tmp_path / "target", "LlamaForCausalLM")),
            str(write_model(tmp_path / "draft", "LlamaForCausalLMEagle3", num_hidden_layers=1,
                            draft_vocab_size=512)))


@pytest.fixture()
def on_path(monkeypatch):
    from sglang_eagle3_ext.commands import console

    monkeypatch.setenv("PYTHONPATH", ENV_PP)  # the stand-in runs this worktree's hold decider
    monkeypatch.setattr(console.out, "width", 250)


# ------------------------------------------------------------------ case 4: main cells kept


def _c(steps, bs, level, cycles, ms, rates=(0.8, 0.6, 0.4)):
    al = policy.expected_tokens(list(rates), steps)
    return {"steps": steps, "bs": bs, "level": level, "cycles": cycles, "cycle_ms": ms, "accept_len": al,
            "per_position": list(rates[:steps]), "graph": True}


def test_34_4_a_levels_thin_main_cell_is_kept():
    """The 3-step cell at batch 8 (10 cycles, 4.8 ms) is that level's measurement: kept, so the
    policy picks 2 steps there (the scan's best), not 3 costed from batch 1's 3.4 ms."""
    cells = [_c(1, 1, 1, 40, 2.5), _c(2, 1, 1, 40, 2.95), _c(3, 1, 1, 20, 3.4),
             _c(1, 8, 8, 30, 3.2), _c(2, 8, 8, 30, 4.0), _c(3, 8, 8, 10, 4.8),
             _c(3, 5, 8, 3, 4.1)]  # a drain cell (bs 5 while level 8 finished): between 1 and 8
    doc = {"schema": policy.SCHEMA, "cells": cells}
    table = policy.table_from_doc(doc, graph_bs=None)
    assert table.cycle_ms(3, 8) == pytest.approx(4.8)           # measured, not extrapolated
    best, _ = policy.PolicyDecider(table).best(8, [1, 2, 3])
    assert best == 2
    assert all(c["steps"] != 3 or c["bs"] != 5 for c in scan_doc.main_cells(doc))
    assert (3, 5) not in {(s, b) for s, b, *_ in table.cells}   # the thin drain cell bracketed: dropped
    # a thin drain cell outside its step count's measured span is kept (its only cost there)
    t2 = policy.table_from_doc({"schema": policy.SCHEMA, "cells": [_c(2, 8, 8, 30, 4.0), _c(2, 3, 8, 4, 3.0),
                                                                   _c(1, 8, 8, 30, 3.2)]}, graph_bs=None)
    assert t2.cycle_ms(2, 3) == pytest.approx(3.0)


# ------------------------------------------------------------------ case 3: exported step-control env


@pytest.mark.parametrize("name,value", [("SGLANG_EAGLE3_HOLD", "32"), ("SGLANG_EAGLE3_POLICY", "/old/scan.json"),
                                        ("SGLANG_EAGLE3_HOLD_STEPS", "3,2,1")])
def test_34_3_exported_step_control_is_refused_by_every_server_command(models, tmp_path, capsys, monkeypatch,
                                                                      name, value):
    """An exported SGLANG_EAGLE3_HOLD / _POLICY (the plugin reads them in every SGLang process)
    never silently drives a server: launch (a plain --adaptive one too), scan (its dry run too),
    sweep and demo refuse with one line naming it, before anything starts."""
    monkeypatch.setenv(name, value)
    target, draft = models
    adaptive = tmp_path / "a.json"
    adaptive.write_text(json.dumps({"1": {"candidate_steps": [1, 2, 3]}}))
    root = str(Path(_argv(models, tmp_path)[2]))
    runs = {
        "launch": ["launch", "--sglang-root", root, "--model", target, "--draft", draft, "--adaptive", str(adaptive),
                   "--no-sglang-check", "--port", str(_free_port())],
        "launch --dry-run": ["launch", "--sglang-root", root, "--model", target, "--no-spec", "--dry-run",
                             "--no-sglang-check"],
        "scan --dry-run": _argv(models, tmp_path / "scan", "--dry-run"),
        "sweep": ["sweep", str(REPO / "examples/sweep-tiny.yaml"), "--out", str(tmp_path / "sw")],
        "demo": ["demo", "--out", str(tmp_path / "demo"), "--dry-run"],
    }
    for what, argv in runs.items():
        rc = cli.main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and f"{name} set in this shell's environment" in err and f"unset {name}" in err, (what, err)
        assert len(err.strip().splitlines()) == 1, (what, err)
    assert not (tmp_path / "scan" / "server.log").exists() and not (tmp_path / "sw").exists()
    assert not (tmp_path / "demo").exists()


def test_34_3_server_start_refuses_for_any_caller(tmp_path):
    """The last line: Server.start itself refuses a shell's step-control variable its config does
    not set (a caller that skipped the command's check: tools/gpu, tests), before spawning."""
    from sglang_eagle3_ext.runtime.errors import UserError
    from sglang_eagle3_ext.serve import server
    from sglang_eagle3_ext.serve.launch_config import LaunchConfig

    cfg = LaunchConfig(model=str(tmp_path), no_spec=True, log=str(tmp_path / "s.log"), port=_free_port())
    with pytest.raises(UserError, match="SGLANG_EAGLE3_HOLD set"):
        server.Server(cfg, environ={"SGLANG_EAGLE3_HOLD": "8"}).start(wait=False)
    assert not (tmp_path / "s.log").exists()
    cfg.env["SGLANG_EAGLE3_HOLD"] = "8"  # the server's own (what scan sets): allowed, past this check
    srv = server.Server(cfg, environ={"SGLANG_EAGLE3_HOLD": "8", "PATH": os.environ["PATH"]})
    cfg.python = sys.executable
    cfg.server_module = "nonexistent_module_for_the_test"
    try:
        srv.start(wait=False)
    finally:
        srv.stop(grace=1)


def test_34_3_dry_run_says_what_the_exported_variable_would_do(models, tmp_path, capsys):
    """The scan's dry run prints the hold variables as export lines: it says, next to them, that
    every SGLang process of that shell would run the hold schedule afterwards."""
    assert cli.main(_argv(models, tmp_path / "o", "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "# SGLANG_EAGLE3_HOLD makes EVERY SGLang process started from that shell hold" in out
    assert "unset SGLANG_EAGLE3_HOLD" in out


# ------------------------------------------------------------------ case 1: a scan that measures nothing


def test_34_1_short_runs_keep_driving_until_covered(models, tmp_path, capsys, on_path):
    """Runs shorter than one probe window (64 tokens, windows of 100 cycles): the level is not
    stopped with "no steady cycle ... while the others reached" (there were no others); it goes on
    until every candidate is covered."""
    out = tmp_path / "o"
    argv = _argv(models, out, "--min-cycles", "50", "--max-tokens", "64", "--profile-every", "100",
                 steps="1-4", conc="1")
    rc = cli.main(argv)
    c = capsys.readouterr()
    doc = scan_doc.load(out)
    assert not any("while the others reached" in n for n in doc["notes"]), doc["notes"]
    assert rc == 0 and {x["steps"] for x in scan_doc.main_cells(doc)} == {1, 2, 3, 4}, c.err
    assert doc["best"] and doc["adaptive"]


def test_34_1_a_scan_with_no_cell_exits_non_zero_and_says_why(models, tmp_path, capsys, on_path, monkeypatch):
    """No candidate's cycles ever key (no accept counts reach the probes): the level runs to its
    time limit, scan.json keeps what there is (the client's figures), and the scan exits 1 with
    one line saying no cell was measured and why."""
    monkeypatch.setenv("STANDIN_SCAN_NO_ACCEPT", "1,2,3")
    out = tmp_path / "o"
    rc = cli.main(_argv(models, out, "--time-limit", "2", steps="1-3", conc="1"))
    c = capsys.readouterr()
    assert rc == 1, c.err
    errs = [x for x in c.err.splitlines() if x.startswith("error:")]
    assert len(errs) == 1 and "measured no cell" in errs[0] and "time limit" in errs[0], c.err
    doc = scan_doc.load(out)
    assert doc["cells"] == [] and doc["client"]["1"]["per_stream_tok_s"] > 0


# ------------------------------------------------------------------ case 2: signals, the pid file


def _servers(port: int) -> list[int]:
    """Pids of stand-in servers listening on ``port`` (their argv names it), found in /proc."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[1:3] == [b"-m", b"standin_scan"] and str(port).encode() in argv:  # not the scan CLI
                pids.append(int(d.name))
    return pids


def _scan_child(argv, cache: Path, **env):
    return subprocess.Popen([sys.executable, "-m", "sglang_eagle3_ext", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default,
                            env=dict(os.environ, PYTHONPATH=ENV_PP, SGLANG_EAGLE3_CACHE=str(cache), **env))


def _signal_run(argv, cache, ready, sigs, gap, **env):
    """Run the scan CLI, send ``sigs`` once ``ready()``; (rc, stderr, server pids seen)."""
    port = int(argv[argv.index("--port") + 1])
    p = _scan_child(argv, cache, **env)
    seen: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not ready() and p.poll() is None:
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()[1]
        seen = _servers(port)
        for i, s in enumerate(sigs):
            if i:
                time.sleep(gap)
            p.send_signal(s)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        for pid in _servers(port):  # never leave one behind, whatever the outcome
            os.kill(pid, signal.SIGKILL)
    return p.returncode, err, seen


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            state = (Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split() or ["?"])[0]
            if state != "Z":
                out.append(pid)
        except (ProcessLookupError, OSError):
            pass
    return out


def test_34_2_two_sigterms_against_a_server_that_ignores_sigterm(models, tmp_path):
    """Mid-level, SIGTERM twice 1.5 s apart, the server ignoring SIGTERM (was: rc 130, the grace
    cut short, the server running on, interrupted false, no ladder.json / adaptive.json): the
    first signal stops the group with the full grace then SIGKILL, the second is ignored;
    scan.json says interrupted true, ladder.json and adaptive.json hold the level measured."""
    out = tmp_path / "o"
    argv = _argv(models, out, "--min-cycles", "100000", "--time-limit", "0.5", "--grace", "2")
    rc, err, seen = _signal_run(argv, tmp_path / "cache", lambda: (out / "scan.json").exists(),
                                [signal.SIGTERM, signal.SIGTERM], 1.5, STANDIN_SCAN_IGNORE_TERM="1")
    assert seen, "no server seen"
    left = _alive(seen)
    assert rc == 130 and not left, (rc, left, err[-2000:])
    doc = scan_doc.load(out)
    assert doc["interrupted"] is True and {x["level"] for x in doc["cells"]} >= {1}
    assert (out / "ladder.json").exists() and (out / "adaptive.json").exists() and doc["adaptive"]
    assert "already stopping the server" in err
    assert not list((tmp_path / "cache" / "run").glob("server-*.json"))  # its pid file went with it


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
def test_34_2_a_signal_during_the_start(models, tmp_path, sig):
    """SIGHUP (was: rc 129, the server running, no scan.json) or Ctrl-C twice while the server
    starts: the group is stopped, scan.json written (interrupted, nothing measured), exit 130."""
    out = tmp_path / "o"
    log = out / "server.log"
    argv = _argv(models, out, "--timeout", "60", "--grace", "2")
    rc, err, seen = _signal_run(argv, tmp_path / "cache", lambda: log.exists() and "argv" in log.read_text(),
                                [sig, sig], 0.5, STANDIN_SCAN_START_DELAY="30", STANDIN_SCAN_IGNORE_TERM="1")
    assert seen and not _alive(seen) and rc == 130, (rc, err[-2000:])
    assert scan_doc.load(out)["interrupted"] is True


def test_34_2_stop_all_finds_the_scan_server(models, tmp_path):
    """While a scan runs, its server's pid file is where `stop --all` looks: `stop --all` stops it;
    the scan, sent Ctrl-C, ends; no process is left."""
    cache = tmp_path / "cache"
    out = tmp_path / "o"
    argv = _argv(models, out, "--min-cycles", "100000", "--time-limit", "20", conc="1")
    port = int(argv[argv.index("--port") + 1])
    p = _scan_child(argv, cache)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not list((cache / "run").glob("server-*.json")):
            time.sleep(0.1)
        files = list((cache / "run").glob("server-*.json"))
        assert files, "no pid file for the scan server"
        env = dict(os.environ, SGLANG_EAGLE3_CACHE=str(cache))
        r = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "stop", "--all", "--grace", "2"], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "stopped" in r.stdout, r.stdout + r.stderr
        assert not _alive(_servers(port))
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        for pid in _servers(port):
            os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------ case 8: step bounds


def test_34_8_huge_step_ranges_are_refused_before_a_list_is_built(models, tmp_path):
    """`scan --steps 0-9999999999 --dry-run` built the list and exhausted the machine's memory;
    `--steps 1-1000000` wrote --speculative-num-steps 1000000. Both: one line, exit 2, at once
    (run in a memory-capped child so a regression fails instead of taking the machine)."""
    from test_bounded_readers import child

    for steps in ("0-9999999999", "1-1000000", "1,2,65"):
        argv = _argv(models, tmp_path / steps, "--dry-run", steps=steps)
        r = child(f"import sys\nfrom sglang_eagle3_ext import cli\nsys.exit(cli.main({argv!r}))\n", timeout=30)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert r.returncode == 2 and len(lines) == 1 and "at most 64 steps" in lines[0], (steps, r.stderr[-800:])


def test_34_8_steps_topk_draft_tokens_bounded_everywhere(models, tmp_path, capsys):
    """launch --steps / --topk / --draft-tokens, a sweep matrix, an adaptive config's candidates:
    a million steps never reaches SGLang."""
    target, draft = models
    root = _argv(models, tmp_path)[2]
    base = ["launch", "--sglang-root", root, "--model", target, "--draft", draft, "--no-sglang-check", "--dry-run"]
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [1, 1000000]}}))
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"name: s\nlaunch: {{model: {target}, draft: {draft}}}\nmatrix: {{steps: [1, 1000000]}}\n")
    big = tmp_path / "big.yaml"
    big.write_text(f"name: s\nlaunch: {{model: {target}}}\nmatrix: {{steps: [{', '.join(map(str, range(1, 65)))}], "
                   f"topk: [{', '.join(map(str, range(1, 65)))}], draft_tokens: [{', '.join(map(str, range(2, 60)))}]}}\n")
    for argv, needle in (
            (base + ["--steps", "1000000", "--topk", "1", "--draft-tokens", "1000001"], "--steps 1000000: at most 64"),
            (base + ["--steps", "3", "--topk", "1000", "--draft-tokens", "4"], "--topk 1000: at most 64"),
            (base + ["--adaptive", str(cfg)], "candidate step 1000000 is above 64"),
            (["sweep", str(sweep), "--plan"], "matrix.steps must be positive integers (1..64)"),
            (["sweep", str(big), "--plan"], "a sweep runs at most 10000")):
        rc = cli.main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, (argv[-1], err)


# ------------------------------------------------------------------ case 9 and 12: --out, links, --within


def test_34_9_scan_out_a_file_or_an_uncreatable_folder(models, tmp_path, capsys):
    """--out FILE (was "unexpected FileExistsError"), an uncreatable folder (was PermissionError
    with "a bug"): one line, exit 2, nothing started."""
    f = tmp_path / "afile"
    f.write_text("x")
    for out, needle in ((f, "is a file, not a folder"), (f / "sub", "a part of this path is a file"),
                        (Path("/proc/self/nope"), "cannot create it")):
        rc = cli.main(_argv(models, out, "--dry-run"))
        err = capsys.readouterr().err
        assert rc == 2 and needle in err and "a bug" not in err and len(err.strip().splitlines()) == 1, (out, err)


def test_34_12_scan_out_links_and_within(models, tmp_path, capsys):
    """A dangling scan.json symlink in --out (passed the exists guard and was written through), a
    server.log symlink (its target was truncated), --within nan (refused only after the whole
    scan): refused before anything starts; the link's target untouched."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "scan.json").symlink_to(tmp_path / "elsewhere.json")
    rc = cli.main(_argv(models, out, "--dry-run"))
    err = capsys.readouterr().err
    assert rc == 2 and "scan.json exists (a symbolic link)" in err, err
    (out / "scan.json").unlink()
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    (out / "server.log").symlink_to(precious)
    rc = cli.main(_argv(models, out))
    err = capsys.readouterr().err
    assert rc == 2 and "server.log: a symbolic link; refused" in err and precious.read_text() == "keep me", err
    (out / "server.log").unlink()
    for within in ("nan", "inf", "-1", "100"):
        rc = cli.main(_argv(models, tmp_path / f"w{within}", "--within", within))
        err = capsys.readouterr().err
        assert rc == 2 and f"--within {float(within)}" in err and not (tmp_path / f"w{within}" / "server.log").exists(), err


def test_34_12_launch_log_symlink_is_not_truncated(tmp_path):
    from sglang_eagle3_ext.runtime.errors import UserError
    from sglang_eagle3_ext.serve import server
    from sglang_eagle3_ext.serve.launch_config import LaunchConfig

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    (tmp_path / "s.log").symlink_to(precious)
    cfg = LaunchConfig(model=str(tmp_path), no_spec=True, log=str(tmp_path / "s.log"), port=_free_port())
    with pytest.raises(UserError, match="a symbolic link; refused"):
        server.Server(cfg).start(wait=False)
    assert precious.read_text() == "keep me"


def test_34_12_baseline_interrupted_in_its_second_level_keeps_the_first(models, tmp_path, capsys, on_path,
                                                                          monkeypatch):
    """Ctrl-C while the plain server is benched at its second level: the first level's baseline is
    kept (was: baseline null although level 1 was measured)."""
    from sglang_eagle3_ext.measure import bench

    real, calls = bench.run_bench, []

    def run_bench(opts, *a, **k):
        calls.append(opts.concurrency)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(opts, *a, **k)

    monkeypatch.setattr(bench, "run_bench", run_bench)
    out = tmp_path / "o"
    rc = cli.main(_argv(models, out, "--baseline", "--baseline-runs", "1", "--time-limit", "0.5",
                        "--min-cycles", "100000"))
    capsys.readouterr()
    doc = scan_doc.load(out)
    assert rc == 130 and doc["interrupted"] is True and calls == [1, 4]
    assert list(doc["baseline"]) == ["1"] and doc["baseline"]["1"]["per_stream_tok_s"] > 0


def test_34_12_policy_env_names_an_unknown_users_home(monkeypatch):
    """SGLANG_EAGLE3_POLICY='~nouser/x' inside SGLang: refused with the reason (was: "the policy
    needs a scan result file")."""
    from sglang_eagle3_ext.runtime import stepctl

    info = stepctl.ControllerInfo(built=(1, 2, 3))
    with pytest.raises(ValueError, match="unknown user"):
        stepctl.make_decider("policy", info, {"SGLANG_EAGLE3_POLICY": "~nouser-34/x"})


def test_34_12_launch_policy_takes_a_scan_folder(models, tmp_path, capsys, monkeypatch):
    """`launch --policy DIR` (a scan folder, which every other reader takes): its scan.json."""
    import shutil

    monkeypatch.setenv("SGLANG_EAGLE3_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "scanfolder"
    folder.mkdir()
    shutil.copy(REPO / "tests/data/policy/scan-h200-8b-p08.json", folder / "scan.json")
    target, draft = models
    from sglang_eagle3_ext.serve import releases

    rc = cli.main(["launch", "--sglang-root", str(releases.fetch("0.5.23")), "--model", target, "--draft", draft,
                   "--policy", str(folder), "--no-sglang-check", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and f"SGLANG_EAGLE3_POLICY={folder / 'scan.json'}" in out


def test_34_12_tiny_prompts_checked_before_the_build(tmp_path, capsys):
    """tiny --paths 4 --prompts FILE ignored --prompts silently; tiny --regions ... --prompts
    LINK-TO-/dev/zero was refused only after the build: both one line, at once, nothing built."""
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"\0\1\2")
    zero = tmp_path / "zero.txt"
    zero.symlink_to("/dev/zero")
    sparse = tmp_path / "sparse.txt"
    with open(sparse, "wb") as f:
        f.truncate(1 << 30)
    for argv, needle in (
            (["--acceptance", "0.8", "--paths", "4", "--prompts", str(binary)], "read by tree builds only"),
            (["--acceptance", "0.8", "--regions", "0.9,0.5", "--prompts", str(zero)], "character device"),
            (["--acceptance", "0.8", "--regions", "0.9,0.5", "--prompts", str(sparse)], "binary file"),
            (["--acceptance", "0.8", "--regions", "0.9,0.5", "--prompts", str(binary)], "binary file")):
        rc = cli.main(["tiny", "--out", str(tmp_path / "m"), *argv])
        err = capsys.readouterr().err
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, (argv, err)
        assert not (tmp_path / "m").exists()  # refused before the build wrote anything
