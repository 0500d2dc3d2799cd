"""scan: one server start, every candidate held in turn, per-key tables, refusals, Ctrl-C.

What is faked and why: no GPU, so the server is tests/standins/standin_scan.py, a real subprocess
started by the real server.Server from the argv and env the scan builds (the adaptive config, the
start step, SGLANG_EAGLE3_HOLD, the probe file). It plays SGLang 0.5.16's adaptive states on a
fixed cost model (cycle ms = 2.0 + 0.4 s + 0.05 b (s + 1); acceptance 0.8/0.6/0.4/...) and writes
eagle3_prof/3 records the way the runtime half (branch scanrt) does. The release rules are read
from the real pinned release trees. Table tests use recorded /3 sequences (no server).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import sigint_default
from test_flags import write_model

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import scan_doc
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.serve import releases
from sglang_eagle3_ext.tune import scan, scan_cells, scan_memory

STANDINS = Path(__file__).parent / "standins"
sys.path.insert(0, str(STANDINS))
import standin_scan  # noqa: E402  (the cost model the expectations are computed from)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def models(tmp_path):
    return (str(write_model(tmp_path / "target", "LlamaForCausalLM")),
            str(write_model(tmp_path / "draft", "LlamaForCausalLMEagle3", num_hidden_layers=1,
                            draft_vocab_size=512)))


def _argv(models, out, *more, version="0.5.16", steps="0-3", conc="1,4"):
    target, draft = models
    return ["scan", "--sglang-root", str(releases.fetch(version)), "--model", target, "--draft", draft,
            "--steps", steps, "--concurrency", conc, "--max-tokens", "40", "--block", "8",
            "--min-cycles", "24", "--profile-every", "40", "--time-limit", "30", "--port", str(_free_port()),
            "--timeout", "30", "--python", sys.executable, "--server-module", "standin_scan",
            "--no-sglang-check", "--out", str(out), *more]


@pytest.fixture()
def on_path(monkeypatch):
    from sglang_eagle3_ext.commands import console

    # the stand-in runs the real hold decider (hold.py) of this worktree
    monkeypatch.setenv("PYTHONPATH", f"{STANDINS}:{Path(__file__).resolve().parents[1]}")
    monkeypatch.setattr(console.out, "width", 250)  # the tables unwrapped


@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    """One stand-in scan (with --baseline) shared by the end-to-end and the reader tests."""
    import contextlib
    import io
    import os

    from sglang_eagle3_ext.commands import console

    root = tmp_path_factory.mktemp("scan")
    models = (str(write_model(root / "target", "LlamaForCausalLM")),
              str(write_model(root / "draft", "LlamaForCausalLMEagle3", num_hidden_layers=1, draft_vocab_size=512)))
    out, so, se = root / "scan", io.StringIO(), io.StringIO()
    old_pp, old_w = os.environ.get("PYTHONPATH"), console.out.width
    os.environ["PYTHONPATH"] = f"{STANDINS}:{Path(__file__).resolve().parents[1]}"
    console.out.width = 250
    try:
        with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
            rc = cli.main(_argv(models, out, "--baseline", "--baseline-runs", "1"))
    finally:
        console.out.width = old_w
        if old_pp is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_pp
    return {"rc": rc, "out": out, "stdout": so.getvalue(), "stderr": se.getvalue()}


def test_scan_end_to_end_one_start(scanned):
    out = scanned["out"]
    assert scanned["rc"] == 0, scanned["stdout"] + scanned["stderr"]
    text_out = scanned["stdout"]
    doc = scan_doc.load(out)
    assert doc["schema"] == "eagle3_scan/1" and doc["interrupted"] is False
    assert doc["candidates"] == [0, 1, 2, 3] and doc["levels"] == [1, 4]
    # one server start: the log shows the start step = the largest candidate, one tier
    log = (out / "server.log").read_text()
    assert log.count("[standin-scan] argv") == 1
    assert "--speculative-num-steps 3" in log and "--speculative-adaptive" in log
    assert json.loads((out / scan.CONFIG_NAME).read_text()) == {"1": {"candidate_steps": [0, 1, 2, 3]}}
    main = {(c["steps"], c["bs"]): c for c in scan_doc.main_cells(doc)}
    for bs in (1, 4):
        for s in range(4):
            c = main[(s, bs)]
            assert c["cycles"] >= 24, (s, bs, c["cycles"])
            assert c["cycle_ms"] == pytest.approx(standin_scan.cycle_ms(s, bs), rel=1e-3)
            # ~30 seeded draws per key at one stream: acceptance within 4 standard errors
            assert c["accept_len"] == pytest.approx(standin_scan.expected_accept_len(s), rel=0.25)
            assert len(c["per_position"]) == s
            assert c["interval"]["per_stream_tok_s"] is not None
    # the best per batch size is the fastest cell there (speculation beats step 0 on this cost model)
    for bs in ("1", "4"):
        fastest = max((c for c in scan_doc.main_cells(doc) if c["bs"] == int(bs)), key=lambda c: c["per_stream_tok_s"])
        assert doc["best"][bs]["steps"] == fastest["steps"] != 0
    assert doc["baseline"]["1"]["source"] == "plain server"
    assert doc["best"]["1"]["vs_baseline"] is not None
    ad = doc["adaptive"]
    assert Path(ad["path"]).is_file() and set(ad["tiers"]) == {"1", "4"}
    assert ad["reasons"]["1"].startswith(f"best {doc['best']['1']['steps']} steps")
    assert doc["client"]["1"]["per_stream_tok_s"] > 0 and doc["probe_mix"]["1"]["cycles"] > 0
    # the outside twin like with like: the client's aggregate beside the probes' aggregate
    tw = scan_doc.twin(doc, 1)
    assert tw["client_aggregate"]["requests"] > 0 and tw["probes"]["cycles"] > 0
    assert "client aggregate" in text_out and "not an aggregate" in text_out
    # graph memory measured at run time from the stand-in's 0.5.16-format lines (start state 3's
    # captures, then one 'Built adaptive runtime state' line per other candidate)
    m = doc["memory"]["measured"]
    assert m["per_state_gib"] == pytest.approx({"3": round(standin_scan.state_gib(3) - 0.02 + 0.01 + 0.01, 2),
                                                **{str(s): standin_scan.state_gib(s) for s in (0, 1, 2)}})
    assert m["states_built"] == 3 and "graph memory measured (server log, rank 0)" in text_out
    assert (out / "ladder.json").is_file()
    assert "step 0 (SGLang, not plain decoding)" in text_out
    assert "ESTIMATED" in text_out and "outside twin" in text_out
    assert "Adaptive config from these measurements" in text_out


def test_compare_reads_a_scan(scanned, capsys):
    assert cli.main(["compare", str(scanned["out"]), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    labels = {r["config"] for r in rows}
    assert "plain server (client)" in labels and "scan step 0 (SGLang, not plain decoding) (probes, steady)" in labels
    doc = scan_doc.load(scanned["out"])
    r2 = next(r for r in rows if r["concurrency"] == 4 and r["config"] == "scan 2 steps (probes, steady)")
    c2 = next(c for c in scan_doc.main_cells(doc) if c["steps"] == 2 and c["bs"] == 4)
    assert r2["per_stream_tok_s"] == c2["per_stream_tok_s"]
    assert r2["per_stream_vs_baseline_pct"] == pytest.approx(
        (c2["per_stream_tok_s"] / doc["baseline"]["4"]["per_stream_tok_s"] - 1) * 100)


def test_adaptive_write_from_a_scan(scanned, tmp_path, capsys):
    dest = tmp_path / "a.json"
    rc = cli.main(["adaptive", "write", "--from", str(scanned["out"] / "scan.json"), "--out", str(dest),
                   "--sglang-root", str(releases.fetch("0.5.16")), "--json"])
    got = json.loads(capsys.readouterr().out)
    assert rc == 0
    doc = scan_doc.load(scanned["out"])
    assert got["read_back"] == doc["adaptive"]["tiers"]  # the same chooser/writer as the scan's own


def test_sweep_report_reads_a_scan(scanned, tmp_path, capsys):
    rc = cli.main(["sweep", "--report", str(scanned["out"]), "--out", str(tmp_path / "r")])
    text = capsys.readouterr().out
    assert rc == 0 and "Best static configuration" in text
    assert (tmp_path / "r" / "table.md").read_text().count("| 4 |") >= 4
    assert cli.main(["sweep", "--report", str(scanned["out"]), "--out", str(scanned["out"])]) == 2


def test_tables_from_recorded_sequences():
    """Recorded /3 windows: a hold block split over two windows merges; drain cells stay out."""
    def key(s, b, cycles, ms, tok, parts):
        req = cycles * b
        return {"steps": s, "topk": 1, "draft_tokens": s + 1, "bs": b, "graph": True, "cycles": cycles,
                "requests": req, "accepted_drafts": tok - req, "tokens": tok, "accept_hist": {},
                "phases": {p: {"mean_ms": v, "p50_ms": v, "p90_ms": v} for p, v in
                           (("draft", 0.5 * s), ("verify", ms - 0.5 * s - 0.3), ("extend", 0.0),
                            ("other", 0.3), ("cycle", ms))},
                "parts": parts}
    w1 = {"by_key": {"s1.k1.d2.b2.g": key(1, 2, 10, 4.0, 36, [[0, 10, 40.0, 36, 20]]),
                     "s2.k1.d3.b2.g": key(2, 2, 6, 5.0, 30, [[1, 6, 30.0, 30, 12]])}}
    w2 = {"by_key": {"s2.k1.d3.b2.g": key(2, 2, 4, 5.0, 20, [[1, 4, 20.0, 20, 8], [3, 0, 0.0, 0, 0]][:1]),
                     "s1.k1.d2.b2.g": key(1, 2, 10, 4.0, 32, [[2, 10, 40.0, 32, 20]]),
                     "s1.k1.d2.b1.g": key(1, 1, 3, 3.0, 5, [[0, 3, 9.0, 5, 3]])}}  # drain cycles
    merged = scan_cells.merge_keys([w1, w2])
    cells = [scan_cells.cell(v, 2) for v in merged.values()]
    doc = {"cells": cells, "baseline": {"2": {"per_stream_tok_s": 400.0}}}
    c1 = next(c for c in scan_doc.main_cells(doc) if c["steps"] == 1)
    c2 = next(c for c in scan_doc.main_cells(doc) if c["steps"] == 2)
    assert len(scan_doc.main_cells(doc)) == 2  # the batch-1 drain cell is kept but not compared
    assert c2["blocks"] == 1 and c2["cycles"] == 10  # block 1 spans both windows: one part
    assert c1["accept_len"] == pytest.approx(68 / 40) and c1["cycle_ms"] == pytest.approx(4.0)
    assert c1["per_stream_tok_s"] == pytest.approx(68 / 40 * 250)
    lo, hi = c1["interval"]["per_stream_tok_s"]  # blocks 36/20 and 32/20 at 4 ms: 450 and 400
    assert lo < 425 < hi and hi - lo == pytest.approx(2 * 12.706 * 25, rel=1e-3)  # t(1) x sd/sqrt(2) = 25
    best = scan_doc.best_static(doc)
    assert best["2"]["steps"] == 2 and best["2"]["vs_baseline"] == pytest.approx((2.5 * 200 / 400 - 1) * 100)
    assert scan_doc.table(doc) == {2: {1: c1["per_stream_tok_s"], 2: c2["per_stream_tok_s"]}}


def test_ctrl_c_keeps_what_was_measured(models, tmp_path, capsys, on_path, monkeypatch):
    """Ctrl-C during level 4: the server group is stopped, level 1 stays, interrupted: true."""
    from sglang_eagle3_ext.commands import scan as cmd

    seen = {}

    def printer():
        def show(p):
            if p["level"] == 4:
                raise KeyboardInterrupt
        return show

    monkeypatch.setattr(cmd, "_progress_printer", printer)
    from sglang_eagle3_ext.serve import server

    real = server.Server.stop

    def stop(self, *a, **k):
        seen["pgid"] = self.pgid
        return real(self, *a, **k)

    monkeypatch.setattr(server.Server, "stop", stop)
    out = tmp_path / "scan"
    rc = cli.main(_argv(models, out))
    text = capsys.readouterr()
    assert rc == 130, text.out + text.err
    doc = scan_doc.load(out)
    assert doc["interrupted"] is True
    assert {c["level"] for c in doc["cells"]} >= {1}
    assert doc["client"]["1"]["per_stream_tok_s"] > 0
    assert "interrupted" in text.out
    import os

    with pytest.raises(ProcessLookupError):
        os.killpg(seen["pgid"], 0)


@pytest.mark.parametrize("version,needle", [
    ("0.5.12.post1", "switches only from the verify side"),
    ("0.5.9", "has no adaptive speculative runtime"),
    ("0.4.10.post2", "has no adaptive speculative runtime"),
])
def test_refused_on_releases_that_cannot_hold(models, tmp_path, capsys, version, needle):
    rc = cli.main(_argv(models, tmp_path / "o", version=version))
    e = capsys.readouterr().err
    assert rc == 2 and needle in e and "sweep" in e, e
    assert not (tmp_path / "o" / "scan.json").exists()


def test_0513_has_no_step_0(models, tmp_path, capsys):
    rc = cli.main(_argv(models, tmp_path / "o", version="0.5.13"))
    e = capsys.readouterr().err
    assert rc == 2 and "has no step 0" in e and "--steps 1,2,3" in e, e


def test_preset_max_running_requests_below_top_level(models, tmp_path, capsys):
    rc = cli.main(_argv(models, tmp_path / "o", "--", "--max-running-requests", "2"))
    e = capsys.readouterr().err
    assert rc == 2 and "--max-running-requests 2" in e and "below the top level 4" in e, e


def test_parse_steps_and_merge_extra():
    from sglang_eagle3_ext.commands.scan import merge_extra

    assert scan.parse_steps("0-5") == [0, 1, 2, 3, 4, 5]
    assert scan.parse_steps("1,3,2") == [1, 2, 3]
    assert scan.parse_steps("0-2,4") == [0, 1, 2, 4]
    for bad in ("3", "a-b", "5-1", "-1,2"):
        with pytest.raises(UserError):
            scan.parse_steps(bad)
    assert merge_extra(["--a", "1", "--max-running-requests", "8", "--flag"], ["--max-running-requests", "32"]) == \
        ["--a", "1", "--flag", "--max-running-requests", "32"]


def test_profile_one_key_per_figure_and_ladder_bench(scanned, capsys, monkeypatch):
    """profile on the scan's own probe file: the headline says it is a mix, each key has its row
    (made of its own steady cycles), break-even and --predict per key, every ladder level compared."""
    from sglang_eagle3_ext.commands import console

    monkeypatch.setattr(console.out, "width", 250)
    out = scanned["out"]
    rc = cli.main(["profile", str(out / "prof.jsonl"), "--baseline-tps", "500", "--predict",
                   "--bench", str(out / "ladder.json")])
    text = capsys.readouterr().out
    assert rc == 0
    import re

    assert re.search(r"a MIX of \d+ keys \(steps 0, 1, 2, 3 x batch sizes 1, [0-9, ]*4\)", text), text[:2000]
    assert "per key (table below)" in text  # no mixed break-even in the headline
    for k in ("s0.k1.d1.b1.g", "s3.k1.d4.b4.g"):
        assert k in text
    assert "Prediction from" in text and "key s3.k1.d4.b1.g" in text and "key s3.k1.d4.b4.g" in text
    assert "Profile vs client, every level" in text
    rc = cli.main(["profile", str(out / "prof.jsonl"), "--json", "--predict", "--bench", str(out / "ladder.json")])
    got = json.loads(capsys.readouterr().out)
    ladder = got["agreement"][str(out / "prof.jsonl")]["ladder"]
    assert [lv["client"]["concurrency"] for lv in ladder] == [1, 4]
    assert [lv["basis"] for lv in ladder] == ["steady batch-1", "steady batch-4"]
    assert {v["key"] for v in got["predictions"].values()} >= {"s3.k1.d4.b1.g", "s3.k1.d4.b4.g"}  # + drain sizes
    # each key's tok/s is its own: the scan's cells are the same figures
    doc = scan_doc.load(out)
    keys = got["files"][0]["by_key"]
    c = next(c for c in scan_doc.main_cells(doc) if c["steps"] == 2 and c["bs"] == 4)
    assert keys["s2.k1.d3.b4.g"]["per_stream_tok_s"] == c["per_stream_tok_s"]


def test_profile_help_says_steady_and_boundary(capsys):
    with pytest.raises(SystemExit):
        cli.main(["profile", "--help"])
    h = capsys.readouterr().out
    assert "STEADY decode cycles" in h and "BOUNDARY cycle" in h and "step-count switch" in h
    assert "ladder" in h


def test_dry_run_prints_the_one_start_and_starts_nothing(models, tmp_path, capsys):
    """The preset's --max-running-requests is replaced by the one after `--`; the hold env is set,
    candidates largest first; the start step is the largest candidate."""
    out = tmp_path / "o"
    argv = _argv(models, out, "--dry-run", "--", "--max-running-requests", "4", "--cuda-graph-max-bs-decode", "2")
    rc = cli.main(argv)
    c = capsys.readouterr()
    assert rc == 0, c.err
    assert "SGLANG_EAGLE3_HOLD=8" in c.out and "SGLANG_EAGLE3_HOLD_STEPS=3,2,1,0" in c.out
    assert "--speculative-num-steps 3" in c.out and "--speculative-adaptive-config" in c.out
    assert "ESTIMATED" in c.out and "B = 2 (from the launch args)" in c.out
    assert "levels above it run eager" in c.err and "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND" in c.err
    assert "note: one prompt: at temperature 0 every request generates the same tokens" in c.err
    assert not (out / "scan.json").exists() and not (out / "server.log").exists()
    many = tmp_path / "p.jsonl"
    many.write_text("".join(f'{{"messages": [{{"role": "user", "content": "q {i}"}}]}}\n' for i in range(3)))
    rc = cli.main(_argv(models, tmp_path / "o2", "--dry-run", "--prompts", str(many)))
    c = capsys.readouterr()
    assert rc == 0, c.err
    assert "one prompt" not in c.err


def test_graph_memory_read_from_sglang_log_lines(tmp_path):
    """The measured twin of the estimate: SGLang 0.5.16's own capture lines (format copied from
    model_runner_components/cuda_graph_setup.py and speculative/eagle_worker_v2.py)."""
    log = tmp_path / "server.log"
    log.write_text("Load weight end. type=LlamaForCausalLM, mem usage=15.00 GB.\n"
                   "Capture decode CUDA graph end. elapsed=3.21 s, mem usage=1.25 GB, avail mem=40.00 GB.\n"
                   "Capture draft decode CUDA graph end. elapsed=1.00 s, mem usage=0.50 GB, avail mem=39.50 GB.\n"
                   "Capture draft extend CUDA graph end. elapsed=1.00 s, mem usage=0.25 GB, avail mem=39.25 GB.\n")
    m = scan_memory.log_graph_memory(log)
    assert m["captures"] == 3 and m["total_gib"] == 2.0 and m["avail_after_gib"] == 39.25
    assert scan_memory.log_graph_memory(tmp_path / "none.log") is None


def test_time_limit_stops_a_level_and_says_so(models, tmp_path, capsys, on_path):
    rc = cli.main(_argv(models, tmp_path / "o", "--time-limit", "0.01", "--min-cycles", "100000", conc="1"))
    c = capsys.readouterr()
    assert rc == 0, c.err
    doc = scan_doc.load(tmp_path / "o")
    assert any("time limit" in n and "below 100000 steady cycles at batch size 1" in n for n in doc["notes"])
    assert doc["interrupted"] is False and doc["cells"]


def test_real_sigint_stops_the_server_and_keeps_results(models, tmp_path):
    """A real Ctrl-C (SIGINT to the CLI process) after level 1 was written: exit 130, scan.json
    interrupted with level 1 kept, the server's port free again (its group stopped)."""
    import os
    import signal
    import socket
    import subprocess
    import time

    out, port = tmp_path / "o", _free_port()
    # level 1 stops at its 0.5 s time limit (scan.json written), level 4 would run for a minute
    argv = _argv(models, out, "--min-cycles", "100000", "--time-limit", "0.5")
    argv[argv.index("--port") + 1] = str(port)
    env = dict(os.environ, PYTHONPATH=f"{STANDINS}:{Path(__file__).resolve().parents[1]}")
    p = subprocess.Popen([sys.executable, "-m", "sglang_eagle3_ext", *argv], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (out / "scan.json").exists():
            time.sleep(0.1)
        assert (out / "scan.json").exists(), "level 1 never finished"
        p.send_signal(signal.SIGINT)
        so, se = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, se
    doc = scan_doc.load(out)
    assert doc["interrupted"] is True and 1 in {c["level"] for c in doc["cells"]}
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))  # nothing of the server is left listening


def test_failed_start_shows_the_log_tail(models, tmp_path, capsys, on_path, monkeypatch):
    monkeypatch.setenv("STANDIN_SCAN_CRASH", "1")
    rc = cli.main(_argv(models, tmp_path / "o"))
    e = capsys.readouterr().err
    assert rc != 0 and "CUDA out of memory while capturing the graphs of state 4" in e, e
    assert "before it was healthy" in e and not (tmp_path / "o" / "scan.json").exists()


def test_a_state_without_accept_counts_stops_the_level_early(models, tmp_path, capsys, on_path, monkeypatch):
    """If the probes never key a candidate's cycles (no accept counts reach them), the level stops
    once the others have twice --min-cycles, instead of running to the time limit, and says so."""
    monkeypatch.setenv("STANDIN_SCAN_NO_ACCEPT", "0")
    rc = cli.main(_argv(models, tmp_path / "o", "--time-limit", "60", conc="1"))
    assert rc == 0, capsys.readouterr().err
    doc = scan_doc.load(tmp_path / "o")
    assert any("steps [0]: no steady cycle with accept counts at batch size 1" in n for n in doc["notes"])
    assert {c["steps"] for c in scan_doc.main_cells(doc)} == {1, 2, 3}
    assert not any("time limit" in n for n in doc["notes"])  # it stopped early, not at the 60 s limit
