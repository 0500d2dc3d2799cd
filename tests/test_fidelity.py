"""Profile vs client on real H200 data (docs/data/h200-2026-12-01/8b-p08/p08: EAGLE-3 steps 0..5 x
concurrency 1/8/32, probe records eagle3_prof/2 + our bench/ladder documents). No GPU needed: the
records were written on the H200; here they are only read, through the real CLI where it matters."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3_ext.documents import prof_records
from sglang_eagle3_ext.documents.prof_records import ProfileRun
from sglang_eagle3_ext.measure import accounting, client_twin
from sglang_eagle3_ext.tune import sweep

REPO = Path(__file__).resolve().parent.parent
P08 = REPO / "docs" / "data" / "h200-2026-12-01" / "8b-p08" / "p08"
S3 = P08 / "configs" / "eagle3-s3-k1-d4-no-nccl"


def _cli(*args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


# 1. profile --bench on the s3 config: like with like, and the old whole-file comparison was off

def test_profile_bench_compares_aligned_steady_batch_1_with_the_client():
    r = _cli("profile", str(S3 / "prof.jsonl"), "--bench", str(S3 / "bench.json"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (a,) = doc["agreement"].values()
    assert a["basis"] == "steady batch-1"
    assert a["client"]["concurrency"] == 1
    assert abs(a["decode_tok_s"]["diff_pct"]) < 2.0, a["decode_tok_s"]
    assert abs(a["accept_len"]["diff_pct"]) < 2.0, a["accept_len"]
    assert re.fullmatch(r"\d+ of 33 window\(s\) closed while the bench ran", a["windows"]), a["windows"]

    # the old comparison: the whole file's steady figure (every batch size of the ladder mixed in)
    whole = accounting.summarize(prof_records.load(S3 / "prof.jsonl"))
    assert whole["basis"] == "steady"
    old_diff = (whole["eff_tok_s"] / a["client"]["decode_tok_s"] - 1.0) * 100.0
    assert old_diff < -15.0, (whole["eff_tok_s"], a["client"]["decode_tok_s"])
    assert doc["files"][0]["eff_tok_s"] == whole["eff_tok_s"]  # the main table keeps the whole file


def test_profile_bench_table_says_which_windows():
    r = _cli("profile", str(S3 / "prof.jsonl"), "--bench", str(S3 / "bench.json"))
    assert r.returncode == 0, r.stderr
    assert "steady batch-1" in r.stdout
    assert "closed while the bench ran" in r.stdout


def test_bench_time_is_its_end_so_level_1_windows_are_mostly_batch_1():
    """bench.build_result stamps ``time`` after the runs: the span reaches back over the walls. Read
    as a start, the level-1 span held mostly the batch-8/32 windows of the next ladder levels."""
    run = prof_records.load(S3 / "prof.jsonl")
    client = client_twin.read_client(S3 / "bench.json")
    end = dt.datetime.strptime(json.loads((S3 / "bench.json").read_text())["time"], "%Y-%m-%dT%H:%M:%S%z")
    assert client["span"][1] == end.timestamp() + 1.0
    assert client["span"][0] < end.timestamp() - 2.0  # ~2.2 s of runs before it
    bb = accounting.summarize(client_twin.aligned_run(run, client), all_windows=True)["by_batch"]
    assert bb["1"]["cycles"] > sum(v["cycles"] for k, v in bb.items() if k != "1")


# 2. aligned_run and agreement on constructed records

def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")


def _client(span: tuple[float, float] | None, conc: int | None = 1) -> dict:
    return {"file": "b.json", "kind": "sgl-eagle3 bench", "decode_tok_s": 100.0, "accept_len": 2.0,
            "decode_def": "x", "concurrency": conc, "span": span}


def test_aligned_run_keeps_windows_inside_the_span():
    t = 1_796_096_500.0
    recs = [{"window": i, "time": _iso(t + dt_)} for i, dt_ in enumerate([-10, -2, 0, 3, 5, 6, 20], start=1)]
    recs.append({"window": 8})  # no time: never lined up
    run = ProfileRun(path="p.jsonl", kind="jsonl", records=recs)
    got = client_twin.aligned_run(run, _client((t - 2.0, t + 5.0)))
    assert [r["window"] for r in got.records] == [2, 3, 4, 5]
    assert got.notes == ["4 of 8 window(s) closed while the bench ran"]
    assert got.path == "p.jsonl" and got.kind == "jsonl"
    assert client_twin.aligned_run(run, _client((t + 100.0, t + 200.0))) is None  # no overlap
    assert client_twin.aligned_run(run, _client(None)) is None  # e.g. a bench_serving result
    log_run = ProfileRun(path="p.log", kind="log", records=recs)
    assert client_twin.aligned_run(log_run, _client((t - 100.0, t + 100.0))) is None


def test_read_client_span_from_a_bench_document(tmp_path):
    doc = {"schema": json.loads((S3 / "bench.json").read_text())["schema"], "time": "2026-12-01T03:41:43+0000",
           "params": {"concurrency": 8}, "summary": {"decode_tok_s": {"avg": 100.0}, "accept_length": 2.0},
           "warmup_runs": [{"wall_s": 1.0}], "runs": [{"wall_s": 2.0}, {"wall_s": 3.0}]}
    f = tmp_path / "b.json"
    f.write_text(json.dumps(doc))
    end = dt.datetime(2026, 12, 1, 3, 41, 43, tzinfo=dt.timezone.utc).timestamp()
    c = client_twin.read_client(f)
    assert c["concurrency"] == 8
    assert c["span"] == (end - 6.0 - 1.0, end + 1.0)
    doc["time"] = "not a time"
    f.write_text(json.dumps(doc))
    assert client_twin.read_client(f)["span"] is None


def test_agreement_uses_steady_batch_c_else_the_summary_figures():
    summary = {"basis": "steady", "eff_tok_s": 80.0, "accept_len": 1.8, "all_cycles": {"eff_tok_s": 60.0},
               "by_batch": {"8": {"per_stream_tok_s": 110.0, "accept_len": 2.2}}}
    a8 = client_twin.agreement(summary, _client(None, conc=8))
    assert a8["basis"] == "steady batch-8"
    assert a8["decode_tok_s"] == {"profile": 110.0, "client": 100.0, "diff_pct": 10.0}
    assert a8["accept_len"]["profile"] == 2.2 and a8["accept_len"]["diff_pct"] == 10.0
    for conc in (1, None):  # by_batch lacks that concurrency / the client has none
        a = client_twin.agreement(summary, _client(None, conc=conc))
        assert a["basis"] == "steady"
        assert a["decode_tok_s"]["profile"] == 80.0 and a["decode_tok_s"]["diff_pct"] == -20.0
        assert a["accept_len"]["profile"] == 1.8 and a["accept_len"]["diff_pct"] == -10.0
    assert a8["all_cycles_decode_tok_s"] == {"profile": 60.0, "diff_pct": -40.0}


# 3. sweep --report and profile_summary on the real sweep

def _tree_digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


def test_sweep_report_cost_model_from_steady_batch_1_cycles(tmp_path):
    d = tmp_path / "p08"
    shutil.copytree(P08, d)
    before = _tree_digest(d)
    r = _cli("sweep", "--report", str(d))
    assert r.returncode == 0, r.stderr
    m = re.search(r"cycle_ms = ([\d.]+) \+ ([\d.]+) x steps", r.stdout)
    assert m, r.stdout
    assert abs(float(m[1]) - 5.75) <= 0.05 and abs(float(m[2]) - 0.26) <= 0.05, m[0]
    assert "over all cycles" not in r.stdout
    assert _tree_digest(d) == before  # DIR is only read


def test_profile_summary_narrows_to_the_bench_batch():
    prof = S3 / "prof.jsonl"
    s1 = sweep.profile_summary(prof, 1)
    assert s1["basis"] == "steady batch-1"
    assert s1["phases"]["cycle"]["mean_ms"] == pytest.approx(6.49, abs=0.02)
    assert s1["all_batches"]["basis"] == "steady"
    whole = sweep.profile_summary(prof)
    assert whole["basis"] == "steady"
    assert whole["phases"]["cycle"]["mean_ms"] == pytest.approx(8.2, abs=0.1)
    assert s1["all_batches"]["phases"]["cycle"]["mean_ms"] == whole["phases"]["cycle"]["mean_ms"]
    assert sweep.profile_summary(prof, 3)["basis"] == "steady"  # no batch-3 cycles: the whole file


def test_refresh_profiles_reads_each_config_at_its_concurrency():
    doc = json.loads((P08 / "results.json").read_text())
    sweep.refresh_profiles(doc, P08)
    spec = [c for c in doc["configs"] if (P08 / "configs" / c["slug"] / "prof.jsonl").exists()]
    assert len(spec) == 5
    assert all(c["profile"]["basis"] == "steady batch-1" for c in spec)


# 4. benchmarks/fidelity.py over the whole sweep

def test_fidelity_script_over_the_sweep():
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fidelity.py"), str(P08), "--json"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 15
    assert {(x["config"], x["concurrency"]) for x in rows} == {
        (f"eagle3-s{k}-k1-d{k + 1}-no-nccl", c) for k in range(1, 6) for c in (1, 8, 32)}
    for x in rows:
        assert x["basis"] == f"steady batch-{x['concurrency']}"
        assert abs(x["tok_s_diff_pct"]) < 5.0, x
        assert abs(x["al_diff_pct"]) < 5.0, x
