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
import re
import statistics
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError

SCHEMA = "eagle3_bench/1"

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


@dataclass
class BenchOptions:
    url: str
    runs: int = 5
    warmup: int = 1
    max_tokens: int = 1000
    prompts: list[str] = field(default_factory=lambda: [DEFAULT_PROMPT])
    concurrency: int = 1
    label: str | None = None
    model: str | None = None
    ignore_eos: bool = False
    timeout_s: float = 600.0


# ---------------------------------------------------------------- HTTP


def parse_url(url: str) -> tuple[str, str, int, str]:
    """``http://host:port[/v1]`` -> (scheme, host, port, base path without /v1)."""
    u = urllib.parse.urlparse(url if "://" in url else f"http://{url}")
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UserError(f"--url must look like http://HOST:PORT, got {url!r}", exit_code=2)
    base = u.path.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    port = u.port or (443 if u.scheme == "https" else 80)
    return u.scheme, u.hostname, port, base


class Endpoint:
    def __init__(self, url: str, timeout_s: float = 600.0) -> None:
        self.url = url
        self.scheme, self.host, self.port, self.base = parse_url(url)
        self.timeout_s = timeout_s

    def conn(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout_s)

    def get(self, path: str, timeout_s: float = 10.0) -> tuple[int, str]:
        c = self.conn()
        c.timeout = timeout_s
        try:
            c.request("GET", self.base + path)
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        finally:
            c.close()


def detect_model(ep: Endpoint) -> str:
    """First id of ``/v1/models``; SGLang accepts any name, other servers need the real one."""
    try:
        status, body = ep.get("/v1/models")
        if status == 200:
            data = json.loads(body).get("data") or []
            if data and data[0].get("id"):
                return str(data[0]["id"])
    except (OSError, ValueError):
        pass
    return "default"


def stream_chat(ep: Endpoint, body: dict[str, Any], rec: RequestRecord,
                clock: Callable[[], float] = time.perf_counter) -> RequestRecord:
    """Send one streaming chat completion and fill ``rec`` as chunks arrive."""
    payload = json.dumps(body).encode()
    c = ep.conn()
    try:
        t_sent = clock()
        c.request("POST", ep.base + "/v1/chat/completions", body=payload,
                  headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        r = c.getresponse()
        if r.status != 200:
            rec.error = f"HTTP {r.status}: {r.read(500).decode('utf-8', 'replace').strip()}"
            return rec
        while True:
            line = r.readline()
            if not line:
                break
            if not line.startswith(b"data:"):
                continue
            now = clock() - t_sent
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            _take_chunk(chunk, rec, now)
    except (OSError, http.client.HTTPException) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
    finally:
        c.close()
    if rec.error is None and rec.ttft_s is None:
        rec.error = "stream ended without any generated text"
    rec.finalize()
    return rec


def _take_chunk(chunk: dict[str, Any], rec: RequestRecord, now: float) -> None:
    if "error" in chunk and not chunk.get("choices"):
        err = chunk["error"]
        rec.error = str(err.get("message", err) if isinstance(err, dict) else err)
        return
    usage = chunk.get("usage") or None
    has_text = False
    for ch in chunk.get("choices") or []:
        delta = ch.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content"):
            has_text = True
        if ch.get("finish_reason"):
            rec.finish_reason = ch["finish_reason"]
    if has_text:
        rec.content_chunks += 1
        rec.last_token_s = now
        if rec.ttft_s is None:
            rec.ttft_s = now
            if usage and usage.get("completion_tokens") is not None:
                rec.first_chunk_tokens = int(usage["completion_tokens"])
                rec.first_tokens_exact = True
    if usage:
        if usage.get("completion_tokens") is not None:
            rec.completion_tokens = int(usage["completion_tokens"])
        if usage.get("prompt_tokens") is not None:
            rec.prompt_tokens = int(usage["prompt_tokens"])
    spec = (chunk.get("sglext") or {}).get("spec_tokens_details")
    if isinstance(spec, list):
        spec = spec[0] if spec else None
    if isinstance(spec, dict) and spec.get("spec_verify_ct"):
        rec.spec_verify_ct = int(spec["spec_verify_ct"])
        if spec.get("spec_accept_length"):
            rec.spec_accept_length = float(spec["spec_accept_length"])


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
            sums[m.group(1)] = sums.get(m.group(1), 0.0) + float(m.group(3))
        except ValueError:
            continue
    return sums


def scrape(ep: Endpoint) -> dict[str, float] | None:
    try:
        status, body = ep.get("/metrics", timeout_s=5.0)
    except (OSError, http.client.HTTPException):
        return None
    if status != 200:
        return None
    c = parse_counters(body)
    return c if _COUNTER_VERIFY in c and _COUNTER_GEN in c else None


# ---------------------------------------------------------------- runs


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def request_body(opts: BenchOptions, prompt: str, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": opts.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "return_spec_tokens_details": True,
    }
    if opts.ignore_eos:
        body["ignore_eos"] = True
    return body


def run_once(ep: Endpoint, opts: BenchOptions, model: str, index: int,
             pool: ThreadPoolExecutor | None = None) -> RunRecord:
    """One run of ``concurrency`` requests; accept length from sglext, else counter differences."""
    before = scrape(ep)
    n = opts.concurrency
    recs = [RequestRecord(prompt_index=(index * n + i) % len(opts.prompts)) for i in range(n)]
    t0 = time.perf_counter()
    if n == 1:
        stream_chat(ep, request_body(opts, opts.prompts[recs[0].prompt_index], model), recs[0])
    else:
        assert pool is not None
        futs = [pool.submit(stream_chat, ep, request_body(opts, opts.prompts[r.prompt_index], model), r)
                for r in recs]
        for f in futs:
            f.result()
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
            if dv > 0:
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
    if not opts.prompts:
        raise UserError("no prompts given", exit_code=2)
    ep = Endpoint(opts.url, opts.timeout_s)
    try:
        status, _ = ep.get("/v1/models", timeout_s=10.0)
    except (OSError, http.client.HTTPException) as exc:
        raise UserError(f"cannot reach {opts.url}: {exc}") from exc
    model = opts.model or (detect_model(ep) if status == 200 else "default")
    pool = ThreadPoolExecutor(opts.concurrency) if opts.concurrency > 1 else None
    runs: list[RunRecord] = []
    warm: list[RunRecord] = []
    try:
        total = opts.warmup + opts.runs
        for i in range(total):
            is_warm = i < opts.warmup
            if progress:
                progress("warmup" if is_warm else "run", i, total)
            r = run_once(ep, opts, model, i, pool)
            (warm if is_warm else runs).append(r)
        if progress:
            progress("done", total, total)
    finally:
        if pool:
            pool.shutdown()
    return build_result(opts, model, runs, warm)


def build_result(opts: BenchOptions, model: str, runs: list[RunRecord],
                 warm: list[RunRecord]) -> dict[str, Any]:
    good = [r for r in runs if r.decode_tok_s is not None]
    errors = [q.error for r in runs for q in r.requests if q.error]
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
            "prompts": opts.prompts,
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
        "runs": [asdict(r) for r in runs],
        "warmup_runs": [asdict(r) for r in warm],
    }


def read_json(path: str | Path) -> Any:
    """A JSON file, or one clear UserError (exit 2) for a missing or unreadable one."""
    p = Path(path)
    try:
        return json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise UserError(f"{p}: no such file", exit_code=2) from exc
    except ValueError as exc:
        raise UserError(f"{p}: not JSON ({exc})", exit_code=2) from exc


def load_result(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    data = read_json(p)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(f"{p}: not a bench result (schema {SCHEMA!r} expected)", exit_code=2)
    return data


def write_json(path: str | Path, data: Any) -> None:
    """Atomic write: a crash never leaves half a result file (sweep --resume reads them)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(p)
