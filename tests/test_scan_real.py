"""The scan against the committed real H200 run (docs/data/h200-2026-12-01-r4/scan-8b: SGLang
0.5.16, llama3-8b shape P 0.8, steps 0..5 at 1/8/32 streams in one start; static/ = plain, 2 and
5 step servers started separately). Nothing is faked but the graph-memory log lines of the states
the trimmed server.log lost (its head keeps the start state's real line): those are written in
0.5.16's own text (model_runner_components/cuda_graph_setup.py, speculative/eagle_worker_v2.py).
"""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3_ext.commands import console
from sglang_eagle3_ext.documents import scan_doc
from sglang_eagle3_ext.tune import scan_memory

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "docs" / "data" / "h200-2026-12-01-r4" / "scan-8b"
SCAN = RUN / "scan"


# ------------------------------------------------------------------ 1. wide tables when piped


def test_pipe_width_rule():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert console.pipe_width(io.StringIO(), {}) == console.PIPE_WIDTH
    assert console.pipe_width(None, {}) == console.PIPE_WIDTH
    assert console.pipe_width(Tty(), {}) is None            # a terminal: rich sizes to it
    assert console.pipe_width(io.StringIO(), {"COLUMNS": "120"}) is None  # the user's COLUMNS wins


def test_piped_report_of_the_real_scan_is_not_truncated():
    """The real path: a child process, stdout a pipe, COLUMNS unset (scan.txt of the H200 run was
    cut to 80 columns with '…' this way)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    p = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "sweep", "--report", str(SCAN)],
                       capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    assert "…" not in p.stdout
    row5 = next(ln for ln in p.stdout.splitlines() if ln.startswith("│ 5 steps"))
    assert "573.9 [488.9, 645.3]" in row5 and "0.79 0.83 0.84 0.95 0.85" in row5 and "+244.7%" in row5
    assert "│ step 0 (SGLang, not plain decoding) │" in p.stdout


def test_narrow_terminal_folds_numbers_never_elides(monkeypatch):
    """A real 80-column terminal: rich would end cells in '…'; every table printed through our
    console folds instead (the render of the real scan.json, through commands.scan's out)."""
    from sglang_eagle3_ext.commands import scan as scan_cmd

    buf = io.StringIO()
    monkeypatch.setattr(scan_cmd, "out", console.WideConsole(file=buf, width=80, soft_wrap=True))
    scan_cmd.render(scan_doc.load(SCAN))
    text = buf.getvalue()
    assert "┏" in text and "…" not in text
    assert max(len(ln) for ln in text.splitlines() if ln.startswith(("┏", "│"))) <= 80


# ------------------------------------------------------------------ 2. the outside twin, like with like


def test_twin_compares_aggregate_with_aggregate_on_the_real_run():
    doc = scan_doc.load(SCAN)  # scan.json of the run predates the aggregate: filled from ladder.json beside it
    got = {n: scan_doc.twin(doc, n) for n in (1, 8, 32)}
    client = {n: t["client_aggregate"]["per_stream_tok_s"] for n, t in got.items()}
    probes = {n: t["probes"]["per_stream_tok_s"] for n, t in got.items()}
    assert client == pytest.approx({1: 405.0, 8: 362.2, 32: 218.9}, abs=0.1)
    assert probes == pytest.approx({1: 413.7, 8: 362.0, 32: 220.1}, abs=0.1)
    for t in got.values():  # the twins agree: steady cycles vs every cycle the requests were in
        assert abs(t["probes_vs_client_pct"]) < 2.5, t
    # the old comparison, mean of per-request rates vs the aggregate, was off by 5-6 %
    assert got[1]["client_mean"] == pytest.approx(439.7, abs=0.1)
    assert got[1]["client_median"] == pytest.approx(412.4, abs=0.1)
    for t in got.values():
        assert (t["client_mean"] / t["client_aggregate"]["per_stream_tok_s"] - 1) > 0.05
    assert got[1]["client_aggregate"]["requests"] == 18 and got[32]["client_aggregate"]["requests"] == 640
    assert got[1]["probes"]["steps_mix"] == {"0": 295, "1": 310, "2": 286, "3": 259, "4": 267, "5": 263}


def test_twin_lines_name_both_client_figures():
    from sglang_eagle3_ext.commands.scan import twin_lines

    lines = twin_lines(scan_doc.twin(scan_doc.load(SCAN), 1))
    assert "client aggregate 405.0 tok/s per stream" in lines[0] and "vs probes 413.7" in lines[0]
    assert "+2.1% probes vs client" in lines[0] and "1680 steady cycles" in lines[0]
    assert "mean 439.7, median 412.4" in lines[1] and "not an aggregate" in lines[1]


def test_client_aggregate_is_tokens_over_seconds():
    bench = {"runs": [{"requests": [
        {"ttft_s": 0.1, "last_token_s": 1.1, "completion_tokens": 101, "first_chunk_tokens": 1, "decode_tok_s": 100.0},
        {"ttft_s": 0.1, "last_token_s": 3.1, "completion_tokens": 101, "first_chunk_tokens": 1, "decode_tok_s": 33.3},
        {"error": "boom", "decode_tok_s": None}]}]}
    a = scan_doc.client_aggregate(bench)
    assert a["per_stream_tok_s"] == pytest.approx(50.0) and a["requests"] == 2  # the mean of rates: 66.7
    assert scan_doc.client_aggregate({"runs": []}) is None


# ------------------------------------------------------------------ 3. graph memory in 0.5.16's lines


def _state_lines(tp: int = 0) -> str:
    """0.5.16's lines after the start state: per other candidate its draft captures, then one
    'Built adaptive runtime state' line (which holds them and the state's target graphs)."""
    pre = f"[2026-12-01 20:25:50 TP{tp}]" if tp is not None else "[2026-12-01 20:25:50]"
    out = []
    for s in (0, 1, 2, 3, 4):
        if s:
            out.append(f"{pre} Capture draft decode CUDA graph end. elapsed=1.10 s, mem usage=0.02 GB, avail mem=61.90 GB.")
        out.append(f"{pre} Capture draft extend CUDA graph end. elapsed=0.40 s, mem usage=0.03 GB, avail mem=61.87 GB.")
        out.append(f"{pre} Built adaptive runtime state steps={s}: elapsed=4.21s, mem={0.1 + 0.04 * s:.2f}GB")
    return "\n".join(out) + "\n"


def test_graph_memory_of_every_state_in_0516_lines(tmp_path):
    head = (SCAN / "server.log").read_text().split("[...]")[0]  # the real start: target verify 0.27 GB
    log = tmp_path / "server.log"
    log.write_text(head
                   + "[2026-12-01 20:25:46] Capture draft decode CUDA graph end. elapsed=2.10 s, mem usage=0.05 GB, "
                     "avail mem=62.24 GB.\n"
                   + "[2026-12-01 20:25:47] Capture draft extend CUDA graph end. elapsed=1.00 s, mem usage=0.03 GB, "
                     "avail mem=62.21 GB.\n"
                   + _state_lines(tp=None))
    m = scan_memory.log_graph_memory(log)
    # the start step from SGLang's own 'AdaptiveSpeculativeParams initialized: steps=5' line
    assert m["per_state_gib"] == pytest.approx({"5": 0.35, "0": 0.1, "1": 0.14, "2": 0.18, "3": 0.22, "4": 0.26})
    assert m["states_built"] == 5 and m["captures"] == 3 + 9 and m["total_gib"] == pytest.approx(1.25)
    assert m["by_capture"]["target verify CUDA graph"] == 0.27 and m["outside_states_gib"] == 0


def _start_lines(tp: int) -> str:
    return "".join(f"[2026-12-01 20:25:44 TP{tp}] Capture {what} CUDA graph end. elapsed=3.13 s, mem usage={gib} GB, "
                   f"avail mem=62.29 GB.\n"
                   for what, gib in (("target verify", "0.27"), ("draft decode", "0.05"), ("draft extend", "0.03")))


def test_graph_memory_counts_rank_0_only(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(_start_lines(0) + _start_lines(1) + _state_lines(0) + _state_lines(1))
    m = scan_memory.log_graph_memory(log, start_steps=5)
    assert m["per_state_gib"]["5"] == 0.35 and m["states_built"] == 5 and m["captures"] == 3 + 9
    assert m["total_gib"] == pytest.approx(0.35 + 0.1 + 0.14 + 0.18 + 0.22 + 0.26)


def test_graph_memory_of_the_trimmed_real_log_and_the_run_time_cause():
    """The trimmed log keeps the start state's line only; the regex the H200 run had (before
    35df682) matched none of 0.5.16's lines, which is why scan.json says measured null."""
    import re

    m = scan_memory.log_graph_memory(SCAN / "server.log")
    assert m["per_state_gib"] == {"5": 0.27} and m["captures"] == 1
    old = re.compile(r"Capture (?:draft |draft extend |)cuda graph end\..*?mem usage=([\d.]+) GB")
    assert not any(old.search(ln) for ln in (SCAN / "server.log").read_text().splitlines())
    assert scan_doc.load(SCAN)["memory"]["measured"] is None


def test_remeasure_after_the_stop_wins_when_it_saw_more(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(_start_lines(0))  # read at ready: the start state only
    doc = {"memory": {"log": str(log), "measured": None}}
    scan_memory.remeasure(doc, 5)
    assert doc["memory"]["measured"]["per_state_gib"] == {"5": 0.35}
    with open(log, "a") as fh:
        fh.write(_state_lines(tp=None))
    scan_memory.remeasure(doc, 5)
    assert doc["memory"]["measured"]["states_built"] == 5
    from sglang_eagle3_ext.commands.scan import memory_lines

    line = memory_lines({**doc["memory"], "estimate": {"total_gib": 0.46, "per_state_gib": {"5": 0.13}}})[0]
    assert "over 6 state(s)" in line and "s5 0.35 (est. 0.13)" in line and "estimated before the start: 0.46" in line
    assert "not recorded" in memory_lines({"estimate": {"total_gib": 0.46}, "measured": None})[0]


# ------------------------------------------------------------------ 4. benchmarks/scan_vs_static.py


def test_scan_vs_static_on_the_committed_run():
    spec = importlib.util.spec_from_file_location("scan_vs_static", ROOT / "benchmarks" / "scan_vs_static.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.compare(RUN)
    cells = {(r["steps"], r["streams"]): r for r in res["rows"]}
    assert set(cells) == {(s, n) for s in (2, 5) for n in (1, 8, 32)}
    assert cells[(5, 1)]["static_basis"] == "client aggregate" and cells[(5, 8)]["static_basis"] == "probes bs 8"
    assert all(abs(r["diff_pct"]) <= 2.5 for r in res["rows"]), res["rows"]   # the 2 % (rounded)
    assert all(abs(r["accept_diff_pct"]) <= 2.5 for r in res["rows"]), res["rows"]
    assert [r["streams"] for r in res["step0"]] == [1, 8, 32] and all(r["diff_pct"] < 0 for r in res["step0"])
    assert all(b["scan_among_static"] == b["static"] for b in res["best"].values())
    assert res["wall"]["scan_start_s"] == 80.0 and res["wall"]["scan_wall_s"] == 145.0
    text = mod.render(res)
    assert "| 5 | 1 | 573.9 (263) | 585.4 (client aggregate) | -2.0% |" in text
