"""bench against hostile servers (issue 23, cases 6-9 and 20): real HTTP on loopback, each server
scripted byte by byte (tests/hostile_http.py). Every case ends in a failed request with its reason
or one clear line, never a worker traceback or "a bug in sgl-eagle3", and within its --timeout.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from hostile_http import SSE_HEAD, Hostile, chat_script, good_chunks, json_answer, sse
from standin_openai import StandIn

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.measure import bench

BUG = "a bug in sgl-eagle3"


def _opts(url: str, **kw) -> bench.BenchOptions:
    kw.setdefault("runs", 1)
    kw.setdefault("warmup", 0)
    kw.setdefault("max_tokens", 5)
    return bench.BenchOptions(url=url, **kw)


def _one_error(stream: bytes, **kw) -> str:
    with Hostile(chat_script(stream)) as h:
        res = bench.run_bench(_opts(h.url, **kw))
    assert res["summary"]["failed_requests"] >= 1 and res["summary"]["ok_runs"] == 0
    return res["errors"][0]


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    c = capsys.readouterr()
    assert BUG not in c.err + c.out and "Traceback" not in c.err
    return rc, c.out, c.err


def test_well_formed_script_passes():
    """The scripted stream itself is fine: the failures below come from the one thing changed."""
    with Hostile(chat_script(sse(good_chunks(5)))) as h:
        res = bench.run_bench(_opts(h.url))
    assert res["summary"]["failed_requests"] == 0 and res["summary"]["ok_runs"] == 1
    assert res["model"] == "hostile-model" and res["summary"]["completion_tokens"] == 5


def test_case6_json_of_the_wrong_shape_fails_the_request_in_every_thread(capsys):
    hook_calls: list[object] = []
    old = threading.excepthook
    threading.excepthook = hook_calls.append
    try:
        with Hostile(chat_script(sse([b"[1]"]))) as h:
            res = bench.run_bench(_opts(h.url, concurrency=2))
            rc, _, err = _cli(capsys, "bench", "--url", h.url, "--runs", "1", "--warmup", "0",
                              "--max-tokens", "5", "--concurrency", "2")
    finally:
        threading.excepthook = old
    assert not hook_calls  # no worker thread died
    assert res["summary"]["failed_requests"] == 2
    assert "a stream chunk is a list" in res["errors"][0]
    assert rc == 1


@pytest.mark.parametrize("chunk,words", [
    (7, "a stream chunk is a number"),
    ("x", "a stream chunk is text"),
    ({"choices": 5}, "choices is a number"),
    ({"choices": ["x"]}, "choices is a list"),
    ({"choices": [{"delta": "hi"}]}, "choices[0].delta is text"),
    ({"choices": [{"delta": {"content": 5}}]}, "choices[0].delta.content is a number"),
    ({"choices": [{"delta": {}, "finish_reason": 1}]}, "choices[0].finish_reason is a number"),
    ({"choices": [], "usage": "x"}, "usage is text"),
    ({"choices": [], "usage": [1]}, "usage is a list"),
    ({"choices": [], "usage": {"completion_tokens": "12"}}, "usage.completion_tokens is '12'"),
    ({"choices": [], "usage": {"completion_tokens": -3}}, "usage.completion_tokens is -3"),
    ({"choices": [], "usage": {"completion_tokens": 2.5}}, "usage.completion_tokens is 2.5"),
    ({"choices": [], "usage": {"completion_tokens": 10**30}}, "not a count"),
    ({"choices": [], "usage": {"prompt_tokens": True}}, "usage.prompt_tokens is True"),
    ({"choices": [], "sglext": 3}, "sglext is a number"),
    ({"choices": [], "sglext": {"spec_tokens_details": "x"}}, "spec_tokens_details is text"),
    ({"choices": [], "sglext": {"spec_tokens_details": {"spec_verify_ct": "2"}}}, "spec_verify_ct is '2'"),
])
def test_case7_wrong_types_in_chunks_and_usage_fail_the_request(chunk, words):
    stream = sse(good_chunks(5)[:3] + [chunk] + good_chunks(5)[3:])
    assert words in _one_error(stream)


def test_case7_a_cumulative_token_count_that_goes_back_fails_the_request():
    """usage.completion_tokens is the count so far: 2 then 1 is a broken server, not a chunk of
    one token (the ITL split would otherwise count it as one, silently). /generate's meta_info the
    same."""
    from sglang_eagle3_ext.measure.chat_client import _take_generate
    from sglang_eagle3_ext.measure.httpio import BadStream
    from sglang_eagle3_ext.measure.open_loop import StreamRecord

    stream = sse(good_chunks(5)[:3] + [{"choices": [], "usage": {"completion_tokens": 1}}] + good_chunks(5)[3:])
    assert "went back from 2 to 1" in _one_error(stream)
    rec = StreamRecord(prompt_index=0, cap=8)
    _take_generate({"text": "ab", "meta_info": {"completion_tokens": 4}}, rec, 0.01)
    with pytest.raises(BadStream, match="went back from 4 to 3"):
        _take_generate({"text": "abc", "meta_info": {"completion_tokens": 3}}, rec, 0.02)


def test_case7_models_answering_a_list_or_ending_early(capsys):
    short = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"data\": ["
    for models in (json_answer([1, 2]), json_answer({"data": "x"}), json_answer({"data": [{"id": 5}]}), short):
        with Hostile(chat_script(sse(good_chunks(5)), models)) as h:
            res = bench.run_bench(_opts(h.url))
            assert res["model"] == "default" and res["summary"]["ok_runs"] == 1
            rc, _, _ = _cli(capsys, "bench", "--url", h.url, "--runs", "1", "--warmup", "0",
                            "--max-tokens", "5", "--json")
            assert rc == 0


@pytest.mark.parametrize("args,words", [
    (["--timeout", "inf"], "--timeout inf"),
    (["--timeout", "nan"], "--timeout nan"),
    (["--timeout", "1e300"], "at most"),
])
def test_case7_timeout_inf_is_one_line(capsys, args, words):
    rc, _, err = _cli(capsys, "bench", "--url", "http://127.0.0.1:9", *args)
    assert rc == 2 and words in err


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://127.0.0.1:abc", "http://[::1",
                                 "http://[zz]:80", "http://127.0.0.1:0", "http://127.0.0.1:8000/a b",
                                 "http://127.0.0.1:8000/\x1b[31m"])
def test_case7_bad_port_or_bracket_is_one_line(capsys, url):
    rc, _, err = _cli(capsys, "bench", "--url", url, "--runs", "1", "--warmup", "0")
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: --url")


def _trickle(method, path, write, stop):
    if method == "GET":
        write(json_answer({"data": [{"id": "m"}]}))
        return
    write(SSE_HEAD + b"data: ")
    for _ in range(200):  # 20 s at most: far past the 1 s --timeout
        if stop.wait(0.1):
            return
        write(b"x")


def test_case8_trickling_server_is_cut_at_the_total_timeout():
    with Hostile(_trickle) as h:
        t0 = time.monotonic()
        res = bench.run_bench(_opts(h.url, timeout_s=1.0))
        took = time.monotonic() - t0
    assert took < 15.0, took  # far under the server's 20 s: the 1 s timeout cut it, however busy the box
    assert "after 1 s (--timeout)" in res["errors"][0]


def test_case8_trickling_headers_are_cut_too():
    def script(method, path, write, stop):
        if method == "GET":
            write(json_answer({"data": [{"id": "m"}]}))
            return
        for _ in range(200):
            if stop.wait(0.1):
                return
            write(b"H")

    with Hostile(script) as h:
        t0 = time.monotonic()
        res = bench.run_bench(_opts(h.url, timeout_s=1.0))
        assert time.monotonic() - t0 < 15.0  # far under the server's 20 s of trickled headers
    assert "--timeout" in res["errors"][0]


def test_case8_a_line_over_the_cap_fails_without_reading_it_whole():
    def script(method, path, write, stop):
        if method == "GET":
            write(json_answer({"data": [{"id": "m"}]}))
            return
        write(SSE_HEAD + b"data: ")
        block = b"y" * (1 << 16)
        for _ in range(3200):  # 200 MiB if nobody stops reading
            if stop.is_set():
                return
            write(block)

    with Hostile(script) as h:
        t0 = time.monotonic()
        err = bench.run_bench(_opts(h.url, timeout_s=30.0))["errors"][0]
        assert time.monotonic() - t0 < 10.0
    assert "longer than 1024 KiB" in err


def test_case8_model_probe_waits_no_longer_than_the_timeout():
    def script(method, path, write, stop):
        if method == "GET":
            stop.wait(20)  # /v1/models never answers
            return
        write(sse(good_chunks(5)))

    with Hostile(script) as h:
        t0 = time.monotonic()
        with pytest.raises(bench.UserError, match="cannot reach"):
            bench.run_bench(_opts(h.url, timeout_s=1.0))
        assert time.monotonic() - t0 < 15.0  # far under the 20 s the server keeps /v1/models waiting


def test_case9_verify_count_above_the_tokens_fails_the_request():
    chunks = good_chunks(5) + [{"choices": [], "sglext": {"spec_tokens_details": {
        "spec_verify_ct": 250, "spec_accept_length": 0.02}}}]
    err = _one_error(sse(chunks))
    assert "cannot be true" in err and "spec_verify_ct 250 > completion tokens 5" in err


def test_case9_tokens_above_max_tokens_fail_the_request(capsys):
    with Hostile(chat_script(sse(good_chunks(40)))) as h:
        res = bench.run_bench(_opts(h.url, max_tokens=5))
        rc, out, _ = _cli(capsys, "bench", "--url", h.url, "--runs", "1", "--warmup", "0", "--max-tokens", "5")
    assert "usage.completion_tokens 40 > max_tokens 5" in res["errors"][0]
    assert res["summary"]["decode_tok_s"]["avg"] is None
    assert rc == 1 and "cannot be true" in out


def test_case9_metrics_counters_below_one_token_per_verify_are_left_out(capsys):
    with StandIn(ttft_s=0.005, interval_s=0.001, spec="metrics") as s:
        real = s.metrics_text

        def skewed() -> str:  # verify calls grow 100x faster than the tokens
            return real().replace("spec_verify_calls_total{", "spec_verify_calls_total_x{") + (
                f'sglang:spec_verify_calls_total{{model_name="m"}} {float(len(s.requests) * 1000)}\n')

        s.metrics_text = skewed
        res = bench.run_bench(_opts(s.url, max_tokens=11))
    assert res["summary"]["accept_length"] is None
    assert "cannot be true" in res["warnings"][0]
    assert res["runs"][0]["warning"]


def test_case20_server_without_usage_says_why(capsys):
    with Hostile(chat_script(sse(good_chunks(5, usage=False)))) as h:
        rc, out, _ = _cli(capsys, "bench", "--url", h.url, "--runs", "1", "--warmup", "0", "--max-tokens", "5")
    assert rc == 1 and "no usage.completion_tokens" in out


def test_case20_markup_and_escape_codes_from_the_server_print_verbatim(capsys):
    def script(method, path, write, stop):
        if method == "GET":
            write(json_answer({"data": [{"id": "[/]\x1b[2J[red]m"}]}))
        else:
            body = b"[/bold] \x1b[31mboom"
            write(b"HTTP/1.0 500 X\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    with Hostile(script) as h:
        rc, out, _ = _cli(capsys, "bench", "--url", h.url, "--runs", "1", "--warmup", "0")
    assert rc == 1, out
    assert "\x1b" not in out and "[/]\\x1b[2J[red]m" in out and "[/bold] \\x1b[31mboom" in out


def test_error_chunk_is_the_reason():
    err = _one_error(sse([{"error": {"message": "model overloaded"}}]))
    assert "model overloaded" in err


def test_bench_document_round_trips_warnings(tmp_path, capsys):
    with Hostile(chat_script(sse(good_chunks(1)))) as h:  # one token: no decode rate
        rc, _, err = _cli(capsys, "bench", "--url", h.url, "--runs", "1", "--warmup", "0",
                          "--max-tokens", "1", "--out", str(tmp_path / "b.json"))
    doc = json.loads((tmp_path / "b.json").read_text())
    assert rc == 1 and "no decode tok/s" in doc["warnings"][0] and "warning: run 0" in err


def test_http_error_with_a_long_body_keeps_its_status():
    with Hostile(chat_script(json_answer({"detail": "overloaded " * 5000}, 503))) as h:
        res = bench.run_bench(_opts(h.url))
    assert res["errors"][0].startswith("HTTP 503: ") and len(res["errors"][0]) < 600


def test_case8_deadline_holds_after_an_http10_response_drops_its_socket():
    """http.client forgets conn.sock once an HTTP/1.0 answer says it will close; the deadline must
    still lower each read's wait: one byte at 1.9 s, then silence, against --timeout 2 ends near
    2 s; a read left on the first read's 2 s wait would end near 3.9 s (the 1 s between the two is
    slack for a busy machine, not a speed claim)."""
    def script(method, path, write, stop):
        if method == "GET":
            write(json_answer({"data": [{"id": "m"}]}))
            return
        write(SSE_HEAD)
        if stop.wait(1.9):
            return
        write(b"x")
        stop.wait(20)

    with Hostile(script) as h:
        t0 = time.monotonic()
        res = bench.run_bench(_opts(h.url, timeout_s=2.0))
        took = time.monotonic() - t0
    assert "--timeout" in res["errors"][0] and took < 3.0, took
