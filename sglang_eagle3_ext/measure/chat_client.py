"""The streaming client (chat completions, or SGLang's /generate): one request to a server we do not trust (bounded reads, exact token counts from usage or meta_info, per-request accept length from sglext or meta_info), and SGLang's counters."""

from __future__ import annotations

import http.client
import json
import math
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..runtime.errors import UserError
from . import chunks, httpio

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

    # Hooks for the open-loop bench (open_loop.StreamRecord keeps send and chunk times); no-ops
    # here, so a closed-loop record stays what it was.
    def on_send(self, t_sent: float) -> None:
        """The request is about to be sent (``t_sent``: the stream's clock)."""

    def on_line(self, now: float) -> None:
        """A ``data:`` line arrived, ``now`` s after sending ([DONE] too)."""

    def on_text(self, now: float, tokens: int | None) -> None:
        """A chunk with generated text arrived; ``tokens``: its cumulative usage, if reported."""


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

    def get(self, path: str, timeout_s: float = 10.0, method: str = "GET") -> tuple[int, str]:
        """(status, body) of a GET (or a body-less POST); the whole exchange within ``timeout_s``,
        the body capped."""
        dl = httpio.Deadline(timeout_s)
        c = self.conn(timeout_s)
        r = None
        try:
            dl.watch(c)
            c.request(method, self.base + path)
            r = c.getresponse()
            return r.status, httpio.read_body(c, r, dl).decode("utf-8", "replace")
        except _REQUEST_ERRORS:
            if dl.fired:
                raise TimeoutError(f"no answer to {method} {path} in {timeout_s:g} s") from None
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
    return _stream(ep, _CHAT, body, rec, clock)


def stream_generate(ep: Endpoint, body: dict[str, Any], rec: RequestRecord,
                    clock: Callable[[], float] = time.perf_counter) -> RequestRecord:
    """The same for SGLang's native ``/generate`` (``bench --api generate``): the counts come from
    each chunk's ``meta_info`` (completion_tokens, spec_verify_ct), as bench_serving's
    ``--backend sglang`` reads them (0.5.16 ``benchmark/serving.py``
    ``async_request_sglang_generate``)."""
    return _stream(ep, _GENERATE, body, rec, clock)


def stream_request(ep: Endpoint, body: dict[str, Any], rec: RequestRecord) -> RequestRecord:
    """Whichever API ``body`` was built for (bench.request_body)."""
    return (stream_chat if "messages" in body else stream_generate)(ep, body, rec)


@dataclass(frozen=True)
class _Api:
    path: str
    take: Callable[[Any, RequestRecord, float], bool]
    no_usage: str
    words: tuple[str, str, str] = chunks.CHAT_WORDS  # the API's own names in messages


def _stream(ep: Endpoint, api: _Api, body: dict[str, Any], rec: RequestRecord,
            clock: Callable[[], float]) -> RequestRecord:
    payload = json.dumps(body).encode()
    dl = httpio.Deadline(ep.timeout_s)
    c = ep.conn()
    sock = None
    r = None
    done = False
    usage_seen = False
    t_sent = clock()
    rec.on_send(t_sent)
    try:
        if ep.aborted:
            raise OSError("interrupted")
        sock = dl.watch(c)
        ep.track(sock, True)
        if ep.aborted:  # Ctrl-C while connecting
            raise OSError("interrupted")
        c.request("POST", ep.base + api.path, body=payload,
                  headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        r = c.getresponse()
        if r.status != 200 or "html" in (r.getheader("Content-Type") or "").lower():
            dl.arm(c)
            rec.error = answer_error(r.status, r.getheader("Content-Type"), r.read(2000))
            return rec
        for line in httpio.lines(c, r, dl):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            now = clock() - t_sent
            rec.on_line(now)
            if data == b"[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except (ValueError, RecursionError):
                continue  # a keep-alive or partial line: SSE readers skip what they cannot parse
            usage_seen = api.take(chunk, rec, now) or usage_seen
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
        rec.error = api.no_usage
    elif rec.error is None:
        asked = body.get("max_tokens") or (body.get("sampling_params") or {}).get("max_new_tokens")
        rec.error = chunks.impossible_counts(rec.completion_tokens, rec.first_chunk_tokens if
                                             rec.first_tokens_exact else 0, rec.spec_verify_ct,
                                             int(asked or chunks.MAX_COUNT), api.words)
    rec.finalize()
    return rec


_TITLE = re.compile(rb"<title[^>]*>([^<]{0,200})", re.IGNORECASE)


def answer_error(status: int, content_type: str | None, head: bytes) -> str:
    """One short line for an answer that is no event stream: an HTML page (a web server, a proxy's
    error page) is named by its title, never printed whole; other bodies are cut to 200 chars."""
    text = head.lstrip()
    if "html" in (content_type or "").lower() or text[:1] == b"<":
        m = _TITLE.search(head)
        title = " ".join(m.group(1).decode("utf-8", "replace").split()) if m else ""
        return (f"HTTP {status}: an HTML page{f' ({title!r})' if title else ''}, not an OpenAI-compatible "
                "answer: is --url an SGLang server?")
    body = " ".join(head.decode("utf-8", "replace").split())
    return f"HTTP {status}: {body[:200]}{'...' if len(body) > 200 else ''}"


def _server_error(err: Any) -> str:
    msg = err.get("message", err) if isinstance(err, dict) else err
    return f"the server sent an error: {str(msg)[:300]}"


def _take_chunk(chunk: Any, rec: RequestRecord, now: float) -> bool:
    """Fold one chunk into ``rec``; True when it carried usage.completion_tokens. BadStream for a
    chunk of the wrong shape (chunks.py)."""
    chunk = chunks.chunk_object(chunk)
    if "error" in chunk and not chunk.get("choices"):
        rec.error = _server_error(chunk["error"])
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
    return _fold(rec, now, has_text, tokens, prompt, verify, accept)


def _take_generate(chunk: Any, rec: RequestRecord, now: float) -> bool:
    """One ``/generate`` chunk: ``text`` (the text so far, or the delta with SGLang's
    ``--incremental-streaming-output``) and ``meta_info`` with the cumulative counts. A text chunk
    that adds no token is skipped, as bench_serving skips it (its gap goes to the next one)."""
    chunk = chunks.chunk_object(chunk)
    if "error" in chunk:
        rec.error = _server_error(chunk["error"])
        return False
    meta = chunks.obj(chunk, "meta_info", "") or {}
    tokens = chunks.count(meta, "completion_tokens", "meta_info.")
    prompt = chunks.count(meta, "prompt_tokens", "meta_info.")
    fr = meta.get("finish_reason")
    if isinstance(fr, dict):  # SGLang: {"type": "length", "length": N} / {"type": "stop", ...}
        fr = chunks.text(fr, "type", "meta_info.finish_reason.")
    elif fr is not None:
        fr = chunks.text(meta, "finish_reason", "meta_info.")
    if fr:
        rec.finish_reason = fr
    has_text = bool(chunks.text(chunk, "text", ""))
    if has_text and rec.ttft_s is not None and tokens is not None and tokens == rec.completion_tokens:
        has_text = False
    verify = chunks.count(meta, "spec_verify_ct", "meta_info.")
    accept = chunks.number(meta, "spec_accept_length", "meta_info.")
    return _fold(rec, now, has_text, tokens, prompt, verify, accept)


def _fold(rec: RequestRecord, now: float, has_text: bool, tokens: int | None, prompt: int | None,
          verify: int | None, accept: float | None) -> bool:
    if tokens is not None and tokens < rec.completion_tokens:  # a count every chunk carries so far
        raise httpio.BadStream(f"the completion token count went back from {rec.completion_tokens} to "
                               f"{tokens} within one stream (it is cumulative)")
    if has_text:
        rec.on_text(now, tokens)
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


_CHAT = _Api("/v1/chat/completions", _take_chunk,
             "the server reported no usage.completion_tokens (bench counts the server's tokens and asks "
             "for them with stream_options.include_usage; this server ignored it)")
_GENERATE = _Api("/generate", _take_generate,
                 "the server reported no meta_info.completion_tokens (--api generate reads SGLang's native "
                 "/generate stream; is this an SGLang server?)", chunks.GENERATE_WORDS)


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


def flush_cache(ep: Endpoint) -> None:
    """Drop the server's radix cache (SGLang's ``/flush_cache``, as ``bench_serving --flush-cache``
    does after its warm-up, 0.5.16 ``benchmark/serving.py``); UserError when it will not."""
    try:
        status, body = ep.get("/flush_cache", timeout_s=min(30.0, ep.timeout_s), method="POST")
    except _REQUEST_ERRORS as exc:
        raise UserError(f"--flush-cache: {ep.url}/flush_cache did not answer ({exc})") from None
    if status != 200:
        text = " ".join(body.split())[:200]
        raise UserError(f"--flush-cache: {ep.url}/flush_cache answered {status}: {text or '(empty)'} "
                        f"(SGLang flushes only with no request running or waiting)")


def scrape(ep: Endpoint) -> dict[str, float] | None:
    try:
        status, body = ep.get("/metrics", timeout_s=min(5.0, ep.timeout_s))
    except _REQUEST_ERRORS:
        return None
    if status != 200:
        return None
    c = parse_counters(body)
    return c if _COUNTER_VERIFY in c and _COUNTER_GEN in c else None
