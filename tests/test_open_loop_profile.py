"""`profile --bench` on an open-loop result: the client's decode tokens / decode seconds against
the probes' every decode cycle in the same span, request-weighted (client_twin.churn_rate).

What is faked and why: no GPU, so the server is tests/standins/standin_scan.py, a real subprocess
with a batched decode loop on a cost model whose window records are built by the probes' own
functions (probes/window.py); its cycles sleep the model's ms, so its wall time runs a little
above what its records say (Python overhead), and the two figures are compared for shape, not
speed. The twin's arithmetic is checked exactly on records built by window.py from known cycles.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sglang_eagle3_ext.documents import prof_records
from sglang_eagle3_ext.measure import client_twin, open_loop
from sglang_eagle3_ext.measure.prompts import PromptItem
from sglang_eagle3_ext.runtime.probes import window

ROOT = Path(__file__).resolve().parents[1]
STANDINS = Path(__file__).parent / "standins"


def _record(cycles: list[tuple[int, float, int, int]]) -> dict:
    """A window record from (batch size, cycle ms, accepted drafts, why bits) per cycle."""
    per = {p: [0.0] * len(cycles) for p in window.PHASES}
    per[window.CYCLE] = [ms for _, ms, _, _ in cycles]
    per["verify"] = list(per[window.CYCLE])
    nreq = [b for b, _, _, _ in cycles]
    nacc = [a for _, _, a, _ in cycles]
    sizes, bits, _ = window.classify([w for *_, w in cycles], nreq, None)
    split = window.split_record(per, sizes, bits, nreq, nacc, 0)
    hist = {1: sum(nreq)}  # the counts the record's totals come from
    rec = window.build_record(window=2, per_cycle=per, hist=hist, mode="events", spec={"steps": 3},
                              route="plugin", sglang_version="0.5.16", rank=0, tp_size=1, split=split)
    rec["tokens"] = sum(nreq) + sum(nacc)  # tokens = verifies + accepted drafts, as the probes count
    return rec


def test_churn_rate_is_tokens_over_request_weighted_time():
    # two windows: batch 2 (4 ms) and batch 4 (6 ms), each with slower boundary cycles (a prefill
    # inside their "other"), all of one batch size per window: the twin is then exact
    j = window.JOIN
    w1 = [(2, 4.0, 3, 0)] * 10 + [(2, 9.0, 2, j)] * 2 + [(2, 4.0, 3, 0)] * 5
    w2 = [(4, 6.0, 8, 0)] * 10 + [(4, 12.0, 5, j)] * 3
    cyc = w1 + w2
    tokens = sum(b + a for b, _, a, _ in cyc)
    exact = sum(b * ms for b, ms, _, _ in cyc)  # sum over cycles of batch x cycle ms
    tw = client_twin.churn_rate([_record(w1), _record(w2)])
    assert tw["per_stream_tok_s"] == pytest.approx(tokens * 1000.0 / exact, rel=1e-3)
    assert tw["accept_len"] == pytest.approx(tokens / sum(b for b, *_ in cyc), abs=1e-4)
    assert tw["boundary_share"] == pytest.approx((2 * 2 * 9.0 + 3 * 4 * 12.0) / exact, abs=1e-3)
    # a cycle-weighted mean (what a closed-loop summary gives) is not it
    cycle_weighted = (tokens / sum(b for b, *_ in cyc)) * 1000.0 / (sum(ms for _, ms, _, _ in cyc) / len(cyc))
    assert abs(cycle_weighted / tw["per_stream_tok_s"] - 1) > 0.02
    # nor is the steady cycles' figure, which leaves the prefills' cost out
    assert tw["steady_per_stream_tok_s"] > 1.1 * tw["per_stream_tok_s"]
    # boundary cycles of mixed batch sizes (both sides of a change are marked): an approximation
    mixed = [(2, 4.0, 3, 0)] * 10 + [(3, 5.0, 4, 0)] * 3 + [(4, 6.0, 8, 0)] * 10
    tw2 = client_twin.churn_rate([_record(mixed)])
    exact2 = sum(b + a for b, _, a, _ in mixed) * 1000.0 / sum(b * ms for b, ms, _, _ in mixed)
    assert tw2["per_stream_tok_s"] == pytest.approx(exact2, rel=0.01)
    # records without the steady / boundary split give no like-for-like figure
    assert client_twin.churn_rate([{"tokens": 5, "requests": 2}]) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_profile_bench_reads_an_open_loop_file(tmp_path):
    port = _free_port()
    prof = tmp_path / "prof.jsonl"
    env = dict(os.environ, EAGLE3_PROFILE="1", EAGLE3_PROFILE_OUT=str(prof), EAGLE3_PROFILE_EVERY="25",
               PYTHONPATH=f"{STANDINS}{os.pathsep}{ROOT}")
    srv = subprocess.Popen([sys.executable, str(STANDINS / "standin_scan.py"), "--port", str(port),
                            "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        doc = open_loop.run_open_loop(open_loop.OpenLoopOptions(
            url=url, rates=[25.0], items=[PromptItem("x")], num_requests=30, max_tokens=40, seed=1))
    finally:
        srv.terminate()
        try:  # a hang guard, not a speed bound: a busy 2-core machine can take seconds
            srv.wait(60)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait(10)
    bench = tmp_path / "ol.json"
    bench.write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "profile", str(prof), "--bench", str(bench),
                        "--json"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    (a,) = json.loads(r.stdout)["agreement"].values()
    (lv,) = a["ladder"]
    assert lv["client"]["open_loop"] and lv["client"]["request_rate"] == 25.0
    assert lv["basis"].startswith("every decode cycle, request-weighted")
    s = doc["rates"][0]["summary"]
    assert lv["decode_tok_s"]["client"] == s["decode"]["per_stream_tok_s"]
    assert lv["accept_len"]["client"] == s["accept_length_decode"]
    # the profile side is churn_rate over the windows that closed in the rate's span
    run = prof_records.load(prof)
    client = client_twin.read_client(bench)["levels"][0]
    aligned = client_twin.aligned_run(run, client)
    assert lv["decode_tok_s"]["profile"] == client_twin.churn_rate(aligned.records)["per_stream_tok_s"]
    # open-loop traffic changes the batch all the time: many cycles are boundary cycles
    assert lv["twin"]["boundary_share"] > 0.05
    # the human table says which cycles each side is made of
    r2 = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "profile", str(prof), "--bench", str(bench)],
                        capture_output=True, text=True, cwd=ROOT, timeout=120,
                        env=dict(os.environ, COLUMNS="400"))
    assert "every rate" in r2.stdout and "request-weighted" in r2.stdout and "first-to-last" in r2.stdout


R10 = ROOT / "docs" / "data" / "h200-2026-12-04-r10" / "r10"


@pytest.mark.parametrize("server,warned,stall", [("policy", True, 2.4), ("ema-default", True, 0.8),
                                                  ("static5", False, None)])
def test_a_cold_start_inside_the_run_is_said(server, warned, stall, capsys):
    """The H200, round 10: the policy's and the EMA's measured 16 req/s runs were each server's
    first traffic (window 1: draft / verify means far above their own p90s); static 5's first
    traffic went to an earlier client. `profile --bench` says so for the first two, not the third."""
    from sglang_eagle3_ext import cli

    prof = next((R10 / server / "configs").glob("*/prof.jsonl"))
    rc = cli.main(["profile", str(prof), "--bench", str(R10 / server / "serving-r16-k0.json")])
    assert rc == 0
    warn = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert bool(warn) == warned
    if warned:
        assert len(warn) == 1 and "rate 16.0/s: the server's first probe window" in warn[0]
        assert f"about {stall:.1f} s of stalls" in warn[0]


def test_cold_start_rule_on_built_windows():
    """Window 1 in the span with a phase mean >= 1.5x its own p90 is a cold start; the same window
    outside the span, or with even cycles, is not."""
    def rec(win: int, dmean: float, vmean: float) -> dict:
        return {"window": win, "cycles": 50, "phases": {"draft": {"mean_ms": dmean, "p50_ms": 1.0, "p90_ms": 1.2},
                                                        "verify": {"mean_ms": vmean, "p50_ms": 10.0, "p90_ms": 11.0}}}

    def run(*recs: dict) -> prof_records.ProfileRun:
        return prof_records.ProfileRun(path="x", kind="jsonl", records=list(recs))

    cold = client_twin.cold_start(run(rec(1, 30.0, 10.5), rec(2, 1.0, 10.0)))
    assert cold and cold["ratio"] == 25.0 and cold["stall_s"] == pytest.approx(50 * (29.0 + 0.5) / 1000, abs=0.01)
    assert client_twin.cold_start(run(rec(1, 1.1, 10.4))) is None       # even cycles
    assert client_twin.cold_start(run(rec(2, 30.0, 10.5))) is None      # window 1 not in the span
    assert client_twin.cold_start(None) is None
