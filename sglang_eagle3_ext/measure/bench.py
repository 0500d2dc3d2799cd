"""Streaming OpenAI chat-completions benchmark with exact token counts and per-request accept length.

Stdlib only (http.client): the client must cost far less than one token interval (see
benchmarks/bench_client_overhead.py). What is measured, per request:

- TTFT: request sent -> first chunk that carries generated text (content or reasoning_content).
- decode tok/s: tokens after the first content chunk over the time after it
  ``(N_total - N_first) / (t_last - t_first)``. ``N_first`` is exact when the server reports
  per-chunk usage (``stream_options.continuous_usage_stats``, SGLang 0.5.9+, vLLM); otherwise the
  first chunk is assumed to hold one token (``first_tokens_exact: false`` in the record).
- end-to-end tok/s: ``N_total / (t_last - t_sent)``.
- ``N_total`` = ``usage.completion_tokens`` of the final usage chunk (``include_usage``): server
  tokens, not chunks and not re-tokenized text.

Accept length (tokens per request per verify, incl. bonus), from the most exact source the server
offers, recorded as ``accept_source``:

1. ``sglext``: per request, ``sglext.spec_tokens_details.spec_verify_ct`` in the stream itself
   (request field ``return_spec_tokens_details``; SGLang 0.5.19+,
   ``entrypoints/openai/serving_chat.py``). Older servers ignore the unknown field (pydantic
   default ``extra="ignore"``).
2. ``metrics``: differences of the Prometheus counters ``sglang:spec_verify_calls_total``
   (0.5.13+, ``observability/metrics_collector.py``) and ``sglang:generation_tokens_total``
   scraped around each run (server started with ``--enable-metrics``). Both are incremented once
   per finished request, so the ratio covers exactly this run's requests when nothing else is
   served; the record says ``metrics_clean: false`` when the generation-token delta differs from
   what we received (other traffic).
3. ``none``: not speculative, or no per-request source (SGLang < 0.5.13 without sglext). The
   running average ``/server_info`` ``avg_spec_accept_length`` is never used: it is cumulative.

Both 1 and 2 use SGLang's own definition ``completion_tokens / spec_verify_ct``
(``managers/tokenizer_manager.py``), which counts the prefill token too (0.1% high at 1000 tokens).
"""

from __future__ import annotations

import http.client
import json
import math
import re
import socket
import statistics
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..documents.records import BenchResult, Ladder
from ..runtime.errors import UserError
from ..runtime.safeparse import json_loads
from . import chunks, httpio
from .prompts import Prompt, messages_of

SCHEMA = "eagle3_bench/1"
LADDER_SCHEMA = "eagle3_ladder/1"

# The seeds' measurement prompt (Kimi-K2.5 campaign, 1000 tokens at temperature 0).
DEFAULT_PROMPT = (
    "Write a comprehensive guide to implementing a B-tree data structure in Rust, including "
    "insertion, deletion, and search operations. Be very thorough and detailed."
)

_COUNTER_VERIFY = "sglang:spec_verify_calls_total"
_COUNTER_GEN = "sglang:generation_tokens_total"


@dataclass
class RequestRecord:
    """One streamed request. Times in seconds, relative to the request being sent."""

    prompt_index: int
    ttft_s: float | None = None
    last_token_s: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int | None = None
    first_chunk_tokens: int = 1
    first_tokens_exact: bool = False
    content_chunks: int = 0
    decode_tok_s: float | None = None
    e2e_tok_s: float | None = None
    finish_reason: str | None = None
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    error: str | None = None

    def finalize(self) -> None:
        n, t0, t1 = self.completion_tokens, self.ttft_s, self.last_token_s
        if self.error or not n or t0 is None or t1 is None:
            return
        if t1 > 0:
            self.e2e_tok_s = n / t1
        after = n - self.first_chunk_tokens
        if after > 0 and t1 > t0:
            self.decode_tok_s = after / (t1 - t0)


@dataclass
class RunRecord:
    """One run: ``concurrency`` requests sent together."""

    index: int
    wall_s: float
    requests: list[RequestRecord]
    decode_tok_s: float | None = None       # mean over requests (per-stream speed)
    e2e_tok_s: float | None = None          # mean over requests
    ttft_s: float | None = None             # mean over requests
    throughput_tok_s: float | None = None   # all completion tokens / run wall time
    completion_tokens: int = 0
    accept_length: float | None = None
    accept_source: str = "none"
    verify_ct: int | None = None
    metrics_clean: bool | None = None
    warning: str | None = None              # a figure left out, and why (counters that cannot be true)


@dataclass
class BenchOptions:
    url: str
    runs: int = 5
    warmup: int = 1
    max_tokens: int = 1000
    prompts: list[Prompt] = field(default_factory=lambda: [DEFAULT_PROMPT])
    concurrency: int = 1
    label: str | None = None
    model: str | None = None
    ignore_eos: bool = False
    timeout_s: float = 600.0


# ---------------------------------------------------------------- HTTP


def parse_url(url: str) -> tuple[str, str, int, str]:
    """``http://host:port[/v1]`` -> (scheme, host, port, base path without /v1); UserError(2) for a
    URL http.client would refuse later (bad port, unclosed bracket, spaces or control characters)."""
    bad = UserError(f"--url must look like http://HOST:PORT, got {url!r}", exit_code=2)
    if any(ord(ch) <= 32 or ord(ch) == 127 for ch in url):
        raise bad
    try:
        u = urllib.parse.urlparse(url if "://" in url else f"http://{url}")
        port = u.port
    except ValueError as exc:  # "Port out of range 0-65535", "Invalid IPv6 URL", a port that is no number
        raise UserError(f"--url {url!r}: {exc}", exit_code=2) from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise bad
    if port == 0:
        raise UserError(f"--url {url!r}: port 0 is no server's port", exit_code=2)
    base = u.path.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    return u.scheme, u.hostname, port or (443 if u.scheme == "https" else 80), base


# What a request to a server may raise besides our own BadStream: the socket (OSError, incl.
# timeouts), the HTTP layer, and ValueError (http.client's InvalidURL, UnicodeError of an IDNA host).
_REQUEST_ERRORS = (OSError, http.client.HTTPException, ValueError, httpio.BadStream)


class Endpoint:
    """A server address plus the connections in flight, so Ctrl-C can cut them all at once."""

    def __init__(self, url: str, timeout_s: float = 600.0) -> None:
        self.url = url
        self.scheme, self.host, self.port, self.base = parse_url(url)
        self.timeout_s = timeout_s
        self.aborted = False
        self._inflight: set[socket.socket] = set()
        self._lock = threading.Lock()

    def track(self, sock: socket.socket, on: bool) -> None:
        with self._lock:
            (self._inflight.add if on else self._inflight.discard)(sock)

    def abort(self) -> None:
        """Shut every open stream down: blocked reads return at once and their threads end."""
        with self._lock:
            self.aborted = True
            socks = list(self._inflight)
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def conn(self, timeout_s: float | None = None) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        t = self.timeout_s if timeout_s is None else timeout_s
        return cls(self.host, self.port, timeout=min(t, httpio.MAX_TIMEOUT_S))

    def get(self, path: str, timeout_s: float = 10.0) -> tuple[int, str]:
        """(status, body) of a GET; the whole exchange within ``timeout_s``, the body capped."""
        dl = httpio.Deadline(timeout_s)
        c = self.conn(timeout_s)
        r = None
        try:
            dl.watch(c)
            c.request("GET", self.base + path)
            r = c.getresponse()
            return r.status, httpio.read_body(c, r, dl).decode("utf-8", "replace")
        except _REQUEST_ERRORS:
            if dl.fired:
                raise TimeoutError(f"no answer to GET {path} in {timeout_s:g} s") from None
            raise
        finally:
            dl.cancel()
            if r is not None:
                r.close()
            c.close()


def model_from(body: str) -> str | None:
    """First id of a ``/v1/models`` answer, or None when the answer has none (any shape)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    items = data.get("data") if isinstance(data, dict) else None
    first = items[0] if isinstance(items, list) and items else None
    mid = first.get("id") if isinstance(first, dict) else None
    return mid if isinstance(mid, str) and mid else None


def detect_model(ep: Endpoint, timeout_s: float = 10.0) -> str:
    """First id of ``/v1/models``; SGLang accepts any name, other servers need the real one."""
    try:
        status, body = ep.get("/v1/models", timeout_s)
    except _REQUEST_ERRORS:
        return "default"
    return (model_from(body) if status == 200 else None) or "default"


def stream_chat(ep: Endpoint, body: dict[str, Any], rec: RequestRecord,
                clock: Callable[[], float] = time.perf_counter) -> RequestRecord:
    """Send one streaming chat completion and fill ``rec`` as chunks arrive.

    A stream that ends without a finish_reason and without ``[DONE]`` was cut by the server (or
    by Ctrl-C): the request failed, whatever it had received. ``ep.timeout_s`` is a total
    deadline for the request (httpio.Deadline: every read waits at most the time left, and a
    watchdog cuts a server that trickles bytes); a line over httpio.LINE_CAP, a chunk of the
    wrong shape, no usage, or counters that cannot be true (chunks.impossible_counts) fail it.
    """
    payload = json.dumps(body).encode()
    dl = httpio.Deadline(ep.timeout_s)
    c = ep.conn()
    sock = None
    r = None
    done = False
    usage_seen = False
    t_sent = clock()
    try:
        if ep.aborted:
            raise OSError("interrupted")
        sock = dl.watch(c)
        ep.track(sock, True)
        if ep.aborted:  # Ctrl-C while connecting
            raise OSError("interrupted")
        c.request("POST", ep.base + "/v1/chat/completions", body=payload,
                  headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        r = c.getresponse()
        if r.status != 200:
            dl.arm(c)
            rec.error = f"HTTP {r.status}: {r.read(500).decode('utf-8', 'replace').strip()}"
            return rec
        for line in httpio.lines(c, r, dl):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except (ValueError, RecursionError):
                continue  # a keep-alive or partial line: SSE readers skip what they cannot parse
            usage_seen = _take_chunk(chunk, rec, clock() - t_sent) or usage_seen
            if rec.error:
                break
    except httpio.BadStream as exc:
        rec.error = str(exc)
    except _REQUEST_ERRORS as exc:  # socket.timeout is TimeoutError, an OSError
        if dl.fired or isinstance(exc, TimeoutError):
            rec.error = dl.message()
        elif ep.aborted:
            rec.error = "interrupted (Ctrl-C)"
        else:
            rec.error = f"{type(exc).__name__}: {exc}"
    finally:
        dl.cancel()
        if sock is not None:
            ep.track(sock, False)
        if r is not None:
            r.close()
        c.close()
    if rec.error is None and rec.ttft_s is None:
        rec.error = "stream ended without any generated text"
    elif rec.error is None and not done and rec.finish_reason is None:
        rec.error = "stream closed by the server before the end (no finish_reason, no [DONE])"
    elif rec.error is None and not usage_seen:
        rec.error = ("the server reported no usage.completion_tokens (bench counts the server's tokens "
                     "and asks for them with stream_options.include_usage; this server ignored it)")
    elif rec.error is None:
        rec.error = chunks.impossible_counts(rec.completion_tokens, rec.first_chunk_tokens if
                                             rec.first_tokens_exact else 0, rec.spec_verify_ct,
                                             int(body.get("max_tokens") or chunks.MAX_COUNT))
    rec.finalize()
    return rec


def _take_chunk(chunk: Any, rec: RequestRecord, now: float) -> bool:
    """Fold one chunk into ``rec``; True when it carried usage.completion_tokens. BadStream for a
    chunk of the wrong shape (chunks.py)."""
    chunk = chunks.chunk_object(chunk)
    if "error" in chunk and not chunk.get("choices"):
        err = chunk["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        rec.error = f"the server sent an error: {str(msg)[:300]}"
        return False
    usage = chunks.obj(chunk, "usage", "") or {}
    tokens = chunks.count(usage, "completion_tokens", "usage.")
    prompt = chunks.count(usage, "prompt_tokens", "usage.")
    has_text = False
    for i, ch in enumerate(chunks.choices(chunk)):
        delta = chunks.obj(ch, "delta", f"choices[{i}].") or {}
        if chunks.text(delta, "content", f"choices[{i}].delta.") or chunks.text(
                delta, "reasoning_content", f"choices[{i}].delta."):
            has_text = True
        fr = chunks.text(ch, "finish_reason", f"choices[{i}].")
        if fr:
            rec.finish_reason = fr
    spec = chunks.spec_details(chunk)
    verify = chunks.count(spec, "spec_verify_ct", "sglext.spec_tokens_details.") if spec else None
    accept = chunks.number(spec, "spec_accept_length", "sglext.spec_tokens_details.") if spec else None
    if has_text:
        rec.content_chunks += 1
        rec.last_token_s = now
        if rec.ttft_s is None:
            rec.ttft_s = now
            if tokens is not None:
                rec.first_chunk_tokens = tokens
                rec.first_tokens_exact = True
    if tokens is not None:
        rec.completion_tokens = tokens
    if prompt is not None:
        rec.prompt_tokens = prompt
    if verify:
        rec.spec_verify_ct = verify
        if accept:
            rec.spec_accept_length = accept
    return tokens is not None


# ---------------------------------------------------------------- metrics

_METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_counters(text: str, names: tuple[str, ...] = (_COUNTER_VERIFY, _COUNTER_GEN)
                   ) -> dict[str, float]:
    """Sum every label set of each named counter in a Prometheus text page."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC_LINE.match(line)
        if not m or m.group(1) not in names:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(v):  # NaN / +Inf samples are no counts
            sums[m.group(1)] = sums.get(m.group(1), 0.0) + v
    return sums


def scrape(ep: Endpoint) -> dict[str, float] | None:
    try:
        status, body = ep.get("/metrics", timeout_s=min(5.0, ep.timeout_s))
    except _REQUEST_ERRORS:
        return None
    if status != 200:
        return None
    c = parse_counters(body)
    return c if _COUNTER_VERIFY in c and _COUNTER_GEN in c else None


# ---------------------------------------------------------------- runs


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def request_body(opts: BenchOptions, prompt: Prompt, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": messages_of(prompt),
        "max_tokens": opts.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "return_spec_tokens_details": True,
    }
    if opts.ignore_eos:
        body["ignore_eos"] = True  # SGLang/vLLM sampling extension, accepted in the OpenAI body
    return body


def _stream_all(ep: Endpoint, bodies: list[dict[str, Any]], recs: list[RequestRecord]) -> None:
    """All requests at once, one daemon thread each; Ctrl-C cuts every stream and re-raises.

    Daemon threads (not a ThreadPoolExecutor, whose workers are joined at exit) so a server that
    never answers cannot hold the process after an interrupt.
    """
    if len(recs) == 1:
        _guarded(ep, bodies[0], recs[0])
        return
    threads = [threading.Thread(target=_guarded, args=(ep, b, r), daemon=True)
               for b, r in zip(bodies, recs, strict=True)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.1)
    except KeyboardInterrupt:
        ep.abort()
        raise


def _guarded(ep: Endpoint, body: dict[str, Any], rec: RequestRecord) -> None:
    """stream_chat, whose every failure ends in ``rec.error``: a worker thread never dies with a
    traceback on stderr while its request counts as fine."""
    try:
        stream_chat(ep, body, rec)
    except Exception as exc:  # noqa: BLE001 - last resort: the request fails, the bench goes on
        rec.error = f"unexpected {type(exc).__name__}: {exc} (a bug in sgl-eagle3: please report it)"


def run_once(ep: Endpoint, opts: BenchOptions, model: str, index: int) -> RunRecord:
    """One run of ``concurrency`` requests; accept length from sglext, else counter differences."""
    before = scrape(ep)
    n = opts.concurrency
    recs = [RequestRecord(prompt_index=(index * n + i) % len(opts.prompts)) for i in range(n)]
    t0 = time.perf_counter()
    _stream_all(ep, [request_body(opts, opts.prompts[r.prompt_index], model) for r in recs], recs)
    wall = time.perf_counter() - t0
    run = RunRecord(index=index, wall_s=wall, requests=recs)
    ok = [r for r in recs if r.error is None]
    run.completion_tokens = sum(r.completion_tokens for r in ok)
    run.decode_tok_s = _mean([r.decode_tok_s for r in ok if r.decode_tok_s is not None])
    run.e2e_tok_s = _mean([r.e2e_tok_s for r in ok if r.e2e_tok_s is not None])
    run.ttft_s = _mean([r.ttft_s for r in ok if r.ttft_s is not None])
    run.throughput_tok_s = run.completion_tokens / wall if wall > 0 and ok else None
    if ok and all(r.spec_verify_ct for r in ok):
        run.verify_ct = sum(int(r.spec_verify_ct or 0) for r in ok)
        run.accept_length = run.completion_tokens / run.verify_ct
        run.accept_source = "sglext"
    elif before is not None and ok:
        after = _scrape_settled(ep, before, run.completion_tokens)
        if after is not None:
            dv = after[_COUNTER_VERIFY] - before[_COUNTER_VERIFY]
            dg = after[_COUNTER_GEN] - before[_COUNTER_GEN]
            if dv > 0 and dg < dv:  # every verify yields >= 1 token: an accept length < 1 is no figure
                run.warning = (f"run {index}: counter differences cannot be true ({dg:g} generated tokens "
                               f"over {dv:g} verify calls, accept length < 1); accept length left out")
            elif dv > 0:
                run.verify_ct = int(dv)
                run.accept_length = dg / dv
                run.accept_source = "metrics"
                run.metrics_clean = int(dg) == run.completion_tokens
    return run


def _scrape_settled(ep: Endpoint, before: dict[str, float], expect_tokens: int,
                    wait_s: float = 2.0) -> dict[str, float] | None:
    """Counters are bumped when the request finishes server-side, which can trail the last chunk."""
    deadline = time.perf_counter() + wait_s
    after = scrape(ep)
    while after is not None and after[_COUNTER_GEN] - before[_COUNTER_GEN] < expect_tokens:
        if time.perf_counter() > deadline:
            break
        time.sleep(0.05)
        after = scrape(ep)
    return after


def summarize(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"avg": None, "median": None, "peak": None, "min": None, "stdev": None}
    return {
        "avg": sum(values) / len(values),
        "median": statistics.median(values),
        "peak": max(values),
        "min": min(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def run_bench(opts: BenchOptions, progress: Callable[[str, int, int], None] | None = None
              ) -> dict[str, Any]:
    """Warm-up runs (discarded) then ``opts.runs`` measured runs; returns the result document."""
    if opts.runs < 1 or opts.warmup < 0 or opts.concurrency < 1 or opts.max_tokens < 1:
        raise UserError("--runs, --concurrency and --max-tokens must be >= 1, --warmup >= 0",
                        exit_code=2)
    if not 0 < opts.timeout_s <= httpio.MAX_TIMEOUT_S:  # NaN fails too; inf overflows socket waits
        raise UserError(f"--timeout {opts.timeout_s}: give seconds, more than 0 and at most "
                        f"{httpio.MAX_TIMEOUT_S:g}", exit_code=2)
    if not opts.prompts:
        raise UserError("no prompts given", exit_code=2)
    ep = Endpoint(opts.url, opts.timeout_s)
    probe_s = min(10.0, opts.timeout_s)  # the probe waits no longer than one request may
    try:
        status, body = ep.get("/v1/models", timeout_s=probe_s)
    except OSError as exc:  # refused, unreachable, or no answer in probe_s (a timeout)
        raise UserError(f"cannot reach {opts.url}: {exc}") from exc
    except (http.client.HTTPException, ValueError, httpio.BadStream):
        status, body = 0, ""  # it answered, badly: the model name stays unknown ("default")
    model = opts.model or (model_from(body) if status == 200 else None) or "default"
    runs: list[RunRecord] = []
    warm: list[RunRecord] = []
    total = opts.warmup + opts.runs
    for i in range(total):
        is_warm = i < opts.warmup
        if progress:
            progress("warmup" if is_warm else "run", i, total)
        r = run_once(ep, opts, model, i)
        (warm if is_warm else runs).append(r)
    if progress:
        progress("done", total, total)
    return build_result(opts, model, runs, warm)


def burst_warnings(good: list[RunRecord]) -> list[str]:
    """Runs whose first tokens came late and whose decode then looks fast: the server went on
    generating while the stream waited (a stalled output path), the waiting tokens arrived in one
    burst, and first-token-to-last-token time undercounts the decode (H200 round 7: TTFT 0.51 s
    against 0.10 s, "1439 tok/s" against 495). The median and the e2e rate are not moved by it;
    the mean is. Needs 3+ runs to have a median to compare with."""
    timed = [r for r in good if r.ttft_s is not None and r.decode_tok_s is not None]
    if len(timed) < 3:
        return []
    t_med = statistics.median(r.ttft_s for r in timed)
    d_med = statistics.median(r.decode_tok_s for r in timed)
    return [f"run {r.index}: first tokens {r.ttft_s:.2f} s after sending (median {t_med:.2f} s), then "
            f"{r.decode_tok_s:.1f} decode tok/s per stream (median {d_med:.1f}): tokens made during the "
            f"wait came in a burst, so its decode rate overstates the server; compare medians"
            for r in timed
            if r.ttft_s > max(2 * t_med, t_med + 0.1) and r.decode_tok_s > 1.25 * d_med]


def build_result(opts: BenchOptions, model: str, runs: list[RunRecord],
                 warm: list[RunRecord]) -> dict[str, Any]:
    # A run counts only when every one of its requests finished: a cut stream is not a fast one.
    good = [r for r in runs if r.decode_tok_s is not None and not any(q.error for q in r.requests)]
    errors = [q.error for r in runs for q in r.requests if q.error]
    warnings = [r.warning for r in runs if r.warning]
    for r in runs:  # a run that failed nothing yet has no decode rate says why
        if not any(q.error for q in r.requests) and r.decode_tok_s is None:
            warnings.append(f"run {r.index}: no decode tok/s (every token came in the first chunk; "
                            "a --max-tokens above the tokens of one chunk gives one)")
    warnings += burst_warnings(good)
    sources = sorted({r.accept_source for r in good})
    acc_runs = [r for r in good if r.accept_length is not None]
    tokens = sum(r.completion_tokens for r in acc_runs)
    verifies = sum(r.verify_ct or 0 for r in acc_runs)
    return {
        "schema": SCHEMA,
        "label": opts.label or opts.url,
        "url": opts.url,
        "model": model,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "params": {
            "runs": opts.runs, "warmup": opts.warmup, "max_tokens": opts.max_tokens,
            "concurrency": opts.concurrency, "temperature": 0, "ignore_eos": opts.ignore_eos,
            "timeout_s": opts.timeout_s, "prompts": opts.prompts,
        },
        "counting": ("completion_tokens from the server's usage (include_usage); tokens in the first "
                     "chunk from per-chunk usage (continuous_usage_stats) when reported"),
        "summary": {
            "decode_tok_s": summarize([r.decode_tok_s for r in good if r.decode_tok_s is not None]),
            "e2e_tok_s": summarize([r.e2e_tok_s for r in good if r.e2e_tok_s is not None]),
            "ttft_s": summarize([r.ttft_s for r in good if r.ttft_s is not None]),
            "throughput_tok_s": summarize([r.throughput_tok_s for r in good
                                           if r.throughput_tok_s is not None]),
            "completion_tokens": sum(r.completion_tokens for r in good),
            "accept_length": tokens / verifies if verifies else None,
            "accept_source": sources[0] if len(sources) == 1 else ("+".join(sources) or "none"),
            "ok_runs": len(good),
            "failed_requests": len(errors),
        },
        "errors": errors[:20],
        "warnings": warnings[:20],
        "runs": [asdict(r) for r in runs],
        "warmup_runs": [asdict(r) for r in warm],
    }


def read_json(path: str | Path) -> Any:
    """A JSON file, or one clear UserError (exit 2) for a missing or unreadable one."""
    p = Path(path)
    try:
        return json_loads(p.read_text())
    except FileNotFoundError as exc:
        raise UserError(f"{p}: no such file", exit_code=2) from exc
    except ValueError as exc:
        raise UserError(f"{p}: not JSON ({exc})", exit_code=2) from exc


def load_result(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    data = read_json(p)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(f"{p}: not a bench result (schema {SCHEMA!r} expected)", exit_code=2)
    BenchResult.from_json(data, str(p))  # required fields and their JSON types
    return data


def write_json(path: str | Path, data: Any) -> None:
    """Atomic write: a crash never leaves half a result file (sweep --resume reads them); through a
    symlink, never onto a special file (outputs.py); outputs.WriteFailed (one line) on failure."""
    from ..documents.outputs import write_atomic

    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n", what="output")


# ---------------------------------------------------------------- concurrency ladder


def parse_levels(text: str) -> list[int]:
    """``"1,2,4,8"`` -> [1, 2, 4, 8]; UserError(2) for anything else (duplicates, < 1)."""
    try:
        levels = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError as exc:
        raise UserError(f"--concurrency {text!r}: a number or a comma list like 1,2,4,8", 2) from exc
    if not levels or any(n < 1 for n in levels) or len(set(levels)) != len(levels):
        raise UserError(f"--concurrency {text!r}: distinct numbers >= 1", exit_code=2)
    return levels


def level_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """The figures of one ladder level: per-stream decode, total throughput, TTFT, accept length."""
    s = doc["summary"]
    return {
        "concurrency": doc["params"]["concurrency"],
        "per_stream_tok_s": s["decode_tok_s"]["avg"],
        "per_stream_tok_s_median": s["decode_tok_s"]["median"],
        "throughput_tok_s": s["throughput_tok_s"]["avg"],
        "ttft_s": s["ttft_s"]["avg"],
        "ttft_s_median": s["ttft_s"]["median"],
        "accept_length": s["accept_length"],
        "accept_source": s["accept_source"],
        "ok_runs": s["ok_runs"],
        "failed_requests": s["failed_requests"],
    }


def run_ladder(opts: BenchOptions, levels: list[int],
               progress: Callable[[int, str, int, int], None] | None = None) -> dict[str, Any]:
    """One bench (warm-up + runs) per concurrency level, in the order given; one ladder document.

    Each level keeps its full bench document (``levels[i].bench``), so anything that reads bench
    results reads a level too.
    """
    out: list[dict[str, Any]] = []
    model = opts.model
    for n in levels:
        cb = (lambda ph, i, t, n=n: progress(n, ph, i, t)) if progress else None
        doc = run_bench(replace(opts, concurrency=n, model=model), progress=cb)
        model = doc["model"]  # detected once
        out.append({"concurrency": n, "summary": level_summary(doc), "bench": doc})
    return {
        "schema": LADDER_SCHEMA,
        "label": opts.label or opts.url,
        "url": opts.url,
        "model": model,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "params": {"levels": levels, "runs": opts.runs, "warmup": opts.warmup,
                   "max_tokens": opts.max_tokens, "ignore_eos": opts.ignore_eos,
                   "timeout_s": opts.timeout_s, "prompt_count": len(opts.prompts)},
        "definitions": {
            "per_stream_tok_s": "mean over runs of the mean decode tok/s of the run's requests",
            "throughput_tok_s": "mean over runs of all completion tokens / run wall time",
            "accept_length": "completion tokens / verify calls, incl. the bonus token",
        },
        "levels": out,
    }


def load_ladder(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    data = read_json(p)
    if not isinstance(data, dict) or data.get("schema") != LADDER_SCHEMA:
        raise UserError(f"{p}: not a concurrency ladder (schema {LADDER_SCHEMA!r} expected)", 2)
    Ladder.from_json(data, str(p))  # required fields and their JSON types
    return data
