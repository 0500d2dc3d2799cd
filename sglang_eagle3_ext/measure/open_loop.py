"""Open-loop bench: requests sent on an arrival schedule (``bench --request-rate``), whatever the
server's pace; one ``eagle3_serving/1`` document over one or more rates.

Per rate: warm-up requests (sent together, at most 32 tokens, left out, as bench_serving's
``--warmup-requests``), then the schedule (arrivals.py): a dispatcher sleeps to each send time
on absolute deadlines (no drift) and starts one daemon thread per request, which streams it
with the closed-loop client (chat_client.stream_chat: deadlines, bounded reads, a cut stream is
a failed request). At most MAX_IN_FLIGHT threads stream at once; at a thread or task limit a
request waits for one in flight to end (stopping.start_thread), and with none in flight it
fails with that reason: the run is never lost to "can't start new thread". (Threads, not an
asyncio loop on aiohttp as bench_serving uses: the checked stdlib reader is what the hostile-
server tests and the client-overhead benchmark cover, aiohttp is no dependency of ours, and
with the bound a thread per request costs a stack per stream in flight, not per request.) ``--max-concurrency C`` is bench_serving's semaphore: a request whose time has
come waits for a free slot, in arrival order, and its TTFT starts when it is sent (as there);
the wait is recorded as ``queued_ms``. The client's own lateness (sent after its time, with a
slot free) is recorded per request as ``late_ms``: a schedule the client could not keep is said,
never hidden. Each stream records its text chunks' arrival times and cumulative token counts
(two arrays, at most max_tokens + 1 entries) for the ITL figures (serving_stats.py).
"""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..runtime.errors import UserError
from . import arrivals, httpio, serving_stats, stopping
from .bench import (
    BenchOptions,
    _guarded,
    _stream_all,
    accept_of,
    per_request_source,
    probe_model,
    request_body,
)
from .chat_client import Endpoint, RequestRecord, flush_cache, scrape
from .prompts import PromptItem

LATE_WARN_S = 0.010   # a send later than this after its time (slot free) is named in a warning
WARMUP_TOKENS = 32    # bench_serving: min(output_len, 32)
# Requests in flight at once without --max-concurrency: one thread each, so --request-rate inf
# --num-requests 100000 does not ask for 100 000 threads. Above SGLang's usual max running
# requests, so the server's own queue is full before this one holds anything.
MAX_IN_FLIGHT = 4096


@dataclass
class StreamRecord(RequestRecord):
    """A request with its send time and per-chunk arrival log (bounded by ``cap`` entries)."""

    cap: int = 0
    sent_at: float | None = None
    latency_s: float | None = None
    end_at: float | None = None
    truncated: bool = False
    times: array = field(default_factory=lambda: array("d"))
    cum: array = field(default_factory=lambda: array("q"))
    counted: bool = True  # every text chunk carried its cumulative usage

    def on_send(self, t_sent: float) -> None:
        self.sent_at = t_sent

    def on_line(self, now: float) -> None:
        self.latency_s = now

    def on_text(self, now: float, tokens: int | None) -> None:
        if len(self.times) >= self.cap:
            self.truncated = True
            return
        self.times.append(now)
        self.cum.append(tokens if tokens is not None else 0)
        if tokens is None:
            self.counted = False


@dataclass
class OpenLoopOptions:
    url: str
    rates: list[float]
    items: list[PromptItem]
    burstiness: float = 1.0
    num_requests: int | None = 100
    duration_s: float | None = None
    max_concurrency: int | None = None
    output_len: arrivals.Lengths | None = None  # None: the file's lengths, else max_tokens
    max_tokens: int = 1000
    ignore_eos: bool = False
    seed: int = 42
    order: str = "shuffle"
    slo: dict[str, float] | None = None
    warmup: int = 1
    flush_cache: bool = False   # after each rate's warm-up (bench_serving --flush-cache)
    api: str = "chat"           # or "generate" (bench.request_body)
    timeout_s: float = 600.0
    label: str | None = None
    model: str | None = None
    prompts_file: str | None = None


@dataclass
class Planned:
    index: int
    at_s: float
    prompt_index: int
    output_len: int


def check(opts: OpenLoopOptions) -> None:
    """Everything checkable before a request is sent (UserError exit 2)."""
    if not opts.rates:
        raise UserError("--request-rate: give at least one rate", exit_code=2)
    arrivals.check_burstiness(opts.burstiness)
    arrivals.check_seed(opts.seed)
    if opts.duration_s is not None:
        if not 0 < opts.duration_s <= 1e6:  # NaN fails too
            raise UserError(f"--duration {opts.duration_s:g}: seconds, more than 0 and at most 1e6", 2)
        for r in opts.rates:
            if r * opts.duration_s > arrivals.MAX_REQUESTS:  # inf too
                raise UserError(f"--duration {opts.duration_s:g} at {r:g}/s: more than "
                                f"{arrivals.MAX_REQUESTS} requests (rate inf needs --num-requests)", 2)
    elif not (opts.num_requests and 1 <= opts.num_requests <= arrivals.MAX_REQUESTS):
        raise UserError(f"--num-requests: 1 to {arrivals.MAX_REQUESTS}", exit_code=2)
    else:
        for r in opts.rates:
            arrivals.check_span(r, opts.num_requests)
    if opts.max_concurrency is not None and not 1 <= opts.max_concurrency <= 100_000:
        raise UserError("--max-concurrency: a whole number >= 1", exit_code=2)
    if not 1 <= opts.max_tokens <= 1_000_000 or not 0 <= opts.warmup <= 1000:
        raise UserError("--max-tokens must be >= 1 and --warmup from 0 to 1000", exit_code=2)
    if not 0 < opts.timeout_s <= httpio.MAX_TIMEOUT_S:
        raise UserError(f"--timeout {opts.timeout_s}: give seconds, more than 0 and at most "
                        f"{httpio.MAX_TIMEOUT_S:g}", exit_code=2)
    if opts.order not in ("shuffle", "file"):
        raise UserError("--order: shuffle or file", exit_code=2)
    if not opts.items:
        raise UserError("no prompts given", exit_code=2)
    if opts.output_len is not None and opts.output_len.kind == "file":
        missing = sum(1 for it in opts.items if it.output_len is None)
        if missing:
            raise UserError(f"--output-len file: {missing} of {len(opts.items)} prompts carry no "
                            "output_len / max_tokens", exit_code=2)


def plan(opts: OpenLoopOptions, rate: float) -> list[Planned]:
    times = arrivals.arrival_times(rate, opts.burstiness, opts.seed, count=None if opts.duration_s
                                   else opts.num_requests, duration_s=opts.duration_s)
    order = arrivals.request_order(len(opts.items), len(times), opts.seed, opts.order)
    dist = opts.output_len
    if dist is None and all(it.output_len is not None for it in opts.items):
        dist = arrivals.Lengths("file")
    rng = arrivals.length_stream(opts.seed, "output-len")
    out = []
    for i, (t, p) in enumerate(zip(times, order, strict=True)):
        if dist is None:
            n = opts.max_tokens
        elif dist.kind == "file":
            n = int(opts.items[p].output_len or opts.max_tokens)
        else:
            n = dist.draw(rng, 1, opts.max_tokens)
        out.append(Planned(i, t, p, n))
    return out


def _body(opts: OpenLoopOptions, item: PromptItem, model: str, max_tokens: int) -> dict[str, Any]:
    bo = BenchOptions(url=opts.url, max_tokens=max_tokens, ignore_eos=opts.ignore_eos, api=opts.api)
    return request_body(bo, item.prompt, model)


def _warmup(ep: Endpoint, opts: OpenLoopOptions, model: str, first: Planned, rate: float) -> None:
    if not opts.warmup:
        return
    n = min(first.output_len, WARMUP_TOKENS)
    body = _body(opts, opts.items[first.prompt_index], model, n)
    recs = [RequestRecord(prompt_index=first.prompt_index) for _ in range(opts.warmup)]
    _stream_all(ep, [body] * len(recs), recs)
    if all(r.error for r in recs):
        raise UserError(f"warm-up before rate {rate:g}/s failed: {recs[0].error}")


def _worker(ep: Endpoint, body: dict[str, Any], rec: StreamRecord,
            slots: threading.Semaphore | None) -> None:
    try:
        _guarded(ep, body, rec)
    finally:
        rec.end_at = time.perf_counter()
        if slots is not None:
            slots.release()


def _sleep_until(t: float) -> None:
    while (left := t - time.perf_counter()) > 0:
        time.sleep(min(left, 0.25))


def run_rate(ep: Endpoint, opts: OpenLoopOptions, model: str, rate: float,
             progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """One rate: warm-up, the schedule, every answer; the rate's document entry."""
    planned = plan(opts, rate)
    _warmup(ep, opts, model, planned[0], rate)
    if opts.flush_cache:  # a replayed file would otherwise prefill from an earlier run's prefixes
        flush_cache(ep)
    bodies = [_body(opts, opts.items[p.prompt_index], model, p.output_len) for p in planned]
    recs = [StreamRecord(prompt_index=p.prompt_index, cap=p.output_len + 1) for p in planned]
    ready: list[float] = [0.0] * len(planned)
    queued: list[float] = [0.0] * len(planned)
    slots = threading.BoundedSemaphore(opts.max_concurrency) if opts.max_concurrency else None
    threads: list[threading.Thread] = []
    live: list[threading.Thread] = []  # started and maybe still running (stopping.start_thread)
    held = 0
    before = scrape(ep)
    epoch0 = time.time()
    t0 = time.perf_counter()
    try:
        for k, p in enumerate(planned):
            due = t0 + p.at_s
            _sleep_until(due)
            ready[k] = due  # when the request could go: its time, or later the slot it waited for
            if slots is not None and not slots.acquire(blocking=False):
                while not slots.acquire(timeout=0.1):
                    pass
                ready[k] = max(due, time.perf_counter())
            th = threading.Thread(target=_worker, args=(ep, bodies[k], recs[k], slots), daemon=True)
            waited = False
            if len(live) >= MAX_IN_FLIGHT:  # the client's own bound: wait for the oldest to end
                live[:] = [t for t in live if t.is_alive()]
                while len(live) >= MAX_IN_FLIGHT:
                    waited = True
                    live[0].join(0.05)
                    live[:] = [t for t in live if t.is_alive()]
            tries = stopping.start_thread(th, live)
            if tries < 0:  # a thread limit with nothing left to wait for
                recs[k].error = stopping.NO_THREAD
                recs[k].end_at = time.perf_counter()
                if slots is not None:
                    slots.release()
            else:
                threads.append(th)
            held += waited or tries > 0
            queued[k] = ready[k] - due
            if progress:
                progress(k + 1, len(planned))
        for th in threads:
            while th.is_alive():
                th.join(0.1)
    except KeyboardInterrupt:
        ep.abort()
        raise
    t_end = max((r.end_at for r in recs if r.end_at is not None), default=time.perf_counter())
    duration = max(t_end - t0, 1e-9)
    reqs = [_request_entry(p, r, t0, ready[k], queued[k], opts) for k, (p, r) in enumerate(zip(planned, recs, strict=True))]
    ok = [r for r in recs if r.error is None]
    acc = accept_of(ep, before, ok, sum(r.completion_tokens for r in ok), f"rate {rate:g}/s",
                    per_request_source(opts.api))
    summary = serving_stats.summarize_rate(reqs, recs, duration, opts.slo)
    summary.update({"request_rate": rate_json(rate), "burstiness": opts.burstiness, **{
        k: acc[k] for k in ("accept_length", "accept_source", "verify_ct", "metrics_clean")}})
    summary["accept_length"] = round(acc["accept_length"], 4) if acc["accept_length"] else None
    # the same verifies without each request's first token (made by its prefill, not a verify):
    # what the probes count per verify (profile --bench compares it)
    v = acc["verify_ct"]
    summary["accept_length_decode"] = (round((acc["accept_length"] * v - summary["completed"]) / v, 4)
                                       if v and acc["accept_length"] else None)
    sched = _schedule(planned, reqs, duration)
    warnings = [w for w in (acc["warning"],) if w]
    if sched["late_sends"] and rate != float("inf"):  # inf has no times to keep: as fast as it can
        warnings.append(f"rate {rate:g}/s: {sched['late_sends']} of {len(reqs)} requests were sent more "
                        f"than {LATE_WARN_S * 1000:g} ms after their time (max {sched['late_max_ms']:.1f} ms): "
                        "the client did not keep the schedule; the figures are of the load it sent")
    if held:
        warnings.append(f"rate {rate:g}/s: {held} request(s) waited for the client to start them (at most "
                        f"{MAX_IN_FLIGHT} in flight, or the process's thread limit): their late_ms says how long")
    unsent = sum(1 for r in recs if r.error == stopping.NO_THREAD)
    if unsent:
        warnings.append(f"rate {rate:g}/s: {unsent} request(s) {stopping.NO_THREAD}")
    truncated = sum(1 for r in recs if r.truncated)
    if truncated:
        warnings.append(f"rate {rate:g}/s: {truncated} stream(s) sent more text chunks than tokens asked; "
                        "their ITL figures cover the first max_tokens + 1 chunks")
    errors = [r.error for r in recs if r.error]
    return {"request_rate": rate_json(rate), "summary": summary, "schedule": sched,
            "span": [round(epoch0, 3), round(epoch0 + duration, 3)],
            "errors": errors[:20], "warnings": warnings, "requests": reqs}


def rate_json(rate: float) -> float | str:
    return "inf" if rate == float("inf") else rate


def _ms(v: float | None) -> float | None:
    return round(v * 1000.0, 3) if v is not None else None


def _request_entry(p: Planned, r: StreamRecord, t0: float, ready: float, queued: float,
                   opts: OpenLoopOptions) -> dict[str, Any]:
    sent = (r.sent_at - t0) if r.sent_at is not None else None
    late = max(0.0, r.sent_at - ready) if r.sent_at is not None else None
    e: dict[str, Any] = {"i": p.index, "prompt_index": p.prompt_index, "output_len": p.output_len,
                         "at_ms": _ms(p.at_s), "sent_ms": _ms(sent), "late_ms": _ms(late),
                         "queued_ms": _ms(queued), "error": r.error}
    if r.error is None and r.ttft_s is not None and r.latency_s is not None:
        tp = serving_stats.tpot_s(r.latency_s, r.ttft_s, r.completion_tokens)
        itl_max = max((v for v, _ in serving_stats.iter_itls(r.times, r.cum if r.counted else None)),
                      default=None)
        e.update({"ttft_ms": _ms(r.ttft_s), "e2e_ms": _ms(r.latency_s), "tpot_ms": _ms(tp),
                  "itl_max_ms": _ms(itl_max), "tokens": r.completion_tokens,
                  "prompt_tokens": r.prompt_tokens, "first_chunk_tokens": r.first_chunk_tokens,
                  "decode_ms": _ms(r.last_token_s - r.ttft_s) if r.last_token_s is not None else None,
                  "chunks": r.content_chunks, "verify_ct": r.spec_verify_ct,
                  "accept_length": round(r.completion_tokens / r.spec_verify_ct, 4) if r.spec_verify_ct else None,
                  "finish_reason": r.finish_reason})
        if opts.slo:
            obs = serving_stats.observed_ms(r.ttft_s, r.latency_s, r.completion_tokens, itl_max)
            e["met"] = serving_stats.meets(obs, opts.slo)
            e["good"] = all(e["met"].values())
    meta = opts.items[p.prompt_index].meta
    if meta:
        e["meta"] = meta
    return e


def _schedule(planned: list[Planned], reqs: list[dict[str, Any]], duration: float) -> dict[str, Any]:
    late = [e["late_ms"] for e in reqs if e["late_ms"] is not None]
    q = [e["queued_ms"] for e in reqs if e["queued_ms"] is not None]
    span = planned[-1].at_s if planned else 0.0
    return {"late_max_ms": max(late, default=None), "late_p99_ms": _round(serving_stats.plain_percentile(late, 99)),
            "late_sends": sum(1 for v in late if v > LATE_WARN_S * 1000.0),
            "queued_max_ms": max(q, default=None),
            "offered_rate": round((len(planned) - 1) / span, 4) if span > 0 else None,
            "last_arrival_s": round(span, 4)}


def run_open_loop(opts: OpenLoopOptions, progress: Callable[[int, int, int], None] | None = None
                  ) -> dict[str, Any]:
    """Every rate in the order given against one server; the eagle3_serving/1 document.

    A rate that cannot run (its warm-up failed, /flush_cache refused) or an interrupt (Ctrl-C,
    SIGTERM, SIGHUP: stopping.Interrupted) after at least one finished rate ends the run there:
    the finished rates are kept and ``stopped`` says where and why (the rate cut short is left
    out: its figures would describe a part of its schedule). With nothing finished it raises."""
    from ..documents.serving_doc import DEFINITIONS, SCHEMA

    check(opts)
    ep = Endpoint(opts.url, opts.timeout_s)
    model = probe_model(ep, opts.model)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    rates: list[dict[str, Any]] = []
    stopped: dict[str, Any] | None = None
    for i, rate in enumerate(opts.rates):
        cb = (lambda k, n, i=i: progress(i, k, n)) if progress else None
        try:
            entry = run_rate(ep, opts, model, rate, cb)
        except (UserError, KeyboardInterrupt) as exc:
            if not rates:
                raise
            stopped = stopping.stop_record(exc, f"rate {rate:g}/s")
            stopped["at_rate"] = rate_json(rate)
            break
        rates.append(entry)
        if not entry["summary"]["completed"] and i + 1 < len(opts.rates):
            entry["warnings"].append(f"every request at {rate:g}/s failed: the rates after it were not run")
            break
    return {
        "schema": SCHEMA, "label": opts.label or opts.url, "url": opts.url, "model": model,
        "started": started, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "params": {"request_rates": [rate_json(r) for r in opts.rates], "burstiness": opts.burstiness,
                   "num_requests": None if opts.duration_s else opts.num_requests,
                   "duration_s": opts.duration_s, "max_concurrency": opts.max_concurrency,
                   "output_len": opts.output_len.text() if opts.output_len else None,
                   "max_tokens": opts.max_tokens, "ignore_eos": opts.ignore_eos, "temperature": 0,
                   "seed": opts.seed, "order": opts.order, "slo_ms": opts.slo, "warmup": opts.warmup,
                   "flush_cache": opts.flush_cache, "api": opts.api,
                   "timeout_s": opts.timeout_s, "prompt_count": len(opts.items),
                   "prompts_file": opts.prompts_file},
        "definitions": DEFINITIONS,
        "rates": rates,
        **({"stopped": stopped} if stopped else {}),
    }


def _round(v: float | None) -> float | None:
    return round(v, 3) if v is not None else None
