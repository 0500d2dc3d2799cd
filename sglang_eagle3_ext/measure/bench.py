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
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..documents.bench_doc import LADDER_SCHEMA, SCHEMA, level_summary
from ..runtime.errors import UserError
from . import httpio, stopping
from .chat_client import (
    _COUNTER_GEN,
    _COUNTER_VERIFY,
    Endpoint,
    RequestRecord,
    model_from,
    scrape,
    stream_request,
)
from .prompts import Prompt, messages_of, text_of

# The seeds' measurement prompt (Kimi-K2.5 campaign, 1000 tokens at temperature 0).
DEFAULT_PROMPT = (
    "Write a comprehensive guide to implementing a B-tree data structure in Rust, including "
    "insertion, deletion, and search operations. Be very thorough and detailed."
)


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
    api: str = "chat"  # or "generate": SGLang's native /generate (bench_serving's --backend sglang)


# ---------------------------------------------------------------- runs


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def request_body(opts: BenchOptions, prompt: Prompt, model: str) -> dict[str, Any]:
    if opts.api == "generate":  # the payload of bench_serving's --backend sglang (0.5.16 serving.py)
        return {"text": text_of(prompt), "stream": True,
                "sampling_params": {"max_new_tokens": opts.max_tokens, "temperature": 0,
                                    "ignore_eos": opts.ignore_eos}}
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
    """All requests at once, one daemon thread each; Ctrl-C cuts every stream and re-raises. At a
    thread or task limit a request whose thread cannot start fails with that reason (its run does
    not count; one sent later would not be one of N in flight).

    Daemon threads (not a ThreadPoolExecutor, whose workers are joined at exit) so a server that
    never answers cannot hold the process after an interrupt.
    """
    if len(recs) == 1:
        _guarded(ep, bodies[0], recs[0])
        return
    threads = []
    try:
        for b, r in zip(bodies, recs, strict=True):
            t = threading.Thread(target=_guarded, args=(ep, b, r), daemon=True)
            if stopping.start_thread(t) >= 0:
                threads.append(t)
            else:  # a thread limit: this request fails (its run does not count), the bench goes on
                r.error = stopping.NO_THREAD
        for t in threads:
            while t.is_alive():
                t.join(0.1)
    except KeyboardInterrupt:
        ep.abort()
        raise


def _guarded(ep: Endpoint, body: dict[str, Any], rec: RequestRecord) -> None:
    """stream_request (chat or /generate), whose every failure ends in ``rec.error``: a worker thread never dies with a
    traceback on stderr while its request counts as fine."""
    try:
        stream_request(ep, body, rec)
    except RuntimeError as exc:
        if "thread" not in str(exc):
            rec.error = f"unexpected RuntimeError: {exc} (a bug in sgl-eagle3: please report it)"
        else:  # the deadline watchdog could not start at a thread limit
            rec.error = "failed: the client could not start a thread (the process is at its thread or task limit)"
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
    acc = accept_of(ep, before, ok, run.completion_tokens, f"run {index}", per_request_source(opts.api))
    run.accept_length, run.accept_source = acc["accept_length"], acc["accept_source"]
    run.verify_ct, run.metrics_clean, run.warning = acc["verify_ct"], acc["metrics_clean"], acc["warning"]
    return run


def per_request_source(api: str) -> str:
    """Where a request's own verify count comes from: chat's sglext, /generate's meta_info."""
    return "meta_info" if api == "generate" else "sglext"


def accept_of(ep: Endpoint, before: dict[str, float] | None, ok: list[RequestRecord],
              completion_tokens: int, where: str, per_request: str = "sglext") -> dict[str, Any]:
    """Accept length of finished requests: per request (sglext, or /generate's meta_info) when
    every one has it, else the differences of SGLang's counters since ``before`` (scraped when
    the requests started)."""
    out: dict[str, Any] = {"accept_length": None, "accept_source": "none", "verify_ct": None,
                           "metrics_clean": None, "warning": None}
    if ok and all(r.spec_verify_ct for r in ok):
        out["verify_ct"] = sum(int(r.spec_verify_ct or 0) for r in ok)
        out["accept_length"] = completion_tokens / out["verify_ct"]
        out["accept_source"] = per_request
    elif before is not None and ok:
        after = _scrape_settled(ep, before, completion_tokens)
        if after is not None:
            dv = after[_COUNTER_VERIFY] - before[_COUNTER_VERIFY]
            dg = after[_COUNTER_GEN] - before[_COUNTER_GEN]
            if dv > 0 and dg < dv:  # every verify yields >= 1 token: an accept length < 1 is no figure
                out["warning"] = (f"{where}: counter differences cannot be true ({dg:g} generated tokens "
                                  f"over {dv:g} verify calls, accept length < 1); accept length left out")
            elif dv > 0:
                out["verify_ct"] = int(dv)
                out["accept_length"] = dg / dv
                out["accept_source"] = "metrics"
                out["metrics_clean"] = int(dg) == completion_tokens
    return out


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


def run_bench(opts: BenchOptions, progress: Callable[[str, int, int], None] | None = None,
              keep_partial: bool = False) -> dict[str, Any]:
    """Warm-up runs (discarded) then ``opts.runs`` measured runs; returns the result document.
    With ``keep_partial`` (the bench command) an interrupt after a measured run keeps the runs
    finished (``stopped`` says why); otherwise, or with none finished, it raises (a sweep or a
    scan stops its server on it)."""
    if opts.runs < 1 or opts.warmup < 0 or opts.concurrency < 1 or opts.max_tokens < 1:
        raise UserError("--runs, --concurrency and --max-tokens must be >= 1, --warmup >= 0",
                        exit_code=2)
    if not 0 < opts.timeout_s <= httpio.MAX_TIMEOUT_S:  # NaN fails too; inf overflows socket waits
        raise UserError(f"--timeout {opts.timeout_s}: give seconds, more than 0 and at most "
                        f"{httpio.MAX_TIMEOUT_S:g}", exit_code=2)
    if not opts.prompts:
        raise UserError("no prompts given", exit_code=2)
    ep = Endpoint(opts.url, opts.timeout_s)
    model = probe_model(ep, opts.model)
    runs: list[RunRecord] = []
    warm: list[RunRecord] = []
    total = opts.warmup + opts.runs
    for i in range(total):
        is_warm = i < opts.warmup
        if progress:
            progress("warmup" if is_warm else "run", i, total)
        try:
            r = run_once(ep, opts, model, i)
        except KeyboardInterrupt as exc:  # Ctrl-C / SIGTERM / SIGHUP (stopping.py)
            if not keep_partial or not runs:
                raise
            doc = build_result(opts, model, runs, warm)
            doc["stopped"] = stopping.stop_record(exc, f"run {i - opts.warmup + 1} of {opts.runs}")
            return doc
        (warm if is_warm else runs).append(r)
    if progress:
        progress("done", total, total)
    return build_result(opts, model, runs, warm)


def probe_model(ep: Endpoint, model: str | None) -> str:
    """GET /v1/models once: UserError(1) when the server cannot be reached; the first model id
    (``default`` when the answer has none) unless ``model`` is given."""
    probe_s = min(10.0, ep.timeout_s)  # the probe waits no longer than one request may
    try:
        status, body = ep.get("/v1/models", timeout_s=probe_s)
    except OSError as exc:  # refused, unreachable, or no answer in probe_s (a timeout)
        raise UserError(f"cannot reach {ep.url}: {exc}") from exc
    except (http.client.HTTPException, ValueError, httpio.BadStream):
        status, body = 0, ""  # it answered, badly: the model name stays unknown ("default")
    return model or (model_from(body) if status == 200 else None) or "default"


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


def coverage_warning(n_prompts: int, concurrency: int, runs: list[RunRecord]) -> list[str]:
    """Measured requests that used only some of the prompts: the figures describe those texts.
    Acceptance differs by text, so a separately measured figure on the whole file differs too
    (H100 2026-12-06: ``--runs 3`` at one stream sent prompts 1-3 of 8, whose expected accept
    length is 1.0-1.4 % above the eight's)."""
    used = {q.prompt_index for r in runs for q in r.requests}
    if not runs or len(used) >= n_prompts:
        return []
    need = -(-n_prompts // concurrency)  # runs of `concurrency` requests that reach every prompt
    shown = ", ".join(map(str, sorted(used)[:8])) + (", ..." if len(used) > 8 else "")
    return [f"the measured requests used {len(used)} of the {n_prompts} prompts (index {shown}): the figures "
            f"describe those texts only; --runs {need} at concurrency {concurrency} sends each at least once"]


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
    warnings += coverage_warning(len(opts.prompts), opts.concurrency, runs)
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
            "timeout_s": opts.timeout_s, "prompts": opts.prompts, "api": opts.api,
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


def run_ladder(opts: BenchOptions, levels: list[int],
               progress: Callable[[int, str, int, int], None] | None = None,
               keep_partial: bool = False) -> dict[str, Any]:
    """One bench (warm-up + runs) per concurrency level, in the order given; one ladder document.

    Each level keeps its full bench document (``levels[i].bench``), so anything that reads bench
    results reads a level too. With ``keep_partial`` (the bench command) a level that fails to
    start or is interrupted ends the ladder with the levels finished kept (``stopped``).
    """
    out: list[dict[str, Any]] = []
    model = opts.model
    stopped: dict[str, Any] | None = None
    for n in levels:
        cb = (lambda ph, i, t, n=n: progress(n, ph, i, t)) if progress else None
        try:  # a level cut short is left out; the levels finished are kept (stopping.py)
            doc = run_bench(replace(opts, concurrency=n, model=model), progress=cb, keep_partial=False)
        except (UserError, KeyboardInterrupt) as exc:
            if not out or not keep_partial:
                raise
            stopped = stopping.stop_record(exc, f"concurrency {n}")
            stopped["at_level"] = n
            break
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
                   "timeout_s": opts.timeout_s, "prompt_count": len(opts.prompts), "api": opts.api},
        "definitions": {
            "per_stream_tok_s": "mean over runs of the mean decode tok/s of the run's requests",
            "throughput_tok_s": "mean over runs of all completion tokens / run wall time",
            "accept_length": "completion tokens / verify calls, incl. the bonus token",
        },
        "levels": out,
        **({"stopped": stopped} if stopped else {}),
    }
