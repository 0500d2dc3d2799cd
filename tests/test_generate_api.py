"""`bench --api generate`: SGLang's native /generate, what bench_serving's default `--backend
sglang` measures. Against the real streaming HTTP stand-in (tests/standin_openai.py, which also
speaks /generate), beside bench_serving's OWN request function taken from the pinned release
sources (tests/bench_serving_src.py): the same payload, the same token counts, the same number of
per-token ITL values and the same accept length on one stream; then the CLI end to end, closed
and open loop, and the one-line refusal of a prompt with no single text."""

from __future__ import annotations

import json
import statistics

import pytest
from bench_serving_src import generate_client
from standin_openai import StandIn

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.measure import serving_stats
from sglang_eagle3_ext.measure.bench import BenchOptions, request_body
from sglang_eagle3_ext.measure.chat_client import Endpoint, stream_generate
from sglang_eagle3_ext.measure.open_loop import StreamRecord

N = 40


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_one_stream_counts_as_bench_serving_counts_it(version):
    theirs_fn = generate_client(version)
    with StandIn(ttft_s=0.02, interval_s=0.008, tokens_per_chunk=3, spec="sglext") as s:
        theirs = theirs_fn(s.url, "hello", N)
        their_body = s.requests[-1]
        body = request_body(BenchOptions(url=s.url, max_tokens=N, ignore_eos=True, api="generate"), "hello", "m")
        rec = stream_generate(Endpoint(s.url, 30), body, StreamRecord(prompt_index=0, cap=N + 1))
        our_body = s.requests[-1]
    assert theirs.success and rec.error is None, (theirs.error, rec.error)
    for k in ("text", "stream"):
        assert our_body[k] == their_body[k]
    for k in ("max_new_tokens", "temperature", "ignore_eos"):
        assert our_body["sampling_params"][k] == their_body["sampling_params"][k]
    assert rec.completion_tokens == theirs.output_len == N and rec.finish_reason == "length"
    pairs = serving_stats.chunk_itls(rec.times, rec.cum)
    ours = [itl for itl, n in pairs for _ in range(n)]
    assert len(ours) == len(theirs.itl) == N - 1  # one value per token after the first, both
    assert statistics.median(ours) == pytest.approx(statistics.median(theirs.itl), rel=0.25)
    assert statistics.median(ours) == pytest.approx(0.008 / 3, rel=0.25)
    assert rec.spec_accept_length == pytest.approx(theirs.spec_accept_length)
    assert rec.spec_verify_ct == s.verify_calls(N)


def test_cli_open_and_closed_loop_over_generate(tmp_path, capsys):
    ol, cl = tmp_path / "ol.json", tmp_path / "cl.json"
    with StandIn(ttft_s=0.005, interval_s=0.004, tokens_per_chunk=2, spec="sglext") as s:
        rc = cli.main(["bench", "--url", s.url, "--api", "generate", "--request-rate", "40", "--num-requests",
                       "6", "--max-tokens", "12", "--ignore-eos", "--out", str(ol)])
        assert rc == 0, capsys.readouterr().err
        rc = cli.main(["bench", "--url", s.url, "--api", "generate", "--runs", "1", "--max-tokens", "12",
                       "--out", str(cl)])
        assert rc == 0, capsys.readouterr().err
        bodies = list(s.requests)
    assert bodies and all("text" in b and "messages" not in b for b in bodies)
    doc = json.loads(ol.read_text())
    summ = doc["rates"][0]["summary"]
    assert doc["params"]["api"] == "generate" and summ["completed"] == 6 and summ["failed"] == 0
    assert summ["total_output_tokens"] == 6 * 12 and summ["accept_source"] == "meta_info"
    assert summ["accept_length"] == pytest.approx(12 / s.verify_calls(12))
    assert summ["itl_ms"]["p50"] == pytest.approx(2.0, rel=0.5)  # 2 tokens per 4 ms chunk
    res = json.loads(cl.read_text())
    assert res["params"]["api"] == "generate" and res["summary"]["accept_source"] == "meta_info"
    assert "per request, meta_info.spec_verify_ct" in capsys.readouterr().out


def test_a_conversation_has_no_single_text(tmp_path, capsys):
    f = tmp_path / "conv.jsonl"
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                          {"role": "user", "content": "c"}]}) + "\n")
    for extra in (["--runs", "1"], ["--request-rate", "4"]):
        rc = cli.main(["bench", "--url", "http://127.0.0.1:9", "--api", "generate", "--prompts", str(f), *extra])
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert rc == 2 and len(lines) == 1 and "prompt 1 is a conversation of 3 messages" in lines[0]


def test_a_server_without_generate_fails_the_request_in_one_line(capsys):
    """A chat-only server (any OpenAI-compatible one): HTTP 404 on /generate, said once, exit 1."""
    with StandIn() as s:
        s._httpd.RequestHandlerClass.do_POST_orig = s._httpd.RequestHandlerClass.do_POST

        def chat_only(self):  # noqa: ANN001
            if self.path == "/generate":
                self._send(404, json.dumps({"detail": "Not Found"}))
                return
            self.do_POST_orig()

        s._httpd.RequestHandlerClass.do_POST = chat_only
        rc = cli.main(["bench", "--url", s.url, "--api", "generate", "--runs", "1", "--max-tokens", "4"])
    out = capsys.readouterr().out
    assert rc == 1 and "HTTP 404" in out


def test_a_chunk_that_adds_no_token_is_skipped_as_bench_serving_skips_it():
    """bench_serving's /generate client ``continue``s past a text chunk whose completion_tokens did
    not move (its gap goes to the next chunk); ours records no chunk there either. The finish
    reason is SGLang's object ({"type": ...}) or a plain string."""
    from sglang_eagle3_ext.measure.chat_client import _take_generate

    rec = StreamRecord(prompt_index=0, cap=16)
    for t, text, n, fr in [(0.01, "a", 1, None), (0.02, "ab", 3, None), (0.03, "ab", 3, None),
                           (0.04, "abc", 4, {"type": "length", "length": 4})]:
        assert _take_generate({"text": text, "meta_info": {"completion_tokens": n, "finish_reason": fr}}, rec, t)
    assert list(rec.times) == [0.01, 0.02, 0.04] and list(rec.cum) == [1, 3, 4]
    assert rec.finish_reason == "length" and rec.completion_tokens == 4
    rec2 = StreamRecord(prompt_index=0, cap=4)
    _take_generate({"text": "x", "meta_info": {"completion_tokens": 1, "finish_reason": "stop"}}, rec2, 0.01)
    assert rec2.finish_reason == "stop"


@pytest.mark.parametrize("chunk,says", [
    ([1, 2], "not a JSON object"), ({"text": "a", "meta_info": []}, "meta_info is a list, not an object"),
    ({"text": "a", "meta_info": {"completion_tokens": "5"}}, "meta_info.completion_tokens is '5', not a count"),
    ({"text": 3, "meta_info": {"completion_tokens": 1}}, "text is a number, not text"),
    ({"text": "a", "meta_info": {"finish_reason": {"type": 7}}}, "finish_reason.type is a number"),
])
def test_a_chunk_of_the_wrong_shape_is_named(chunk, says):
    from sglang_eagle3_ext.measure.chat_client import _take_generate
    from sglang_eagle3_ext.measure.httpio import BadStream

    with pytest.raises(BadStream, match=says):
        _take_generate(chunk, StreamRecord(prompt_index=0, cap=4), 0.01)
