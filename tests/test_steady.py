"""Steady vs boundary cycles (issue 15): recorded cycle sequences through the real Profiler.

Only the GPU is faked: ``timers.FakeEventTimer`` with a scripted clock stands in for CUDA events
(as in test_probes.py). The sequences are what a server does around request starts and ends:
a prefill between two decode cycles, a batch that grows (with the overlap scheduler's late
counts), an idle gap, a request leaving.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted import Clock

from sglang_eagle3_ext.documents import prof_records
from sglang_eagle3_ext.measure import accounting
from sglang_eagle3_ext.runtime import probes
from sglang_eagle3_ext.runtime.probes import _profiler, timers
from sglang_eagle3_ext.runtime.probes.window import BATCH, EXTEND, IDLE, JOIN, LEAVE, classify


@pytest.fixture(autouse=True)
def _clean_probes():
    yield
    probes.reset(environ={})


def play(tmp_path, events, *, late: bool = False, monkeypatch=None, **env: str) -> dict:
    """Run ``events`` and return the one window record. Events: ("decode", per_req[, verify_ms]),
    ("prefill", ms) = a non-decode forward (mark_boundary, then its time), ("gap", ms)."""
    clock = Clock()
    environ = {"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_EVERY": "1000",
               "EAGLE3_PROFILE_OUT": str(tmp_path / "prof.jsonl"), "EAGLE3_PROFILE_SPEC": "3,1,4", **env}
    probes.reset(environ=environ, backend=timers.FakeEventTimer(clock))
    if monkeypatch is not None:  # idle gaps are judged on host time: script it too
        monkeypatch.setattr(_profiler, "perf_counter", clock)
    pending = None
    for ev in events:
        if ev[0] == "prefill":
            probes.mark_boundary("extend")
            clock.ms(ev[1])
        elif ev[0] == "gap":
            clock.ms(ev[1])
        else:
            per_req, verify = ev[1], (ev[2] if len(ev) > 2 else 28.0)
            probes.cycle_begin()
            if late and pending is not None:
                probes.record_accept(pending, bonus_included=False)
            for name, ms in (("draft", 2.0), ("verify", verify), ("extend", 1.0)):
                probes.phase_begin(name)
                clock.ms(ms)
                probes.phase_end(name)
            if late:
                pending = per_req
            else:
                probes.record_accept(per_req, bonus_included=False)
            probes.cycle_end()
            clock.ms(0.5)
    probes.cycle_begin()  # closes the last cycle
    rec = probes.flush()
    assert rec is not None and len(probes.windows) == 1
    return rec


def test_request_starts_are_boundaries_and_steady_is_what_the_client_sees(tmp_path, capsys):
    """The issue's shape: concurrency 1, two requests back to back, each started by a 20 ms
    prefill. The prefill lands in the "other" of the cycle before it; the first decode of each
    request follows a join. Steady = every other cycle: its rate is the decode rate."""
    req = [("decode", [3])] * 10
    rec = play(tmp_path, [("prefill", 20.0), *req, ("prefill", 20.0), *req])
    assert rec["schema"] == "eagle3_prof/3" and rec["cycles"] == 20
    assert rec["phases"]["cycle"]["mean_ms"] == 32.5  # all cycles: (20 x 31.5 + 20) / 20
    st, bd = rec["steady"], rec["boundary"]
    assert (st["cycles"], st["requests"], st["tokens"], st["accept_len"]) == (17, 17, 68, 4.0)
    assert st["phases"]["cycle"] == {"mean_ms": 31.5, "p50_ms": 31.5, "p90_ms": 31.5}
    assert st["phases"]["other"]["mean_ms"] == 0.5
    assert st["eff_tok_s"] == round(4.0 * 1000 / 31.5, 2)
    assert bd["cycles"] == 3 and bd["reasons"] == {"join": 2, "leave": 0, "extend": 1,
                                                   "batch_change": 0, "idle": 0, "switch": 0}
    assert bd["extra_ms"] == 20.0 and bd["extra_by_phase"] == {"draft": 0.0, "verify": 0.0,
                                                               "extend": 0.0, "other": 20.0}
    assert bd["joins"] == 2 and bd["extra_ms_per_join"] == 10.0
    assert list(rec["by_batch"]) == ["1"] and rec["by_batch"]["1"]["cycles"] == 17
    assert rec["by_batch"]["1"]["throughput_tok_s"] == round(68 * 1000 / (17 * 31.5), 2)
    # the block says which cycles its numbers are made of
    err = capsys.readouterr().err
    assert "  Cycles:          20 = 17 steady + 3 boundary (join 2, extend 1)" in err
    assert "  Steady:          31.50 ms/cyc (p50 31.50; draft 2.00, verify 28.00, extend 1.00, other 0.50), " \
           "accept len 4.00, eff tok/s 127.0" in err
    assert "  Boundary cost:   +20.00 ms over steady p50, 2 joins, 10.00 ms/join" in err
    # JSONL and block round trips give the same steady figures
    log = tmp_path / "server.log"
    log.write_text(err)
    for run in (prof_records.load(tmp_path / "prof.jsonl"), prof_records.load(log)):
        s = accounting.summarize(run)
        assert s["basis"] == "steady" and s["phases"]["cycle"]["mean_ms"] == 31.5
        assert s["accept_len"] == 4.0 and s["eff_tok_s"] == round(4000 / 31.5, 2)
        assert s["all_cycles"]["phases"]["cycle"]["mean_ms"] == 32.5
        assert s["boundary"]["extra_ms"] == 20.0 and s["boundary"]["joins"] == 2


def test_batch_growth_with_late_counts_marks_both_sides(tmp_path, capsys):
    """Overlap scheduler: counts arrive a cycle late, so the size change shows a cycle late;
    both cycles around it are boundaries, and by_batch splits the steady cycles by size."""
    one = [("decode", [3])] * 5
    two = [("decode", [3, 3], 30.0)] * 5
    rec = play(tmp_path, [("prefill", 5.0), *one, ("prefill", 5.0), *two], late=True)
    sizes, bits, last = classify([JOIN, 0, 0, 0, EXTEND, JOIN, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1, 2, 2, 2, 2], None)
    assert sizes == [None, 1, 1, 1, 1, 1, 2, 2, 2, 2] and last == 2
    assert bits[5] == JOIN | BATCH and bits[6] == JOIN | BATCH
    assert rec["boundary"]["reasons"] == {"join": 3, "leave": 0, "extend": 1, "batch_change": 2, "idle": 0,
                                         "switch": 0}
    by = rec["by_batch"]
    assert sorted(by) == ["1", "2"]
    assert (by["1"]["cycles"], by["1"]["requests"], by["1"]["accept_len"]) == (3, 3, 4.0)
    assert (by["2"]["cycles"], by["2"]["requests"], by["2"]["tokens"]) == (3, 6, 24)
    assert by["2"]["phases"]["cycle"]["mean_ms"] == 33.5
    assert by["2"]["per_stream_tok_s"] == round(4000 / 33.5, 2)
    assert by["2"]["throughput_tok_s"] == round(24 * 1000 / (3 * 33.5), 2)
    s = accounting.by_batch_summary([rec])
    assert s[2]["throughput_tok_s"] == by["2"]["throughput_tok_s"] and s[1]["cycles"] == 3


def test_idle_gap_and_a_request_leaving(tmp_path, capsys, monkeypatch):
    rec = play(tmp_path, [*[("decode", [2, 2])] * 5, ("gap", 500.0), *[("decode", [2])] * 5],
               monkeypatch=monkeypatch)
    bd = rec["boundary"]
    # cycle 4 ends in the gap, cycle 5 follows it; the size drop 2 -> 1 also marks 4 and 5
    assert bd["cycles"] == 2 and bd["reasons"]["idle"] == 2 and bd["reasons"]["leave"] == 2
    assert rec["steady"]["cycles"] == 8 and sorted(rec["by_batch"]) == ["1", "2"]
    assert rec["steady"]["phases"]["cycle"]["mean_ms"] == 31.5 and bd["extra_ms"] == 0.0
    assert bd["joins"] == 0 and bd["extra_ms_per_join"] is None
    _, bits, _ = classify([0, 0, 0], [2, 0, 1], None)  # a cycle with no count keeps the size before
    assert bits == [0, BATCH | LEAVE, BATCH | LEAVE]
    assert classify([IDLE], [1], 2)[1] == [IDLE | BATCH | LEAVE]  # across a window: this side only


def test_every_cycle_a_boundary_falls_back_to_all_cycles(tmp_path, capsys):
    rec = play(tmp_path, [("prefill", 1.0), ("decode", [1]), ("prefill", 1.0), ("decode", [1])])
    assert rec["steady"]["cycles"] == 0 and rec["steady"]["phases"] is None
    assert rec["boundary"]["extra_ms"] is None
    assert "Steady:          none" in capsys.readouterr().err
    s = accounting.summarize(prof_records.load(tmp_path / "prof.jsonl"))
    assert s["basis"] == "all" and any("no steady cycle" in n for n in s["notes"])


def test_v1_records_are_read_as_unclassified(tmp_path):
    v1 = json.loads((Path(__file__).parent / "data/profile/synthetic_k5.jsonl").read_text().splitlines()[1])
    assert v1["schema"] == "eagle3_prof/1"
    assert accounting.steady_summary([v1]) is None and accounting.by_batch_summary([v1]) == {}
    assert accounting.boundary_summary([v1]) is None


def test_steady_summary_weights_windows_by_cycles():
    def rec(cycles: int, ms: float, p50: float) -> dict:
        ph = {p: {"mean_ms": 0.0, "p50_ms": 0.0, "p90_ms": 0.0} for p in ("draft", "verify", "extend", "other")}
        ph["cycle"] = {"mean_ms": ms, "p50_ms": p50, "p90_ms": p50}
        return {"steady": {"cycles": cycles, "requests": cycles, "accepted_drafts": cycles, "tokens": 2 * cycles,
                           "accept_len": 2.0, "phases": ph, "eff_tok_s": None}}

    s = accounting.steady_summary([rec(90, 6.0, 6.0), rec(10, 16.0, 15.0)])
    assert s["cycles"] == 100 and s["accept_len"] == 2.0
    assert s["phases"]["cycle"]["mean_ms"] == 7.0  # (90 x 6 + 10 x 16) / 100
    assert s["phases"]["cycle"]["p50_ms"] == 6.0  # cycle-weighted median of window p50s
    assert s["eff_tok_s"] == round(2000 / 7.0, 2)


# --- the issue's run, end to end through the CLI -------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def issue15_run(tmp_path, monkeypatch) -> Path:
    """10 requests back to back at concurrency 1, 32 cycles each, 3 steps always right (accept
    length 4.00); steady cycle 6.01 ms; a 35 ms prefill between requests lands in the "other" of
    the previous request's last cycle (the H200 shape of issue 15, scaled)."""
    clock = Clock()
    out = tmp_path / "issue15.jsonl"
    probes.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_EVERY": "100", "EAGLE3_PROFILE_OUT": str(out),
                          "EAGLE3_PROFILE_SPEC": "3,1,4"}, backend=timers.FakeEventTimer(clock))
    monkeypatch.setattr(_profiler, "perf_counter", clock)
    for _ in range(10):
        probes.mark_boundary("extend")
        clock.ms(35.0)
        for _ in range(32):
            probes.cycle_begin()
            for name, ms in (("draft", 1.2), ("verify", 4.0), ("extend", 0.5)):
                probes.phase_begin(name)
                clock.ms(ms)
                probes.phase_end(name)
            probes.record_accept([3], bonus_included=False)
            probes.cycle_end()
            clock.ms(0.31)
    probes.cycle_begin()
    probes.flush()
    probes.reset(environ={})
    return out


def test_profile_shows_steady_table_boundaries_and_predicts_from_steady(tmp_path, monkeypatch, capsys):
    from sglang_eagle3_ext import cli
    from sglang_eagle3_ext.measure import analysis

    f = issue15_run(tmp_path, monkeypatch)
    s = accounting.summarize(prof_records.load(f))
    assert s["windows"] == 3 and s["basis"] == "steady"  # window 1 (warm-up) left out
    assert s["phases"]["cycle"]["mean_ms"] == pytest.approx(6.01)
    assert s["eff_tok_s"] == round(4000 / 6.01, 2) == 665.56
    assert s["all_cycles"]["phases"]["cycle"]["mean_ms"] > 6.9  # the request starts averaged in
    b = s["boundary"]
    assert b["joins"] == 6 and b["extra_ms_per_join"] == pytest.approx(35.0, abs=0.01)
    assert s["by_batch"]["1"]["per_stream_tok_s"] == 665.56
    # prediction and break-even read the steady cycle
    rows = {p.steps: p for p in analysis.predict_from_run(s, 1000 / 500)}
    assert rows[3].cycle_ms == pytest.approx(6.01) and rows[3].kind == "measured"
    raw = json.loads(f.read_text().splitlines()[1])
    assert analysis.cost_basis(raw)[1] == "steady"
    assert analysis.predict_from_run(raw)[-1].cycle_ms == pytest.approx(6.01)
    assert analysis.cost_basis({"phases": raw["phases"]})[1] == "all"

    rc = cli.main(["profile", str(f), "--baseline-tps", "500"])
    outp = capsys.readouterr().out
    assert rc == 0
    for text in ("steady state", "steady cycles", "665.6", "Request boundaries", "ms per join",
                 "extend 6", "other 210.0", "Steady cycles by batch size", "Break-even accept len @ 500 tok/s",
                 "3.00"):  # 6.01 ms x 500 tok/s / 1000 = 3.005
        assert text in outp, text


def test_profile_bench_side_by_side_with_our_bench_and_bench_serving(tmp_path, monkeypatch, capsys):
    from sglang_eagle3_ext import cli

    f = issue15_run(tmp_path, monkeypatch)
    ours = tmp_path / "bench.json"
    ours.write_text(json.dumps({"schema": "eagle3_bench/1", "params": {"concurrency": 1},
                                "summary": {"decode_tok_s": {"avg": 664.0, "median": 664.2},
                                            "accept_length": 4.0}}))
    rc = cli.main(["profile", str(f), "--bench", str(ours), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    a = doc["agreement"][str(f)]
    assert a["decode_tok_s"] == {"profile": 665.56, "client": 664.0, "diff_pct": round((665.56 / 664 - 1) * 100, 2)}
    assert abs(a["decode_tok_s"]["diff_pct"]) < 0.5 and a["accept_len"]["diff_pct"] == 0.0
    assert a["all_cycles_decode_tok_s"]["diff_pct"] < -10  # the old reading: off by the request starts

    # SGLang bench_serving --output-file: JSONL, the last line counts; 1000 / median TPOT
    serving = tmp_path / "serving.jsonl"
    line = {"backend": "sglang", "max_concurrency": 1, "median_tpot_ms": 1.5, "mean_tpot_ms": 1.52,
            "accept_length": 3.98, "output_throughput": 650.0}
    serving.write_text(json.dumps({**line, "median_tpot_ms": 9.9}) + "\n" + json.dumps(line) + "\n")
    rc = cli.main(["profile", str(f), "--bench", str(serving)])
    outp = capsys.readouterr().out
    assert rc == 0
    for text in ("Profile vs client (SGLang bench_serving", "666.7", "665.6", "-0.2%", "3.980",
                 "+0.5%", "1000 / median_tpot_ms (1.500 ms)"):
        assert text in outp, text


@pytest.mark.parametrize("content,expect", [
    ('{"schema": "eagle3_bench/9"}', "no median_tpot_ms / mean_tpot_ms"),
    ("not json at all\n", "not a bench result or a bench_serving JSON(L) result"),
])
def test_profile_bench_bad_file_is_one_line(tmp_path, monkeypatch, capsys, content, expect):
    from sglang_eagle3_ext import cli

    f = issue15_run(tmp_path, monkeypatch)
    capsys.readouterr()
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert cli.main(["profile", str(f), "--bench", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expect in err[0]


def test_bench_serving_imports_with_the_datasets_standin():
    """`python -m sglang.bench_serving --help` in the real SGLang of the venv, with HF datasets
    absent: the stand-in in tools/gpu/standins makes the import chain complete."""
    import importlib.util
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("datasets") is not None:
        pytest.skip("the real datasets package is installed")
    if importlib.util.find_spec("sglang") is None:
        pytest.skip("SGLang not installed")
    env = dict(os.environ)
    shims = [str(REPO / "tools/gpu/standins")]
    probe = subprocess.run([sys.executable, "-c", "import torchvision.transforms"], capture_output=True,
                           timeout=120, cwd=REPO)
    if probe.returncode != 0:  # CPU torch: SGLang's import chain needs the test shim
        shims.append(str(REPO / "tests/shims/torchvision_stub"))
    base = [sys.executable, "-m", "sglang.bench_serving", "--help"]
    without = subprocess.run(base, capture_output=True, text=True, timeout=300, cwd=REPO,
                             env={**env, "PYTHONPATH": os.pathsep.join([*shims[1:], env.get("PYTHONPATH", "")])})
    assert without.returncode != 0 and "No module named 'datasets'" in without.stderr
    r = subprocess.run(base, capture_output=True, text=True, timeout=300, cwd=REPO,
                       env={**env, "PYTHONPATH": os.pathsep.join([*shims, env.get("PYTHONPATH", "")])})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--output-file" in r.stdout and "--dataset-name" in r.stdout


def test_sweep_cost_model_reads_steady_cycles(tmp_path, monkeypatch):
    """sweep.analyse fits cycle ms vs steps on the profile summaries: steady cycles when the
    records carry the split, all cycles otherwise (and it says so)."""
    from sglang_eagle3_ext.tune import sweep

    summary = accounting.summarize(prof_records.load(issue15_run(tmp_path, monkeypatch)))

    def cfg(name, steps, baseline=False, profile=None, tps=600.0):
        return {"name": name, "status": "ok", "baseline": baseline, "steps": steps, "topk": 1,
                "nccl": None, "custom_all_reduce": None, "profile": profile,
                "bench": {"summary": {"decode_tok_s": {"avg": tps}, "accept_length": None if baseline else 4.0}}}

    def at(steps: int, ms: float, basis: str = "steady") -> dict:
        p = json.loads(json.dumps(summary))
        p["phases"]["cycle"]["mean_ms"] = ms
        p["basis"] = basis
        return p

    doc = {"configs": [cfg("no-spec", None, baseline=True, tps=500.0),
                       cfg("k3", 3, profile=summary), cfg("k1", 1, profile=at(1, 4.01))]}
    res = sweep.analyse(doc)
    k3 = next(r for r in res["break_even"] if r["name"] == "k3")
    assert k3["cycle_ms"] == pytest.approx(6.01) and k3["break_even"] == pytest.approx(6.01 * 500 / 1000)
    assert res["cost_model"]["cd"] == pytest.approx(1.0) and res["cost_model"]["c0"] == pytest.approx(3.01)
    assert not any("over all cycles" in n for n in res["notes"])
    doc["configs"][2]["profile"] = at(1, 4.01, basis="all")
    assert any("cycle times of k1 are over all cycles" in n for n in sweep.analyse(doc)["notes"])


def test_per_rank_streams_and_the_slowest_rank(tmp_path, monkeypatch, capsys):
    """Three TP ranks of one run, each its own stream (rank 2's verify 0.4 ms slower): `profile`
    given the rank-0 file finds the .rankN siblings, shows each phase per rank and names rank 2."""
    from sglang_eagle3_ext import cli

    out = tmp_path / "prof.jsonl"
    for rank, verify in ((0, 28.0), (1, 28.1), (2, 28.4)):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "3")
        play(tmp_path, [("prefill", 5.0), *[("decode", [2], verify)] * 12], EAGLE3_PROFILE_OUT=str(out))
    assert sorted(p.name for p in tmp_path.glob("prof.jsonl*")) == ["prof.jsonl", "prof.jsonl.rank1",
                                                                     "prof.jsonl.rank2"]
    assert [p.name for p in prof_records.rank_siblings(out)] == ["prof.jsonl.rank1", "prof.jsonl.rank2"]
    assert prof_records.rank_base(tmp_path / "prof.jsonl.rank2") == (str(out), 2)
    capsys.readouterr()
    # the rank-0 file alone, or the three named: one column in the main table, one rank table
    for argv in ([str(out)], [str(out), str(out) + ".rank1", str(out) + ".rank2"]):
        assert cli.main(["profile", *argv, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [f["file"] for f in doc["files"]] == [str(out)] and doc["files"][0]["rank"] == 0
        spread = doc["ranks"][str(out)]
        assert spread["ranks"] == [0, 1, 2] and spread["slowest_rank"] == 2 and spread["stat"] == "p50_ms"
        v = spread["phases"]["verify"]
        assert v["by_rank"] == {"0": 28.0, "1": 28.1, "2": 28.4} and v["spread_ms"] == pytest.approx(0.4)
        assert spread["phases"]["draft"]["spread_ms"] == 0.0
    assert cli.main(["profile", str(out) + ".rank1"]) == 0  # a rank file finds its siblings too
    text = capsys.readouterr().out
    for t in ("Per-rank phase p50 (steady cycles)", "rank 2", "28.40", "1.4%)", "slowest rank: 2"):
        assert t in text, text
