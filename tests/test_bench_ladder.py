"""bench: concurrency ladder, prompt file formats, --timeout, cut streams, Ctrl-C, bad --out/--prompts.

Everything runs against the stand-in server (tests/standin_openai.py): real HTTP, real SSE, on a
fixed clock, with two misbehaving modes (``cut``: the stream closes half-way; ``hang``: the
request is read and never answered). The Ctrl-C tests run the real CLI in a child process and
send it a real SIGINT.
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
from conftest import sigint_default
from standin_openai import StandIn

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import bench_doc
from sglang_eagle3_ext.measure import bench, compare
from sglang_eagle3_ext.measure.prompts import parse_prompts

ROOT = Path(__file__).resolve().parents[1]


def test_ladder_one_bench_per_level(tmp_path, capsys):
    iv, n = 0.004, 41
    out = tmp_path / "ladder.json"
    with StandIn(ttft_s=0.01, interval_s=iv, spec="sglext", tokens_per_chunk=2) as s:
        rc = cli.main(["bench", "--url", s.url, "--concurrency", "1,2,4", "--runs", "2",
                       "--warmup", "1", "--max-tokens", str(n), "--label", "s2", "--out", str(out),
                       "--ignore-eos"])
        sent = list(s.requests)
    assert rc == 0
    assert len(sent) == (1 + 2 + 4) * 3            # (warm-up + 2 runs) per level
    assert all(b["ignore_eos"] is True for b in sent)
    doc = json.loads(out.read_text())
    assert doc["schema"] == bench_doc.LADDER_SCHEMA and doc["params"]["levels"] == [1, 2, 4]
    lv = [x["summary"] for x in doc["levels"]]
    assert [x["concurrency"] for x in lv] == [1, 2, 4]
    for x in lv:  # each stream runs at the stand-in's clock whatever the level
        assert x["per_stream_tok_s"] == pytest.approx(2 / iv, rel=0.1)
        assert x["accept_length"] == pytest.approx(n / 20)
        assert x["ok_runs"] == 2 and x["failed_requests"] == 0
    # total throughput grows with the streams in flight
    assert lv[2]["throughput_tok_s"] > 3 * lv[0]["throughput_tok_s"]
    # each level keeps a full bench document
    assert doc["levels"][1]["bench"]["schema"] == bench_doc.SCHEMA
    text = capsys.readouterr().out
    assert "ladder: s2" in text and "incl. bonus" in text

    # compare: ladders per level against a baseline ladder
    base = json.loads(out.read_text())
    base["label"] = "no-spec"
    for x in base["levels"]:
        x["summary"]["per_stream_tok_s"] /= 2
    bfile = tmp_path / "base.json"
    bfile.write_text(json.dumps(base))
    assert cli.main(["compare", str(bfile), str(out), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    s2 = [r for r in rows if r["config"] == "s2"]
    assert [r["concurrency"] for r in s2] == [1, 2, 4]
    assert all(r["per_stream_vs_baseline_pct"] == pytest.approx(100.0) for r in s2)
    assert cli.main(["compare", str(bfile), str(out), "--markdown"]) == 0
    assert "| concurrency | config |" in capsys.readouterr().out
    # a ladder mixed with a single bench file is refused
    single = tmp_path / "single.json"
    single.write_text(json.dumps(doc["levels"][0]["bench"]))
    assert cli.main(["compare", str(single), str(out)]) == 2


def test_ladder_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from sglang_eagle3_ext.measure.plot import plot_ladders

    doc = {"label": "x", "levels": [{"summary": {"concurrency": c, "per_stream_tok_s": 100 / c,
                                                 "throughput_tok_s": 100.0}} for c in (1, 2, 4)]}
    p = plot_ladders([doc], tmp_path / "ladder.png")
    assert p.stat().st_size > 1000


def test_prompt_formats():
    assert parse_prompts("a\n\nb\n") == ["a", "b"]
    assert parse_prompts('["x", "y"]') == ["x", "y"]
    jl = '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}\n\n' \
         '{"messages": [{"role": "user", "content": "q2"}]}\n'
    assert parse_prompts(jl) == [[{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
                                 [{"role": "user", "content": "q2"}]]
    share = json.dumps([
        {"conversations": [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi"}]},
        {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"},
                           {"from": "human", "value": "c"}, {"from": "gpt", "value": "d"}]},
        {"conversations": [{"from": "gpt", "value": "only an answer"}]},
    ])
    got = parse_prompts(share)
    assert got[0] == "hello"                       # one user turn: sent as a plain prompt
    assert got[1] == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                      {"role": "user", "content": "c"}]
    assert len(got) == 2                           # no user turn: left out


def test_chat_prompts_are_sent_as_messages(tmp_path):
    pf = tmp_path / "p.jsonl"
    pf.write_text('{"messages": [{"role": "system", "content": "be brief"}, '
                  '{"role": "user", "content": "why"}]}\n')
    with StandIn(ttft_s=0.005, interval_s=0.001) as s:
        assert cli.main(["bench", "--url", s.url, "--runs", "1", "--warmup", "0", "--max-tokens", "5",
                         "--prompts", str(pf), "--json"]) == 0
        assert s.requests[0]["messages"] == [{"role": "system", "content": "be brief"},
                                             {"role": "user", "content": "why"}]


def test_cut_stream_is_a_failed_request(capsys):
    with StandIn(ttft_s=0.005, interval_s=0.002, mode="cut", cut_after=3) as s:
        res = bench.run_bench(bench.BenchOptions(url=s.url, runs=1, warmup=0, max_tokens=50,
                                                 concurrency=2))
        rc = cli.main(["bench", "--url", s.url, "--runs", "1", "--warmup", "0", "--max-tokens", "50"])
    sm = res["summary"]
    assert sm["ok_runs"] == 0 and sm["failed_requests"] == 2
    assert "no finish_reason" in res["errors"][0]
    assert rc == 1
    assert "failed" in capsys.readouterr().out


def test_timeout_fails_the_request_not_the_process():
    with StandIn(mode="hang") as s:
        t0 = time.monotonic()
        res = bench.run_bench(bench.BenchOptions(url=s.url, runs=1, warmup=0, max_tokens=5,
                                                 concurrency=2, timeout_s=0.5))
        took = time.monotonic() - t0
    assert res["summary"]["failed_requests"] == 2 and res["summary"]["ok_runs"] == 0
    assert "--timeout" in res["errors"][0]
    assert took < 60  # a hang guard: the server never answers, the 0.5 s timeout ended both requests


def test_bad_out_and_binary_prompts(tmp_path, capsys):
    binf = tmp_path / "p.bin"
    binf.write_bytes(b"\x00\x01\x02abc\x00")
    # nothing listens on the URL: both must fail on the input, before any request
    assert cli.main(["bench", "--url", "http://127.0.0.1:9", "--out", str(tmp_path)]) == 2
    assert cli.main(["bench", "--url", "http://127.0.0.1:9", "--prompts", str(binf)]) == 2
    assert cli.main(["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1,x"]) == 2
    assert cli.main(["bench", "--url", "http://127.0.0.1:9", "--timeout", "0"]) == 2
    err = capsys.readouterr().err
    assert "a folder" in err and "binary file" in err and "Traceback" not in err
    assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 4


@pytest.mark.parametrize("concurrency", ["1", "8", "1,4"])
def test_ctrl_c_stops_every_stream(concurrency):
    """Real SIGINT to the real CLI while every request hangs on a server that never answers: exit
    130 and one line. How fast is not asserted (a busy machine decides that); a hang is."""
    first = int(concurrency.split(",")[0])
    with StandIn(mode="hang") as s:
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        proc = subprocess.Popen([sys.executable, "-m", "sglang_eagle3_ext", "bench", "--url", s.url,
                                 "--concurrency", concurrency, "--runs", "1", "--warmup", "0"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=sigint_default)
        deadline = time.monotonic() + 60
        while len(s.requests) < first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(s.requests) == first, "the bench never reached the server"
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail("bench still running 30 s after Ctrl-C")
    assert proc.returncode == 130
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert lines == ["bench interrupted (Ctrl-C): open streams closed, nothing written"], stderr


def test_compare_ladder_helpers_reject_non_ladder(tmp_path):
    f = tmp_path / "x.json"
    f.write_text(json.dumps({"schema": "eagle3_bench/1"}))
    assert not compare.is_ladder_set([str(f)])
