"""Open-loop bench (`bench --request-rate`) against the real streaming HTTP stand-in
(tests/standin_openai.py, in this process: its request arrival times are on the client's clock):
the schedule is honoured and a late send is recorded, per-request lengths and expectations ride
from the prompt file into the result, the concurrency cap holds, and bad inputs / a dying server /
Ctrl-C end in one line. Latency figures themselves: tests/test_serving_stats.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from standin_openai import StandIn

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import records, serving_doc
from sglang_eagle3_ext.measure import arrivals, compare, open_loop
from sglang_eagle3_ext.measure.prompts import PromptItem
from sglang_eagle3_ext.runtime.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def _opts(url: str, **kw) -> open_loop.OpenLoopOptions:
    kw.setdefault("rates", [10.0])
    kw.setdefault("items", [PromptItem("hello")])
    kw.setdefault("num_requests", 20)
    kw.setdefault("max_tokens", 8)
    kw.setdefault("warmup", 0)
    return open_loop.OpenLoopOptions(url=url, **kw)


def test_schedule_is_honoured_at_the_server():
    """The client follows the plan (arrivals.arrival_times): each request is planned where the plan
    says, never sent before its time, and reaches the server no earlier than that either, so the
    server sees the load spread over the plan's seconds, not all at once nor one after the other.

    Only bounds that no slow or busy machine can break are asserted here (a send is never early);
    how close to the plan the sends land is a timing figure: benchmarks/open_loop_schedule.py
    prints it (the median offset was 2.57 ms on a loaded 2-core box, under 1 ms idle)."""
    with StandIn(ttft_s=0.005, interval_s=0.002) as s:
        t_before = time.perf_counter()
        doc = open_loop.run_open_loop(_opts(s.url, num_requests=30, seed=3))
        arrived = sorted(s.arrived)
    planned = arrivals.arrival_times(10.0, 1.0, 3, count=30)
    rate = doc["rates"][0]
    assert rate["summary"]["completed"] == 30 and rate["summary"]["failed"] == 0 and len(arrived) == 30
    assert [r["at_ms"] for r in rate["requests"]] == pytest.approx([t * 1000 for t in planned], abs=1e-3)
    # never early: every send at or after its planned time (the run's clock starts after t_before)
    assert all(r["sent_ms"] >= r["at_ms"] - 1e-3 for r in rate["requests"]), rate["requests"]
    # ... and so never early at the server: the i-th arrival comes no sooner than the i-th planned
    # time, nor than the i-th send (a request arrives after it is sent); the plan spans seconds, so
    # a client that sent everything at once would fail this
    sent = sorted(r["sent_ms"] / 1000 for r in rate["requests"])
    assert planned[-1] > 1.0
    assert all(a >= t_before + t for a, t in zip(arrived, planned, strict=True))
    assert all(a >= t_before + x for a, x in zip(arrived, sent, strict=True))


def test_a_late_send_is_recorded(monkeypatch):
    real = open_loop._sleep_until
    calls = {"n": 0}

    def oversleep(t: float) -> None:
        calls["n"] += 1
        real(t + (0.05 if calls["n"] == 4 else 0.0))  # the 4th send is held 50 ms past its time

    monkeypatch.setattr(open_loop, "_sleep_until", oversleep)
    with StandIn(ttft_s=0.002, interval_s=0.001) as s:
        doc = open_loop.run_open_loop(_opts(s.url, rates=[20.0], num_requests=8))
    reqs = doc["rates"][0]["requests"]
    assert reqs[3]["late_ms"] >= 45 and all(r["late_ms"] < 45 for i, r in enumerate(reqs) if i != 3)
    assert doc["rates"][0]["schedule"]["late_sends"] >= 1
    assert any("did not keep the schedule" in w for w in doc["rates"][0]["warnings"])


def test_max_concurrency_caps_streams_and_ttft_starts_at_send():
    with StandIn(ttft_s=0.01, interval_s=0.004) as s:
        doc = open_loop.run_open_loop(_opts(s.url, rates=[float("inf")], num_requests=9,
                                            max_concurrency=2, max_tokens=20))
        peak = s.peak
    rate = doc["rates"][0]
    assert peak == 2 and rate["request_rate"] == "inf"
    q = [r["queued_ms"] for r in rate["requests"]]
    assert q[0] == q[1] == 0 and max(q) > 100  # later arrivals waited for a slot ...
    assert rate["summary"]["ttft_ms"]["max"] < 60  # ... and their TTFT starts when sent


def test_lengths_and_expectations_ride_from_the_file(tmp_path, capsys):
    items = [{"id": f"r{i}", "output_len": 3 + 4 * i, "expect": {"accept_len": {"3": 2.0 + i / 10}},
              "conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "a"}]}
             for i in range(5)]
    f = tmp_path / "t.json"
    f.write_text(json.dumps(items))
    out = tmp_path / "ol.json"
    with StandIn(ttft_s=0.003, interval_s=0.001, tokens_per_chunk=2, spec="sglext") as s:
        rc = cli.main(["bench", "--url", s.url, "--prompts", str(f), "--request-rate", "50,inf",
                       "--num-requests", "10", "--seed", "9", "--slo", "ttft=500,itl=200",
                       "--warmup", "1", "--out", str(out)])
        asked = [b["max_tokens"] for b in s.requests]
        prompts = [b["messages"][0]["content"] for b in s.requests]
    assert rc == 0
    doc = serving_doc.load_serving(out)
    assert records.to_json(records.ServingResult.from_json(doc, "x")) == doc
    order = arrivals.request_order(5, 10, 9, "shuffle")
    for e in doc["rates"]:
        reqs = e["requests"]
        assert [r["prompt_index"] for r in reqs] == order
        assert [r["tokens"] for r in reqs] == [3 + 4 * p for p in order]
        assert [r["meta"]["id"] for r in reqs] == [f"r{p}" for p in order]
        s_ = e["summary"]
        assert s_["accept_source"] == "sglext" and s_["goodput"]["good"] == 10
        # pooled expectation: all tokens over all expected verifies
        tok = [3 + 4 * p for p in order]
        exp = sum(tok) / sum(t / (2.0 + p / 10) for t, p in zip(tok, order, strict=True))
        assert s_["expected_accept_len"] == {"3": pytest.approx(exp, abs=1e-4)}
    # warm-up: one request per rate, at most 32 tokens, then the schedule
    assert len(asked) == 22 and asked[0] == min(3 + 4 * order[0], 32)
    # what the server got (the document's order is checked above: two sends a few microseconds
    # apart may reach the server's log either way round)
    assert sorted(prompts[1:11]) == sorted(f"q{p}" for p in order)
    text = capsys.readouterr().out
    assert "open loop" in text and "goodput" in text and f"wrote {out}" in text
    # compare reads it (one row per rate and file), plot draws it
    rows = compare.serving_rows(compare.load_serving_set([str(out)]))
    assert [r["request_rate"] for r in rows] == [50.0, "inf"]
    assert cli.main(["compare", str(out), "--markdown"]) == 0
    assert "| rate /s |" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    from sglang_eagle3_ext.measure.plot import plot_serving

    assert plot_serving([doc], tmp_path / "lat.png").stat().st_size > 1000


def test_output_len_distribution_is_seeded_and_capped():
    with StandIn(ttft_s=0.002, interval_s=0.0005) as s:
        dist = arrivals.parse_lengths("lognormal:10,1.0", "--output-len")
        a = open_loop.run_open_loop(_opts(s.url, rates=[float("inf")], output_len=dist, max_tokens=25))
        b = open_loop.run_open_loop(_opts(s.url, rates=[float("inf")], output_len=dist, max_tokens=25))
    la = [r["output_len"] for r in a["rates"][0]["requests"]]
    assert la == [r["output_len"] for r in b["rates"][0]["requests"]]
    assert max(la) <= 25 and len(set(la)) > 3
    assert [r["tokens"] for r in a["rates"][0]["requests"]] == la


@pytest.mark.parametrize("args,words", [
    (["--request-rate", "0"], "from 1e-06"), (["--request-rate", "-2"], "from 1e-06"),
    (["--request-rate", "nan"], "not a number"), (["--request-rate", "x"], "not a number"),
    (["--request-rate", "1", "--slo", "ttft"], "KEY=MS"), (["--request-rate", "1", "--slo", "itl=-1"], "more than 0"),
    (["--request-rate", "1", "--concurrency", "4"], "closed-loop"),
    (["--request-rate", "1", "--runs", "3"], "closed-loop"),
    (["--burstiness", "2"], "give --request-rate"), (["--slo", "ttft=5"], "give --request-rate"),
    (["--request-rate", "1", "--burstiness", "0"], "Gamma shape"),
    (["--request-rate", "1", "--burstiness", "nan"], "Gamma shape"),
    (["--request-rate", "inf", "--duration", "5"], "--num-requests"),
    (["--request-rate", "1", "--duration", "nan"], "--duration"),
    (["--request-rate", "1", "--num-requests", "0"], "--num-requests"),
    (["--request-rate", "1", "--max-concurrency", "0"], "--max-concurrency"),
    (["--request-rate", "1", "--seed", "-1"], "--seed"),
    (["--request-rate", "1", "--output-len", "file"], "output_len"),
    (["--request-rate", "1", "--output-len", "lognormal:1"], "--output-len"),
])
def test_bad_inputs_are_one_line_exit_2(capsys, args, words):
    # nothing listens: every one of these must fail before a request is sent
    rc = cli.main(["bench", "--url", "http://127.0.0.1:9", *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], err


def test_unreachable_server_is_one_line_exit_1(capsys):
    assert cli.main(["bench", "--url", "http://127.0.0.1:9", "--request-rate", "1"]) == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot reach" in lines[0]


def test_a_server_that_dies_mid_run_fails_requests_not_the_bench(tmp_path, capsys):
    out = tmp_path / "ol.json"
    with StandIn(ttft_s=0.005, interval_s=0.005, die_after=6) as s:
        rc = cli.main(["bench", "--url", s.url, "--request-rate", "40,80", "--num-requests", "20",
                       "--max-tokens", "30", "--warmup", "0", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 1 and "Traceback" not in captured.err + captured.out
    doc = json.loads(out.read_text())
    s0 = doc["rates"][0]["summary"]
    assert s0["failed"] >= 14 and s0["completed"] + s0["failed"] == 20
    # a cut stream is a failed request, never a fast one: no failed request enters the figures
    assert s0["ttft_ms"]["n"] == s0["completed"] and s0["total_output_tokens"] == 30 * s0["completed"]
    assert "request(s) failed" in captured.out
    if not s0["completed"]:  # every request failed: the next rate is not run
        assert len(doc["rates"]) == 1


def test_flush_cache_after_each_warm_up(tmp_path, capsys):
    """--flush-cache: one /flush_cache per rate, after its warm-up and before its first request
    (bench_serving's place), recorded in the document; a server that refuses is one line, exit 1."""
    out = tmp_path / "ol.json"
    with StandIn(ttft_s=0.002, interval_s=0.001) as s:
        rc = cli.main(["bench", "--url", s.url, "--request-rate", "50,100", "--num-requests", "5",
                       "--max-tokens", "4", "--warmup", "1", "--flush-cache", "--out", str(out)])
        flushes, arrived = list(s.flushes), list(s.arrived)
    assert rc == 0, capsys.readouterr().err
    assert len(flushes) == 2 and len(arrived) == 12   # (1 warm-up + 5) per rate
    for k, f in enumerate(flushes):                  # rate k: warm-up, flush, then its 5 requests
        warm, first = arrived[6 * k], arrived[6 * k + 1]
        assert warm < f < first
    assert json.loads(out.read_text())["params"]["flush_cache"] is True
    with StandIn() as s:
        s.flush_status = 400
        rc = cli.main(["bench", "--url", s.url, "--request-rate", "50", "--num-requests", "3",
                       "--max-tokens", "4", "--flush-cache"])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 1 and len(lines) == 1 and "/flush_cache answered 400" in lines[0]
    assert cli.main(["bench", "--url", "http://127.0.0.1:9", "--flush-cache"]) == 2
    assert "open-loop flags" in capsys.readouterr().err


def test_open_options_reject_file_lengths_missing():
    with pytest.raises(UserError) as e:
        open_loop.check(_opts("http://x:1", output_len=arrivals.Lengths("file")))
    assert e.value.exit_code == 2


def test_serving_doc_reader_refuses_bad_figures(tmp_path, capsys):
    with StandIn(ttft_s=0.002, interval_s=0.0005) as s:
        doc = open_loop.run_open_loop(_opts(s.url, num_requests=3, rates=[float("inf")]))
    f = tmp_path / "d.json"
    for path, value in ((("summary", "request_throughput"), -1), (("summary", "itl_ms"), "x"),
                        (("request_rate",), 0), (("span",), [5, 1])):
        bad = json.loads(json.dumps(doc))
        tgt = bad["rates"][0]
        for k in path[:-1]:
            tgt = tgt[k]
        tgt[path[-1]] = value
        f.write_text(json.dumps(bad))
        assert cli.main(["compare", str(f)]) == 2
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(lines) == 1 and "rate 1" in lines[0], lines
    f.write_text(json.dumps(doc).replace('"request_throughput": ', '"request_throughput": NaN, "x": '))
    assert cli.main(["compare", str(f)]) == 2
    capsys.readouterr()


def test_ctrl_c_stops_an_open_loop():
    """Real SIGINT to the real CLI (SIGINT at its default in the child, so Python's handler is
    installed even when the suite runs in the background)."""
    with StandIn(mode="hang") as s:
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        proc = subprocess.Popen([sys.executable, "-m", "sglang_eagle3_ext", "bench", "--url", s.url,
                                 "--request-rate", "20", "--num-requests", "50", "--warmup", "0"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 60
        while len(s.requests) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(s.requests) >= 3, "the bench never reached the server"
        proc.send_signal(signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=30)  # a hang guard; how fast is not asserted
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail("bench still running 30 s after Ctrl-C")
    assert proc.returncode == 130
    assert [ln for ln in stderr.splitlines() if ln.strip()] == [
        "bench interrupted (Ctrl-C): open streams closed, nothing written"], stderr
