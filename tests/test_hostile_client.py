"""The measurement client under a hostile run: a later step that fails, a signal, a thread limit.

Every case keeps what finished (printed and written, ``stopped`` says why), ends in one line and
a non-zero exit, and never prints "a bug". Real HTTP on loopback (tests/standin_openai.py,
tests/hostile_http.py), real signals to the real CLI in a child. The thread limit is the one fake:
a child whose ``threading.Thread.start`` raises RuntimeError ("can't start new thread", what a
container's pids limit gives) while LIMIT threads are alive, since RLIMIT_NPROC is per user and
would hit everything else the user runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import sigint_default
from hostile_http import MODELS as HOSTILE_MODELS
from hostile_http import Hostile, good_chunks, json_answer, sse
from standin_openai import StandIn

from sglang_eagle3_ext import cli

ROOT = Path(__file__).resolve().parents[1]
BUG = "a bug in sgl-eagle3"


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    c = capsys.readouterr()
    assert BUG not in c.err + c.out and "Traceback" not in c.err, c.err
    return rc, c.out, c.err


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                COLUMNS="200")


# ---------------------------------------------------------------- a later step fails


def test_a_later_rates_warm_up_failure_keeps_the_finished_rate(tmp_path, capsys):
    """Rate 20's warm-up (the 5th chat request) meets a dead server: rate 10 was printed and
    written, stopped says why, exit 1 (was: nothing printed or written)."""
    out = tmp_path / "ol.json"
    with StandIn(ttft_s=0.002, interval_s=0.001, die_after=5) as s:
        rc, stdout, err = _cli(capsys, "bench", "--url", s.url, "--request-rate", "10,20", "--num-requests",
                               "3", "--max-tokens", "4", "--out", str(out))
    doc = json.loads(out.read_text())
    assert rc == 1 and [e["request_rate"] for e in doc["rates"]] == [10.0]
    assert doc["rates"][0]["summary"]["completed"] == 3
    assert doc["stopped"]["at_rate"] == 20.0 and "warm-up before rate 20/s failed" in doc["stopped"]["reason"]
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("warning: ")]  # a busy box: late sends
    assert len(lines) == 1 and lines[0].startswith("bench stopped: warm-up before rate 20/s failed")
    assert "kept rate 10/s" in lines[0] and str(out) in lines[0]
    assert "3/3" in stdout  # the finished rate's row


def _flush_then_busy() -> tuple[object, list[str]]:
    """/flush_cache answers 200 once, then 400 as SGLang does while requests run."""
    flushes: list[str] = []
    stream = sse(good_chunks(3))

    def script(method, path, write, stop):
        if method == "GET" and path == "/v1/models":
            write(json_answer(HOSTILE_MODELS))
        elif path == "/flush_cache":
            flushes.append(path)
            write(json_answer({}, 200) if len(flushes) == 1 else
                  b"HTTP/1.0 400 X\r\nContent-Length: 43\r\n\r\nFlush cache failed: requests are running.\n")
        elif method == "POST":
            write(stream)
        else:
            write(json_answer({"detail": "Not Found"}, 404))

    return script, flushes


@pytest.mark.parametrize("as_json", [False, True])
def test_a_refused_flush_at_a_later_rate_keeps_the_finished_rate(tmp_path, capsys, as_json):
    script, flushes = _flush_then_busy()
    out = tmp_path / "ol.json"
    with Hostile(script) as h:
        rc, stdout, err = _cli(capsys, "bench", "--url", h.url, "--request-rate", "inf,50", "--num-requests",
                               "2", "--max-tokens", "3", "--flush-cache", "--out", str(out),
                               *(["--json"] if as_json else []))
    doc = json.loads(out.read_text())
    assert rc == 1 and len(flushes) == 2 and [e["request_rate"] for e in doc["rates"]] == ["inf"]
    assert "/flush_cache answered 400" in doc["stopped"]["reason"]
    assert "answered 400" in err and "kept rate inf/s" in err
    if as_json:
        assert json.loads(stdout)["stopped"] == doc["stopped"]


def test_the_first_rate_failing_is_still_one_line(capsys):
    with StandIn(die_after=1) as s:
        rc, out, err = _cli(capsys, "bench", "--url", s.url, "--request-rate", "10,20", "--num-requests", "2",
                            "--max-tokens", "4")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 1 and len(lines) == 1 and "warm-up before rate 10/s failed" in lines[0] and not out


def test_a_ladder_level_that_cannot_reach_the_server_keeps_the_levels_before(tmp_path, capsys):
    out = tmp_path / "ladder.json"
    with StandIn(ttft_s=0.002, interval_s=0.001, die_after=3) as s:  # level 1: 2 requests; level 2 dies
        rc, stdout, err = _cli(capsys, "bench", "--url", s.url, "--concurrency", "1,2,4", "--runs", "1",
                               "--warmup", "1", "--max-tokens", "4", "--out", str(out))
    doc = json.loads(out.read_text())
    assert rc == 1 and [lv["concurrency"] for lv in doc["levels"]] == [1, 2]
    assert doc["levels"][1]["summary"]["failed_requests"] >= 1   # the level the server died in
    assert doc["stopped"]["at_level"] == 4 and "cannot reach" in doc["stopped"]["reason"]
    assert "kept concurrency 1, 2" in err
    rc, text, _ = _cli(capsys, "compare", str(out))  # the kept ladder reads back
    assert rc == 0 and "concurrency" in text


# ---------------------------------------------------------------- signals


def _signal_mid_run(argv: list[str], sig: int, after: int, s: StandIn) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-m", "sglang_eagle3_ext", *argv], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    deadline = time.monotonic() + 60
    while len(s.requests) < after and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert len(s.requests) >= after, "the bench never reached that point"
    time.sleep(0.1)
    proc.send_signal(sig)
    try:
        stdout, stderr = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("bench still running 10 s after the signal")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_in_a_ladder_keeps_the_finished_levels(tmp_path, sig):
    """Level 1 (one 20-token request) finished, level 2 streaming: the signal keeps level 1."""
    out = tmp_path / "ladder.json"
    with StandIn(ttft_s=0.01, interval_s=0.05) as s:
        r = _signal_mid_run(["bench", "--url", s.url, "--concurrency", "1,2", "--runs", "1", "--warmup", "0",
                             "--max-tokens", "20", "--out", str(out)], sig, 3, s)
    doc = json.loads(out.read_text())
    name = "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name
    assert r.returncode == 128 + sig, r.stderr
    assert [lv["concurrency"] for lv in doc["levels"]] == [1] and doc["levels"][0]["summary"]["ok_runs"] == 1
    assert doc["stopped"]["signal"] == signal.Signals(sig).name
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == [f"bench stopped: interrupted ({name}) during concurrency 2; kept concurrency 1; "
                     f"written to {out}"], r.stderr
    assert "ladder:" in r.stdout


def test_sigterm_in_a_multi_rate_open_loop_keeps_the_finished_rate(tmp_path):
    out = tmp_path / "ol.json"
    with StandIn(ttft_s=0.01, interval_s=0.05) as s:
        r = _signal_mid_run(["bench", "--url", s.url, "--request-rate", "inf,2", "--num-requests", "3",
                             "--warmup", "0", "--max-tokens", "10", "--out", str(out)], signal.SIGTERM, 4, s)
    doc = json.loads(out.read_text())
    assert r.returncode == 143 and [e["request_rate"] for e in doc["rates"]] == ["inf"], r.stderr
    assert doc["rates"][0]["summary"]["completed"] == 3 and doc["stopped"]["at_rate"] == 2.0
    assert "interrupted (SIGTERM) during rate 2/s; kept rate inf/s" in r.stderr and BUG not in r.stderr


def test_sigterm_with_nothing_finished_says_nothing_written():
    with StandIn(mode="hang") as s:
        r = _signal_mid_run(["bench", "--url", s.url, "--request-rate", "5", "--num-requests", "5",
                             "--warmup", "0"], signal.SIGTERM, 1, s)
    assert r.returncode == 143
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [
        "bench interrupted (SIGTERM): open streams closed, nothing written"]


def test_sighup_after_measured_runs_keeps_them(tmp_path):
    out = tmp_path / "b.json"
    with StandIn(ttft_s=0.01, interval_s=0.05) as s:
        r = _signal_mid_run(["bench", "--url", s.url, "--runs", "5", "--warmup", "0", "--max-tokens", "20",
                             "--out", str(out)], signal.SIGHUP, 3, s)
    doc = json.loads(out.read_text())
    assert r.returncode == 129 and len(doc["runs"]) == 2 and doc["summary"]["ok_runs"] == 2, r.stderr
    assert "interrupted (SIGHUP) during run 3 of 5; kept 2 of 5 runs" in r.stderr


# ---------------------------------------------------------------- a thread limit

_LIMITED = """
import sys, threading
LIMIT = int(sys.argv[1])
real = threading.Thread.start
def start(self):
    if threading.active_count() >= LIMIT:
        raise RuntimeError("can't start new thread")
    real(self)
threading.Thread.start = start
from sglang_eagle3_ext.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _limited(limit: int, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _LIMITED, str(limit), *argv], env=_env(),
                          capture_output=True, text=True, timeout=120)


def test_open_loop_at_a_thread_limit_waits_for_a_thread_and_finishes(tmp_path):
    """Rate inf, 30 requests, at most 6 threads alive (main, the deadline watchdog, 4 streams):
    every request is sent when one before it ends; was: "unexpected RuntimeError: can't start
    new thread", everything lost."""
    out = tmp_path / "ol.json"
    with StandIn(ttft_s=0.005, interval_s=0.002) as s:
        r = _limited(6, "bench", "--url", s.url, "--request-rate", "inf", "--num-requests", "30",
                     "--max-tokens", "5", "--out", str(out))
        peak = s.peak
    doc = json.loads(out.read_text())
    summary = doc["rates"][0]["summary"]
    assert r.returncode == 0 and summary["completed"] == 30, r.stderr
    assert peak <= 5 and BUG not in r.stderr + r.stdout
    assert any("waited for the client to start them" in w for w in doc["rates"][0]["warnings"])


def test_closed_loop_at_a_thread_limit_fails_the_requests_it_cannot_start(tmp_path):
    """Ladder 1,8 with 6 threads: level 8 cannot start all its streams: those requests fail with
    the reason, its run does not count, level 1 stands; exit 1, no traceback."""
    out = tmp_path / "ladder.json"
    with StandIn(ttft_s=0.005, interval_s=0.002) as s:
        r = _limited(6, "bench", "--url", s.url, "--concurrency", "1,8", "--runs", "1", "--warmup", "0",
                     "--max-tokens", "5", "--out", str(out))
    doc = json.loads(out.read_text())
    lv1, lv8 = doc["levels"]
    assert r.returncode == 1 and lv1["summary"]["ok_runs"] == 1 and lv8["summary"]["ok_runs"] == 0, r.stderr
    assert any("could not start a thread" in e for e in lv8["bench"]["errors"])
    assert BUG not in r.stderr + r.stdout and "Traceback" not in r.stderr


def test_no_thread_at_all_fails_the_requests_with_the_reason(tmp_path):
    """Not one thread can start (not the deadline watchdog, not the progress bar, not a stream):
    the warm-up runs in the main thread, every scheduled request fails with the reason, the
    result is written; exit 1, no "a bug" (was: unexpected RuntimeError, nothing kept)."""
    out = tmp_path / "ol.json"
    with StandIn() as s:
        r = _limited(1, "bench", "--url", s.url, "--request-rate", "10", "--num-requests", "3",
                     "--max-tokens", "4", "--out", str(out))
    doc = json.loads(out.read_text())
    assert r.returncode == 1 and doc["rates"][0]["summary"]["failed"] == 3, r.stderr
    assert "could not start a thread" in r.stdout + r.stderr and BUG not in r.stdout + r.stderr


# ---------------------------------------------------------------- --out and --plot up front


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_out_is_refused_before_anything_is_sent(capsys, value):
    with StandIn() as s:
        rc, _, err = _cli(capsys, "bench", "--url", s.url, "--out", value, "--runs", "1")
        sent = len(s.requests)
    assert rc == 2 and sent == 0 and "--out: an empty path" in err


@pytest.mark.parametrize("plot, why", [
    ("x.txt", "not .txt"), ("x.pdf", "not .pdf"), ("", "an empty path"), ("/dev/null", "")])
def test_a_bad_plot_is_refused_before_the_run(tmp_path, capsys, plot, why):
    with StandIn() as s:
        rc, _, err = _cli(capsys, "bench", "--url", s.url, "--concurrency", "1,2", "--runs", "1",
                          "--max-tokens", "3", "--plot", plot)
        sent = len(s.requests)
    assert rc == 2 and sent == 0 and why in err and err.startswith("error: --plot"), err


def test_plot_on_one_level_and_a_folder_plot_are_refused(tmp_path, capsys):
    rc, _, err = _cli(capsys, "bench", "--url", "http://127.0.0.1:9", "--plot", str(tmp_path / "a.png"))
    assert rc == 2 and "one concurrency level has nothing to plot" in err
    (tmp_path / "d").mkdir()
    rc, _, err = _cli(capsys, "bench", "--url", "http://127.0.0.1:9", "--request-rate", "5",
                      "--plot", str(tmp_path / "d") + "/")
    assert rc == 2 and "a folder" in err


def test_a_plot_name_without_extension_reports_the_file_written(tmp_path, capsys):
    name = tmp_path / "latency"
    with StandIn(ttft_s=0.002, interval_s=0.001) as s:
        rc, out, err = _cli(capsys, "bench", "--url", s.url, "--request-rate", "inf", "--num-requests", "2",
                            "--max-tokens", "3", "--plot", str(name))
    assert rc == 0, err
    assert (tmp_path / "latency.png").is_file() and f"wrote {name}.png" in out.replace("\n", "")


def test_signal_handlers_are_restored_after_a_bench(capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    with StandIn(ttft_s=0.002, interval_s=0.001) as s:
        _cli(capsys, "bench", "--url", s.url, "--runs", "1", "--max-tokens", "3")
    assert {s: signal.getsignal(s) for s in before} == before
    assert threading.current_thread() is threading.main_thread()


# ---------------------------------------------------------------- messages


def test_generate_api_errors_speak_the_generate_apis_words(capsys):
    """--api generate: counters that cannot be true are named as /generate names them (was:
    usage.completion_tokens > max_tokens, words of the chat API)."""
    def chunk(n: int, fr=None) -> dict:
        return {"text": " t" * n, "meta_info": {"completion_tokens": n, "prompt_tokens": 3, "finish_reason": fr}}

    stream = sse([chunk(1), chunk(2), chunk(40, {"type": "length", "length": 40})])

    def script(method, path, write, stop):
        write(json_answer(HOSTILE_MODELS) if method == "GET" else stream)

    with Hostile(script) as h:
        rc, out, err = _cli(capsys, "bench", "--url", h.url, "--api", "generate", "--runs", "1", "--warmup", "0",
                            "--max-tokens", "5")
    text = " ".join((out + err).split())
    assert rc == 1 and "meta_info.completion_tokens 40 > sampling_params.max_new_tokens 5" in text, text
    assert "usage." not in text and "max_tokens 5" not in text


class _Reads:
    """A response that hands out the given reads (the boundaries a socket may give)."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = list(reads)

    def read1(self, n: int) -> bytes:
        return self.reads.pop(0) if self.reads else b""


@pytest.mark.parametrize("reads", [
    [b"data: " + b"x" * 1100 + b"\n"],                       # the whole line in one read (was: accepted)
    [b"data: " + b"x" * 1000, b"x" * 100 + b"\n"],           # the newline in the next read (was: accepted)
    [b"data: " + b"x" * 1030, b"\n"],                        # over the cap before the newline (refused)
    [b"data: ok\n" + b"data: " + b"x" * 1100 + b"\ndata: z\n"],
])
def test_the_line_cap_holds_whatever_the_read_boundaries(reads):
    from sglang_eagle3_ext.measure import httpio

    got = []
    with pytest.raises(httpio.BadStream, match="longer than 1 KiB"):
        got.extend(httpio.lines(None, _Reads(reads), httpio.Deadline(30), cap=1024))
    assert all(len(x) <= 1025 for x in got)


def test_lines_up_to_the_cap_pass_in_any_split():
    from sglang_eagle3_ext.measure import httpio

    line = b"y" * 1024 + b"\n"
    for k in (1, 500, 1024, 1025):
        assert list(httpio.lines(None, _Reads([line[:k], line[k:] + b"z"]), httpio.Deadline(30), cap=1024)) == [
            line, b"z"]


_PAGE = (b"<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head><body>"
         + b"<p>If you see this page, the nginx web server is working.</p>" * 60 + b"</body></html>\n")


@pytest.mark.parametrize("status", [200, 404])
def test_a_web_server_that_is_no_sglang_gets_one_short_line(capsys, status):
    """An HTML page where an API answer belongs (issue: the whole page in the table)."""
    head = f"HTTP/1.0 {status} X\r\nContent-Type: text/html\r\nContent-Length: {len(_PAGE)}\r\n\r\n".encode()

    def script(method, path, write, stop):
        write(head + _PAGE)

    with Hostile(script) as h:
        rc, out, err = _cli(capsys, "bench", "--url", h.url, "--runs", "1", "--warmup", "0", "--max-tokens", "3")
    text = " ".join((out + err).split())
    assert rc == 1 and f"HTTP {status}: an HTML page ('Welcome to nginx!'), not an OpenAI-compatible" in text
    assert "nginx web server is working" not in text and "<p>" not in text


def test_the_clients_in_flight_bound_holds_and_is_said(monkeypatch, tmp_path, capsys):
    """--request-rate inf without --max-concurrency: at most MAX_IN_FLIGHT streams at once (4096;
    3 here), the rest sent as streams end, named in a warning; the kept document reads back in
    compare."""
    from sglang_eagle3_ext.measure import open_loop

    monkeypatch.setattr(open_loop, "MAX_IN_FLIGHT", 3)
    out = tmp_path / "ol.json"
    with StandIn(ttft_s=0.01, interval_s=0.005) as s:
        rc, _, err = _cli(capsys, "bench", "--url", s.url, "--request-rate", "inf", "--num-requests", "12",
                          "--max-tokens", "4", "--warmup", "0", "--out", str(out))
        peak = s.peak
    doc = json.loads(out.read_text())
    assert rc == 0 and peak <= 3 and doc["rates"][0]["summary"]["completed"] == 12
    assert "waited for the client to start them (at most 3 in flight" in " ".join(err.split())
    assert cli.main(["compare", str(out)]) == 0
    capsys.readouterr()


def test_a_stopped_document_reads_back_in_compare(tmp_path, capsys):
    out = tmp_path / "ol.json"
    with StandIn(ttft_s=0.002, interval_s=0.001, die_after=5) as s:  # rate 20's warm-up: the 5th request
        _cli(capsys, "bench", "--url", s.url, "--request-rate", "inf,20", "--num-requests", "3",
             "--max-tokens", "4", "--out", str(out))
    assert json.loads(out.read_text())["stopped"]
    rc, text, _ = _cli(capsys, "compare", str(out))
    assert rc == 0 and "inf" in text


def test_out_onto_the_prompts_file_or_plot_onto_out_is_refused(tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\n")
    rc, _, err = _cli(capsys, "bench", "--url", "http://127.0.0.1:9", "--prompts", str(prompts), "--out",
                      str(tmp_path / "." / "p.txt"))
    assert rc == 2 and "the --prompts file" in err and prompts.read_text() == "hello\n"
    rc, _, err = _cli(capsys, "bench", "--url", "http://127.0.0.1:9", "--request-rate", "5", "--out",
                      str(tmp_path / "r.png"), "--plot", str(tmp_path / "r.png"))
    assert rc == 2 and "the same file as --out" in err
