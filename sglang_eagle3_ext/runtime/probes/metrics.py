"""Phase metrics on SGLang's own ``/metrics`` (``EAGLE3_PROFILE_METRICS=1``; docs/guide/metrics.md).

SGLang started with ``--enable-metrics`` sets ``PROMETHEUS_MULTIPROC_DIR`` before it spawns its
processes, and its ``/metrics`` route reads every process's prometheus_client files through a
``MultiProcessCollector`` (SGLang 0.5.16 and 0.5.23 ``srt/utils/common.py``
``set_prometheus_multiproc_dir`` / ``add_prometheus_middleware``). Metrics a scheduler process
creates with prometheus_client therefore appear on that endpoint beside SGLang's own, with no
route of ours. We register nothing in a registry (``registry=None``): the multiprocess files are
what SGLang reads, and a second load can never collide with a name already registered.

One window record (``eagle3_prof/1`` or ``/2``) -> ``publish(record)``: called by the profiler
once per written window. Histograms are observed once per window with that window's mean
(per-cycle values are not in the record), counters add the window's cycles / tokens / time, and
gauges hold the latest window's figures. Runs inside SGLang: standard library at module level,
prometheus_client imported only when switched on, every error caught and warned about once.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from .. import settings as env  # stdlib only: the one declaration of every variable
from .window import ALL_PHASES

ENV = env.PROFILE_METRICS.name
ENV_BASELINE = env.PROFILE_BASELINE_TPS.name
PREFIX = "sglang:eagle3_"
PHASES = ALL_PHASES  # draft, verify, extend, other, cycle (probes/window.py)
BASE_LABELS = ("model_name", "tp_rank", "pp_rank")
# seconds: a cycle is 0.1 ms (tiny model) to ~1 s (a huge MoE at large batch)
SECONDS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025,
                   0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)


def settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``on`` needs both EAGLE3_PROFILE and EAGLE3_PROFILE_METRICS; a bad baseline warns, is ignored
    (read through ``sglang_eagle3_ext.runtime.settings``)."""
    on = bool(env.PROFILE.get(environ)) and bool(env.PROFILE_METRICS.get(environ))
    baseline, problem = env.PROFILE_BASELINE_TPS.read(environ)
    if problem and on:
        _warn(f"{problem} (no break-even margin)")
    return {"on": on, "baseline_tps": baseline}


def batch_bucket(bs: int) -> str:
    """Batch size -> label value: "1", "2", "3-4", "5-8", ... (power-of-two ranges bound the series)."""
    if bs <= 2:
        return str(max(bs, 1))
    hi = 1 << (bs - 1).bit_length()
    return f"{hi // 2 + 1}-{hi}"


# ------------------------------------------------------------------------------------------------
# module state: read once at import; reset() re-reads (tests)

_S: dict[str, Any] = {}
_M: Any = None  # the _Metrics once created
_failed = False  # could not start (no multiprocess dir, no prometheus_client): stay quiet
_warned: set[str] = set()
_lock = threading.Lock()


def _warn(msg: str) -> None:
    if msg in _warned:
        return
    _warned.add(msg)
    sys.stderr.write(f"EAGLE3_PROF warning: {msg}\n")
    sys.stderr.flush()


def reset(environ: Mapping[str, str] | None = None) -> None:
    """Forget the metric objects and re-read the environment (tests)."""
    global _S, _M, _failed
    _S = settings(environ)
    _M = None
    _failed = False
    _warned.clear()


def enabled() -> bool:
    return bool(_S.get("on"))


def register_families(labels: Mapping[str, Any] | None = None) -> bool:
    """Create every metric family now, with zero / NaN samples, so /metrics lists them from the
    start (the plugin calls this at load in each scheduler process). True when metrics are live."""
    if not _S.get("on"):
        return False
    try:
        return _get(labels) is not None
    except Exception as exc:  # noqa: BLE001 - never raise into SGLang
        _warn(f"phase metrics off: {exc!r}")
        return False


def publish(record: Mapping[str, Any]) -> None:
    """Publish one window record. Costs one dict lookup when metrics are off; never raises."""
    if not _S.get("on"):
        return
    try:
        m = _get(None, record)
        if m is not None:
            with _lock:
                m.publish(record)
    except Exception as exc:  # noqa: BLE001 - never raise into SGLang
        _warn(f"phase metrics not published: {exc!r}")


def _get(labels: Mapping[str, Any] | None, record: Mapping[str, Any] | None = None) -> Any:
    global _M, _failed
    if _M is not None or _failed:
        return _M
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        _failed = True
        _warn(f"{ENV}=1 but PROMETHEUS_MULTIPROC_DIR is not set (start SGLang with "
              "--enable-metrics): phase metrics off")
        return None
    try:
        import prometheus_client
    except ImportError:
        _failed = True
        _warn(f"{ENV}=1 but prometheus_client is not installed: phase metrics off")
        return None
    base = dict(labels) if labels else scheduler_labels()
    if record is not None and base.get("tp_rank") in (None, ""):
        base["tp_rank"] = record.get("rank", 0)
    _M = _Metrics(prometheus_client, {k: str(base.get(k, "")) for k in BASE_LABELS},
                  _S.get("baseline_tps"))
    return _M


def scheduler_labels() -> dict[str, Any]:
    """model_name / tp_rank / pp_rank as SGLang labels its own series: read from the arguments of
    ``run_scheduler_process`` (every pinned plugin release, 0.5.12.post1-0.5.23: ``server_args``, ``tp_rank``, ``pp_rank``) on this
    thread's stack, else the main thread's; falls back to RANK and an empty model name."""
    frames = [sys._getframe(1)]
    main = sys._current_frames().get(threading.main_thread().ident or -1)
    if main is not None:
        frames.append(main)
    for f in frames:
        while f is not None:
            if f.f_code.co_name == "run_scheduler_process":
                loc = f.f_locals
                sa = loc.get("server_args")
                name = getattr(sa, "served_model_name", None) or getattr(sa, "model_path", None) or ""
                return {"model_name": name, "tp_rank": loc.get("tp_rank", 0), "pp_rank": loc.get("pp_rank", 0)}
            f = f.f_back
    return {"model_name": "", "tp_rank": os.environ.get("RANK", ""), "pp_rank": 0}


# ------------------------------------------------------------------------------------------------
# the figures of one record, v2 (steady / boundary / by_batch) or v1 (all cycles only)

def _phase_means(section: Mapping[str, Any]) -> dict[str, float]:
    ph = section.get("phases") or {}
    return {p: float(ph[p]["mean_ms"]) for p in PHASES if isinstance(ph.get(p), Mapping)
            and ph[p].get("mean_ms") is not None}


def _merge_batches(by_batch: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """by_batch entries grouped into label buckets, cycle-weighted (means) and summed (counts)."""
    out: dict[str, dict[str, Any]] = {}
    for key, e in by_batch.items():
        try:
            bs = int(key)
        except (TypeError, ValueError):
            continue
        c = int(e.get("cycles") or 0)
        if c <= 0:
            continue
        b = out.setdefault(batch_bucket(bs), {"cycles": 0, "requests": 0, "tokens": 0, "ms": {}})
        b["cycles"] += c
        b["requests"] += int(e.get("requests") or 0)
        b["tokens"] += int(e.get("tokens") or 0)
        for p, ms in _phase_means(e).items():
            b["ms"][p] = b["ms"].get(p, 0.0) + ms * c
    for b in out.values():
        b["ms"] = {p: v / b["cycles"] for p, v in b["ms"].items()}
    return out


class _Metrics:
    def __init__(self, prom: Any, base: dict[str, str], baseline_tps: float | None) -> None:
        self.base = base
        self.baseline = baseline_tps
        n = list(BASE_LABELS)

        def hist(name: str, doc: str, extra: tuple[str, ...]) -> Any:
            return prom.Histogram(PREFIX + name, doc, labelnames=[*n, *extra], buckets=SECONDS_BUCKETS,
                                  registry=None)

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Any:
            return prom.Counter(PREFIX + name, doc, labelnames=[*n, *extra], registry=None)

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Any:
            return prom.Gauge(PREFIX + name, doc, labelnames=[*n, *extra], registry=None,
                              multiprocess_mode="mostrecent")

        sel = ("cycles", "batch_size")
        self.phase = hist("phase_seconds", "EAGLE-3 decode cycle phase time (draft, verify, extend = "
                          "draft re-extend, other, cycle = whole cycle); one observation per probe "
                          "window = that window's mean over the selected cycles", ("phase", *sel))
        self.boundary = hist("boundary_cycle_extra_seconds", "Extra time of a boundary cycle (request "
                             "join/leave, prefill/extend, batch change, idle gap) over the steady "
                             "p50 cycle; one observation per window = its mean per boundary cycle", ())
        self.cycles = counter("cycles", "EAGLE-3 decode cycles profiled", ("cycles",))
        self.tokens = counter("tokens", "Tokens emitted by profiled cycles (accepted drafts + bonus)",
                              ("cycles",))
        self.cycle_time = counter("cycle_seconds", "Time spent in profiled cycles", ("cycles",))
        self.boundary_extra = counter("boundary_extra_seconds", "Sum of boundary cycles' extra time "
                                      "over the steady p50 cycle (the per-request cost)")
        self.reasons = counter("boundary_reasons", "Boundary cycles by reason (a cycle may have "
                               "several)", ("reason",))
        self.accept = gauge("accept_length", "Accept length of the latest window (tokens per request "
                            "per verify, incl. the bonus token)", sel)
        self.tpc = gauge("tokens_per_cycle", "Tokens per decode cycle, all requests of the batch, "
                         "latest window", sel)
        self.stream = gauge("stream_tokens_per_second", "Per-stream decode rate of the latest window: "
                            "accept_length / mean cycle time", sel)
        self.throughput = gauge("gen_throughput", "Decode throughput of the latest window: tokens / "
                                "time in cycles (tok/s)", sel)
        self.needed = gauge("break_even_accept_length", "Accept length at which speculation matches "
                            f"the baseline ({ENV_BASELINE}): mean cycle s x baseline tok/s")
        self.margin = gauge("break_even_margin", "accept_length - break_even_accept_length (tokens "
                            "per verify; > 0: speculation beats the baseline per stream)")
        self.speedup = gauge("speedup_vs_baseline", "stream_tokens_per_second / baseline tok/s")
        self.baseline_g = gauge("baseline_tokens_per_second", f"The configured {ENV_BASELINE}")
        self.info = gauge("probe_info", "1 for the timing mode, route and speculative config of the "
                          "latest window", ("mode", "route", "sglang_version", "steps", "topk",
                                            "draft_tokens", "schema"))
        # the throughput policy (issue 25): beside SGLang's own sglang:spec_num_steps (the active
        # step count), what the policy chose per batch size and what it expected of it
        self.pol_cycles = counter("policy_cycles", "Decode cycles the throughput policy ran per batch size "
                                  "and step count (exploration cycles included)", ("batch_size", "steps"))
        self.pol_steps = gauge("policy_steps", "Step count the throughput policy ran most at this batch "
                               "size in the latest window", ("batch_size",))
        self.pol_expected = gauge("policy_expected_stream_tokens_per_second", "Per-stream tok/s the "
                                  "policy expected of its choice (online acceptance / scan cycle ms), "
                                  "latest window", ("batch_size", "steps"))
        self._zero()

    def _l(self, **extra: str) -> dict[str, str]:
        return {**self.base, **extra}

    def _zero(self) -> None:
        """Every family gets a child now: 0 counts, NaN gauges (nothing measured yet)."""
        nan = float("nan")
        for cyc in ("steady", "all"):
            for p in PHASES:
                self.phase.labels(**self._l(phase=p, cycles=cyc, batch_size="all"))
            for g in (self.accept, self.tpc, self.stream, self.throughput):
                g.labels(**self._l(cycles=cyc, batch_size="all")).set(nan)
        self.boundary.labels(**self.base)
        for cyc in ("steady", "boundary", "all"):
            for c in (self.cycles, self.tokens, self.cycle_time):
                c.labels(**self._l(cycles=cyc))
        self.boundary_extra.labels(**self.base)
        for g in (self.needed, self.margin, self.speedup):
            g.labels(**self.base).set(nan)
        self.baseline_g.labels(**self.base).set(self.baseline if self.baseline else nan)

    def _section(self, cyc: str, bs: str, cycles: int, requests: int, tokens: int,
                 ms: Mapping[str, float]) -> None:
        sel = self._l(cycles=cyc, batch_size=bs)
        for p, v in ms.items():
            self.phase.labels(**self._l(phase=p, cycles=cyc, batch_size=bs)).observe(v / 1000.0)
        cyc_ms = ms.get("cycle")
        al = tokens / requests if requests else None
        if al is not None:
            self.accept.labels(**sel).set(al)
        if cycles:
            self.tpc.labels(**sel).set(tokens / cycles)
        if cyc_ms and cyc_ms > 0:
            if al is not None:
                self.stream.labels(**sel).set(al * 1000.0 / cyc_ms)
            self.throughput.labels(**sel).set(tokens * 1000.0 / (cyc_ms * cycles) if cycles else 0.0)

    def _count(self, cyc: str, cycles: int, tokens: int, ms: Mapping[str, float]) -> None:
        if cycles <= 0:
            return
        self.cycles.labels(**self._l(cycles=cyc)).inc(cycles)
        if tokens:
            self.tokens.labels(**self._l(cycles=cyc)).inc(tokens)
        if ms.get("cycle"):
            self.cycle_time.labels(**self._l(cycles=cyc)).inc(ms["cycle"] * cycles / 1000.0)

    def _policy(self, control: Any) -> None:
        """The policy's choices of one window, grouped into the batch-size label buckets."""
        pol = control.get("policy") if isinstance(control, Mapping) else None
        if not isinstance(pol, Mapping):
            return
        expected = pol.get("expected_per_stream_tok_s") or {}
        buckets: dict[str, dict[str, list[float]]] = {}   # bucket -> steps -> [cycles, expected x cycles, cycles with one]
        for bs, by in (pol.get("chosen") or {}).items():
            for s, n in (by or {}).items():
                b = buckets.setdefault(batch_bucket(int(bs)), {}).setdefault(str(s), [0.0, 0.0, 0.0])
                b[0] += int(n)
                e = (expected.get(bs) or {}).get(s)
                if e is not None:
                    b[1] += float(e) * int(n)
                    b[2] += int(n)
        for bucket, by in buckets.items():
            for s, (n, esum, en) in by.items():
                if n:
                    self.pol_cycles.labels(**self._l(batch_size=bucket, steps=s)).inc(n)
                if en:
                    self.pol_expected.labels(**self._l(batch_size=bucket, steps=s)).set(esum / en)
            top = max(by, key=lambda k: (by[k][0], -int(k)))
            self.pol_steps.labels(**self._l(batch_size=bucket)).set(int(top))

    def publish(self, rec: Mapping[str, Any]) -> None:
        cycles = int(rec.get("cycles") or 0)
        if cycles <= 0:
            return
        tokens, requests = int(rec.get("tokens") or 0), int(rec.get("requests") or 0)
        all_ms = _phase_means(rec)
        self._section("all", "all", cycles, requests, tokens, all_ms)
        self._count("all", cycles, tokens, all_ms)
        # the verdict reads steady cycles (v2); a v1 record has no split: all cycles stand in
        verdict_ms, verdict_al = all_ms, (tokens / requests if requests else None)
        steady = rec.get("steady")
        if isinstance(steady, Mapping) and int(steady.get("cycles") or 0) > 0:
            sc, st, sr = int(steady["cycles"]), int(steady.get("tokens") or 0), int(steady.get("requests") or 0)
            verdict_ms = _phase_means(steady)
            verdict_al = st / sr if sr else None
            self._section("steady", "all", sc, sr, st, verdict_ms)
            self._count("steady", sc, st, verdict_ms)
            for bs, b in _merge_batches(rec.get("by_batch") or {}).items():
                self._section("steady", bs, b["cycles"], b["requests"], b["tokens"], b["ms"])
        boundary = rec.get("boundary")
        if isinstance(boundary, Mapping) and int(boundary.get("cycles") or 0) > 0:
            bc = int(boundary["cycles"])
            bms = _phase_means(boundary)
            for p, v in bms.items():
                self.phase.labels(**self._l(phase=p, cycles="boundary", batch_size="all")).observe(v / 1000.0)
            self._count("boundary", bc, 0, bms)
            extra = float(boundary.get("extra_ms") or 0.0)
            self.boundary.labels(**self.base).observe(extra / bc / 1000.0)
            if extra > 0:
                self.boundary_extra.labels(**self.base).inc(extra / 1000.0)
            for reason, n in (boundary.get("reasons") or {}).items():
                if n:
                    self.reasons.labels(**self._l(reason=str(reason))).inc(int(n))
        cyc_ms = verdict_ms.get("cycle")
        if self.baseline and cyc_ms and verdict_al is not None:
            needed = cyc_ms * self.baseline / 1000.0
            self.needed.labels(**self.base).set(needed)
            self.margin.labels(**self.base).set(verdict_al - needed)
            self.speedup.labels(**self.base).set(verdict_al * 1000.0 / cyc_ms / self.baseline)
        self._policy(rec.get("control"))
        sp = rec.get("spec") or {}
        self.info.labels(**self._l(
            mode=str(rec.get("mode") or ""), route=str(rec.get("route") or ""),
            sglang_version=str(rec.get("sglang_version") or ""),
            steps=str(sp.get("steps") if sp.get("steps") is not None else ""),
            topk=str(sp.get("topk") if sp.get("topk") is not None else ""),
            draft_tokens=str(sp.get("draft_tokens") if sp.get("draft_tokens") is not None else ""),
            schema=str(rec.get("schema") or ""))).set(1)


reset()
