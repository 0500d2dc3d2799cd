"""bench: timing arithmetic and accept-length sources against the controlled-timing stand-in server.

The stand-in (tests/standin_openai.py) is a real HTTP server streaming real SSE on a fixed clock,
so the expected tok/s are known exactly (see its docstring). Tolerances cover scheduler jitter on a
loaded 2-core CI machine, not arithmetic slack: a wrong formula (counting chunks, including TTFT
in decode time, off-by-one on the first token) moves the figure far outside them.
"""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path

import pytest
from standin_openai import StandIn

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import bench_doc
from sglang_eagle3_ext.measure import bench, chat_client

REPO = Path(__file__).resolve().parents[1]


def _opts(url: str, **kw) -> bench.BenchOptions:
    kw.setdefault("runs", 3)
    kw.setdefault("warmup", 1)
    kw.setdefault("max_tokens", 101)
    return bench.BenchOptions(url=url, **kw)


def test_decode_ttft_e2e_exact_one_token_chunks():
    ttft, iv, n = 0.030, 0.005, 101
    with StandIn(ttft_s=ttft, interval_s=iv) as s:
        res = bench.run_bench(_opts(s.url, max_tokens=n))
        sent = s.requests
    sm = res["summary"]
    assert sm["ok_runs"] == 3 and sm["failed_requests"] == 0
    assert sm["decode_tok_s"]["avg"] == pytest.approx(1 / iv, rel=0.03)        # 200 tok/s
    assert ttft <= sm["ttft_s"]["avg"] < ttft + 0.010
    assert sm["e2e_tok_s"]["avg"] == pytest.approx(n / (ttft + (n - 1) * iv), rel=0.03)
    assert sm["completion_tokens"] == 3 * n
    assert sm["accept_length"] is None and sm["accept_source"] == "none"
    run = res["runs"][0]["requests"][0]
    assert run["first_tokens_exact"] and run["first_chunk_tokens"] == 1
    assert run["content_chunks"] == n
    # What the server was asked: greedy, streamed, usage on, spec details on; 1 warm-up + 3 runs.
    assert len(sent) == 4
    body = sent[0]
    assert body["temperature"] == 0 and body["stream"] is True and body["max_tokens"] == n
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["return_spec_tokens_details"] is True
    assert body["messages"][0]["content"] == bench.DEFAULT_PROMPT
    assert body["model"] == "standin-model"


def test_multi_token_chunks_and_per_request_accept_length_from_sglext():
    iv, c, n = 0.006, 3, 101
    with StandIn(ttft_s=0.02, interval_s=iv, tokens_per_chunk=c, spec="sglext") as s:
        res = bench.run_bench(_opts(s.url, max_tokens=n))
    sm = res["summary"]
    chunks = math.ceil((n - 1) / c)                       # 34 chunks, the last holds 1 token
    assert sm["decode_tok_s"]["avg"] == pytest.approx((n - 1) / (chunks * iv), rel=0.03)
    assert sm["accept_source"] == "sglext"
    assert sm["accept_length"] == pytest.approx(n / chunks)
    assert res["runs"][0]["verify_ct"] == chunks


def test_accept_length_from_prometheus_counter_differences():
    c, n = 4, 81
    with StandIn(ttft_s=0.01, interval_s=0.004, tokens_per_chunk=c, spec="metrics") as s:
        # Traffic before the bench (another client) must not leak into our figure.
        s.verify_total, s.gen_total = 1000, 1234
        res = bench.run_bench(_opts(s.url, max_tokens=n, runs=2))
    sm = res["summary"]
    assert sm["accept_source"] == "metrics"
    assert sm["accept_length"] == pytest.approx(n / (n - 1) * c)   # 81 / 20 verifies
    assert all(r["metrics_clean"] for r in res["runs"])


def test_counter_contamination_is_flagged():
    with StandIn(ttft_s=0.01, interval_s=0.002, tokens_per_chunk=2, spec="metrics",
                 extra_metrics_tokens=7) as s:
        res = bench.run_bench(_opts(s.url, max_tokens=41, runs=1, warmup=0))
    assert res["runs"][0]["metrics_clean"] is False


def test_concurrency_sends_parallel_requests_and_aggregates():
    iv, n = 0.005, 61
    with StandIn(ttft_s=0.02, interval_s=iv) as s:
        res = bench.run_bench(_opts(s.url, max_tokens=n, concurrency=3, runs=2, warmup=1))
        assert len(s.requests) == 9
    run = res["runs"][0]
    assert len(run["requests"]) == 3
    assert run["decode_tok_s"] == pytest.approx(1 / iv, rel=0.05)
    # three streams at once: aggregate throughput ~3x one stream's end-to-end rate
    assert run["throughput_tok_s"] == pytest.approx(3 * run["e2e_tok_s"], rel=0.15)


def test_parse_counters_sums_label_sets_and_ignores_others():
    text = (
        "# TYPE sglang:spec_verify_calls_total counter\n"
        'sglang:spec_verify_calls_total{model_name="m",engine_type="unified"} 10.0\n'
        'sglang:spec_verify_calls_total{model_name="m",engine_type="other"} 5.0\n'
        'sglang:spec_verify_calls_created{model_name="m"} 1.7e9\n'
        'sglang:generation_tokens_total{is_streaming="true"} 40.0\n'
        'sglang:generation_tokens_total{is_streaming="false"} 2.0\n'
        "sglang:spec_accept_length 3.5\n"
    )
    assert chat_client.parse_counters(text) == {
        "sglang:spec_verify_calls_total": 15.0, "sglang:generation_tokens_total": 42.0}


def test_cli_bench_writes_result_and_compare_reads_it(tmp_path, capsys):
    out = tmp_path / "r.json"
    with StandIn(ttft_s=0.01, interval_s=0.002, spec="sglext", tokens_per_chunk=2) as s:
        rc = cli.main(["bench", "--url", s.url + "/v1", "--runs", "2", "--warmup", "0",
                       "--max-tokens", "21", "--label", "eagle3 s2", "--prompt", "hi",
                       "--out", str(out)])
        assert s.requests[0]["messages"][0]["content"] == "hi"
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == bench_doc.SCHEMA and doc["label"] == "eagle3 s2"
    assert len(doc["runs"]) == 2 and doc["summary"]["accept_source"] == "sglext"
    text = capsys.readouterr().out
    assert "decode tok/s" in text and "accept length" in text and "incl. bonus" in text
    assert cli.main(["compare", str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["config"] == "eagle3 s2" and rows[0]["is_baseline"]


def test_prompts_file_cycles(tmp_path):
    pf = tmp_path / "p.txt"
    pf.write_text("first prompt\n\nsecond prompt\n")
    with StandIn(ttft_s=0.005, interval_s=0.001) as s:
        rc = cli.main(["bench", "--url", s.url, "--runs", "3", "--warmup", "0",
                       "--max-tokens", "5", "--prompts", str(pf), "--json"])
        got = [r["messages"][0]["content"] for r in s.requests]
    assert rc == 0
    assert got == ["first prompt", "second prompt", "first prompt"]


def test_a_run_set_that_misses_prompts_says_so():
    """H100 round 12: --runs 3 --warmup 1 at one stream sent prompts 1-3 of 8; the summary must say
    the figures cover those texts (real HTTP to the stand-in server; its accept length is fixed)."""
    prompts = [f"text {i}" for i in range(8)]
    with StandIn(ttft_s=0.002, interval_s=0.0005) as s:
        part = bench.run_bench(_opts(s.url, prompts=prompts, max_tokens=4))
        whole = bench.run_bench(_opts(s.url, prompts=prompts, max_tokens=4, runs=8))
        wide = bench.run_bench(_opts(s.url, prompts=prompts, max_tokens=4, concurrency=8, runs=1))
    used = [q["prompt_index"] for r in part["runs"] for q in r["requests"]]
    assert used == [1, 2, 3]
    assert ("the measured requests used 3 of the 8 prompts (index 1, 2, 3): the figures describe those "
            "texts only; --runs 8 at concurrency 1 sends each at least once") in part["warnings"]
    assert not [w for w in whole["warnings"] + wide["warnings"] if "prompts" in w]


def _free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def test_bad_inputs_are_user_errors(tmp_path, capsys):
    assert cli.main(["bench", "--url", "ftp://x", "--runs", "1"]) == 2
    assert cli.main(["bench", "--url", "http://127.0.0.1:1", "--runs", "0"]) == 2
    assert cli.main(["bench", "--url", "http://127.0.0.1:9", "--prompts", str(tmp_path / "nope")]) == 2
    assert cli.main(["bench", "--url", f"http://127.0.0.1:{_free_port()}", "--runs", "1"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach" in err and "Traceback" not in err


def _runs_from(path: Path, concurrency: int) -> list[bench.RunRecord]:
    """Runs of one ladder level of a committed H200 bench document, as build_result gets them."""
    doc = json.loads(path.read_text())
    lv = next(x for x in doc["levels"] if x["concurrency"] == concurrency)
    return [bench.RunRecord(**{**r, "requests": [chat_client.RequestRecord(**q) for q in r["requests"]]})
            for r in lv["bench"]["runs"]]


def test_a_burst_after_a_late_first_token_is_named():
    """H200 round 7 (docs/results.md): one 8-stream run's first tokens came 0.51 s late and
    its streams then "decoded" at 1439 tok/s against 495; the run is named, the others are not,
    and a steady level gets no warning."""
    data = REPO / "docs" / "data" / "h200-2026-12-02-r7" / "long"
    opts = bench.BenchOptions(url="http://gpu:8000", concurrency=8)
    doc = bench.build_result(opts, "m", _runs_from(data / "policy" / "transition-r0.json", 8), [])
    burst = [w for w in doc["warnings"] if "came in a burst" in w]
    assert len(burst) == 1 and burst[0].startswith("run 3: first tokens 0.52 s after sending (median 0.10 s)")
    assert doc["summary"]["decode_tok_s"]["median"] == pytest.approx(495.45, abs=0.01)
    steady = bench.build_result(opts, "m", _runs_from(data / "static5" / "transition-r0.json", 64), [])
    assert not [w for w in steady["warnings"] if "burst" in w]
    assert bench.burst_warnings(_runs_from(data / "policy" / "transition-r0.json", 8)[1:]) == []


def test_round_12s_one_stream_ladder_is_named_partial():
    """The recorded H100 ladder (docs/data/h100-2026-12-06-r12s): its one-stream level ran texts
    1-3 of eight and is named; its 16-stream level sent all eight."""
    from types import SimpleNamespace

    doc = json.loads((REPO / "docs/data/h100-2026-12-06-r12s/static2/ladder-many.json").read_text())
    got = {}
    for lv in doc["levels"]:
        runs = [SimpleNamespace(requests=[SimpleNamespace(prompt_index=q["prompt_index"]) for q in r["requests"]])
                for r in lv["bench"]["runs"]]
        got[lv["concurrency"]] = bench.coverage_warning(8, lv["concurrency"], runs)
    assert got[16] == []
    assert got[1] and got[1][0].startswith("the measured requests used 3 of the 8 prompts (index 1, 2, 3)")
