"""The enabled-path state machine behind ``sglang_eagle3_ext.runtime.probes`` (imported only when on).

Cycle bookkeeping is kept flat (lists, no objects per boundary) because it runs in the
scheduler's hot loop: one backend mark per boundary and a list append per phase.
"""

from __future__ import annotations

import json
import os
import sys
from collections import deque
from collections.abc import Iterable
from time import perf_counter
from typing import Any

from . import metrics, timers
from .window import (
    CYCLE,
    EXTEND,
    IDLE,
    JOIN,
    PHASES,
    build_record,
    by_key,
    choices,
    classify_window,
    format_block,
    key_cycles,
    split_record,
)


def _rank_and_size() -> tuple[int, int]:
    """torch.distributed rank/world size when the host initialised it, else env RANK/WORLD_SIZE."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank()), int(dist.get_world_size())
        except Exception:  # noqa: BLE001 - fall through to the environment
            pass
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def _sglang_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def rank_path(out: str, rank: int) -> str:
    """Every TP rank writes its own stream: rank 0 to EAGLE3_PROFILE_OUT itself (the file every
    reader already knows), rank N > 0 to ``<out>.rank<N>`` beside it."""
    return out if not rank else f"{out}.rank{rank}"


class Profiler:
    def __init__(self, s: dict[str, Any], *, backend: Any = None, sink: Any = None,
                 trace: list | None = None) -> None:
        self.every: int = s["every"]
        self.mode_requested: str = s["mode"]
        self.out: str | None = s["out"]
        self.idle_s: float = s["idle_ms"] / 1000.0
        self.spec: dict[str, int | None] = dict(s["spec"])
        self.route: str | None = s["route"]
        self.trace = trace
        self.sink = sink
        self._backend = backend
        self._notes: list[str] = []
        self.window = 0
        # closed cycles: (begin, end, idle, phase marks, boundary bits, requests, accepted drafts, tag)
        self._cycles: list[tuple[Any, Any, bool, list, int, int, int, list]] = []
        # the open cycle's tag (window.T_* fields) and the tags still waiting for their accept
        # counts, oldest first (overlap scheduler: a cycle's counts arrive during the next one)
        self._tag: list[Any] = []
        self._await: deque[list[Any]] = deque(maxlen=8)
        self._mismatch = 0  # accept lists whose length matched no waiting cycle's batch size
        self._prev_steps: tuple[Any, ...] | None = None  # state of the last cycle written (switch detection)
        # the open cycle, as plain attributes (fastest to set in the hot loop)
        self._open = False
        self._cb: Any = None  # begin mark
        self._ct = 0.0  # begin host time
        self._ce: Any = None  # cycle_end mark
        self._cet: float | None = None  # cycle_end host time
        self._ph: list[tuple[str, bool, Any]] = []  # (phase, is_begin, mark)
        self._mark: Any = None  # backend.mark, bound once the backend is chosen
        self._on_cycle: Any = None  # backend.begin_cycle when it has one
        self._host_marks = False  # True when marks are host perf_counter values (wall)
        self._hist: dict[int, int] = {}
        # per open cycle: boundary bits set live, and what record_accept counted during it
        self._why = 0
        self._next_why = 0  # bits the next cycle starts with (JOIN after a prefill, IDLE after a gap)
        self._nreq = 0
        self._nacc = 0
        self._joins = 0  # non-decode forwards in the current window
        self._last_bs: int | None = None  # batch size of the last cycle written (classification)
        # a closed window waiting for the GPU to pass its newest mark: (window, cycles, hist, newest)
        self._pending: tuple[int, list, dict[int, int], Any] | None = None
        self._defer: bool = s.get("defer", True)
        self._rank: tuple[int, int] | None = None
        self._version: str | None | bool = False  # False = not looked up yet

    # -- backend ---------------------------------------------------------------------------
    @property
    def backend(self) -> Any:
        b = self._backend
        if b is None:
            b, warning = timers.make_backend(self.mode_requested)
            if warning:
                self._notes.append(warning)
                sys.stderr.write(f"EAGLE3_PROF warning: {warning}\n")
            self._backend = b
        return b

    @property
    def mode(self) -> str:
        return self.backend.name

    # -- hot path ----------------------------------------------------------------------------
    def cycle_begin(self) -> None:
        mark = self._mark
        if mark is None:
            b = self.backend
            mark = self._mark = b.mark
            self._on_cycle = getattr(b, "begin_cycle", None)
            self._host_marks = type(b) is timers.WallTimer  # marks are perf_counter already
        if self._on_cycle is not None:
            self._on_cycle()
        h = mark()
        t = h if self._host_marks else perf_counter()
        if self._open:
            # the previous cycle ends here, unless the scheduler went idle (or ran prefills)
            # after its cycle_end: then it ends at that cycle_end.
            cet = self._cet
            if cet is not None and t - cet > self.idle_s:
                self._cycles.append((self._cb, self._ce, True, self._ph, self._why | IDLE,
                                     self._nreq, self._nacc, self._tag))
                self._next_why |= IDLE
            else:
                self._cycles.append((self._cb, h, False, self._ph, self._why, self._nreq, self._nacc,
                                     self._tag))
            restart = True
            if len(self._cycles) >= self.every:
                self._close_window(newest=h)
            elif self._pending is not None and self._backend.ready(self._pending[3]):
                self._read_pending()
            else:
                restart = False  # the common case: this mark opens the next cycle
            if restart:
                # a window was closed or read: restart the cycle so that host time is billed to
                # no cycle (and, after a pool swap, so the new cycle's mark lives in the new pool)
                h = mark()
                t = h if self._host_marks else perf_counter()
        self._open = True
        self._cb = h
        self._ct = t
        self._ce = self._cet = None
        self._ph = []
        self._why = self._next_why
        self._next_why = self._nreq = self._nacc = 0
        sp = self.spec
        tag = self._tag = [sp["steps"], sp["topk"], sp["draft_tokens"], None, None, -1, 0, 0, None, False]
        self._await.append(tag)

    def mark_boundary(self, reason: str) -> None:
        """A non-decode forward (prefill / draft extend) runs now: it lands in the open cycle's
        "other", and the next decode cycle is the first one of the request(s) it admitted."""
        if self._open:
            self._why |= EXTEND
        self._next_why |= JOIN
        self._joins += 1

    def phase_begin(self, name: str) -> None:
        if self._open:  # outside a decode cycle (e.g. a prefill path) is not ours to time
            self._ph.append((name, True, self._mark()))

    def phase_end(self, name: str) -> None:
        if self._open:
            self._ph.append((name, False, self._mark()))

    def cycle_end(self) -> None:
        if self._open:
            h = self._ce = self._mark()
            self._cet = h if self._host_marks else perf_counter()

    def record_accept(self, per_req: Iterable[int], bonus_included: bool) -> None:
        hist = self._hist
        if not bonus_included and type(per_req) is list and len(per_req) == 1:  # the common case
            n = per_req[0]
            if type(n) is int and n >= 0:
                hist[n] = hist.get(n, 0) + 1
                self._nreq += 1
                self._nacc += n
                self._match(per_req, n)
                return
        if type(per_req) not in (list, tuple):
            tolist = getattr(per_req, "tolist", None)
            per_req = tolist() if tolist is not None else list(per_req)
        off = 1 if bonus_included else 0
        acc = 0
        counts = []
        for v in per_req:
            n = int(v) - off
            if n < 0:
                n = 0
            hist[n] = hist.get(n, 0) + 1
            acc += n
            counts.append(n)
        self._nreq += len(counts)
        self._nacc += acc
        self._match(counts, acc)

    def _match(self, counts: list[int], acc: int) -> None:
        """Give one verify's counts to the cycle that produced it: the oldest waiting cycle of that
        batch size (older ones of another size produced no verify, e.g. a retraction); untagged
        cycles (source patch) take their size from the counts."""
        q = self._await
        n = len(counts)
        if not q or not n:  # an empty verify (no request) produced by no cycle
            return
        skip = 0
        for t in q:
            bs = t[3]
            if bs is None or bs == n:
                break
            skip += 1
        else:
            skip = 0
            self._mismatch += 1
        for _ in range(skip):
            q.popleft()
        t = q.popleft()
        if t[3] is None:
            t[3] = n
        t[6] += n
        t[7] += acc
        t[8] = counts if t[8] is None else t[8] + counts

    def tag_cycle(self, steps: int | None, topk: int | None, draft_tokens: int | None,
                  batch_size: int | None, graph: bool | None, block: int) -> None:
        if self._open:
            t = self._tag
            if steps is not None:
                t[0] = steps
            if topk is not None:
                t[1] = topk
            if draft_tokens is not None:
                t[2] = draft_tokens
            if batch_size is not None:
                t[3] = batch_size
                t[9] = True  # the forward side's own size (window.T_EXACT)
            t[4] = graph
            t[5] = block

    def set_spec_config(self, steps: int | None, topk: int | None, draft_tokens: int | None,
                        route: str | None) -> None:
        for k, v in (("steps", steps), ("topk", topk), ("draft_tokens", draft_tokens)):
            if v is not None:
                self.spec[k] = int(v)
        if route is not None:  # both routes in one process (a partial source patch): both named
            parts = set((self.route or "").split("+")) - {""}
            self.route = route if not parts or parts == {route} else "+".join(sorted(parts | {route}))

    # -- windows -----------------------------------------------------------------------------
    def _resolve(self, cycles: list[tuple[Any, Any, bool, list, int, int, int]]
                 ) -> tuple[dict[str, list[float]], int]:
        b = self.backend
        el = b.elapsed_ms
        if isinstance(b, timers.WallTimer):  # float seconds: skip a method call per interval
            def el(s: float, e: float) -> float:
                return (e - s) * 1000.0
        per: dict[str, list[float]] = {name: [] for name in (*PHASES, CYCLE)}
        idle = 0
        p_draft, p_verify, p_extend = per["draft"], per["verify"], per["extend"]
        p_other, p_cycle = per["other"], per[CYCLE]
        opened: dict[str, Any] = {}
        for begin, end, was_idle, marks, _why, _nreq, _nacc, _tag in cycles:
            idle += was_idle
            total = el(begin, end)
            d = v = x = 0.0
            opened.clear()
            for name, is_begin, m in marks:
                if is_begin:
                    opened[name] = m
                    continue
                s = opened.pop(name, None)
                if s is None:  # an end without a begin is dropped
                    continue
                if name == "verify":
                    v += el(s, m)
                elif name == "draft":
                    d += el(s, m)
                elif name == "extend":
                    x += el(s, m)
            p_draft.append(d)
            p_verify.append(v)
            p_extend.append(x)
            p_other.append(max(0.0, total - d - v - x))
            p_cycle.append(total)
        return per, idle

    def _close_window(self, newest: Any, keep: Any = None, now: bool = False) -> dict[str, Any] | None:
        """End the window at ``newest``: read it now, or (events) once the GPU has passed it.

        Returns the record written now, if any. ``keep`` is a mark that belongs to a cycle still
        open (flush); ``now`` reads at once, waiting for the GPU (flush, interpreter exit).
        """
        cycles, self._cycles = self._cycles, []
        hist, self._hist = self._hist, {}
        joins, self._joins = self._joins, 0
        if self._rank is None:
            self._rank = _rank_and_size()
        b = self.backend
        self.window += 1
        rec = self._read_pending() if self._pending is not None else None
        if self._defer and b.deferred and not now:
            self._pending = (self.window, cycles, hist, newest, joins)
            b.swap()  # the next window records into the pool the previous window was read from
            return self._read_pending() if b.ready(newest) else rec
        t0 = perf_counter()
        b.wait(newest)
        rec = self._write(self.window, cycles, hist, (perf_counter() - t0) * 1000.0, joins)
        b.release(keep)  # every handle is read; the next cycle starts with a fresh mark
        return rec

    def _read_pending(self) -> dict[str, Any] | None:
        window, cycles, hist, newest, joins = self._pending
        self._pending = None
        t0 = perf_counter()
        self.backend.wait(newest)  # returns at once when ready() said so
        return self._write(window, cycles, hist, (perf_counter() - t0) * 1000.0, joins)

    def _write(self, window: int, cycles: list, hist: dict[int, int], wait_ms: float,
               joins: int = 0) -> dict[str, Any]:
        t0 = perf_counter()
        b = self.backend
        per, idle = self._resolve(cycles)
        tags = [c[7] for c in cycles]
        sizes, bits, nreq, nacc, self._last_bs = classify_window(
            [c[4] for c in cycles], [c[5] for c in cycles], [c[6] for c in cycles], tags,
            self._last_bs, self._prev_steps)
        if tags and tags[-1][0] is not None:
            self._prev_steps = tuple(tags[-1][:3])  # (steps, topk, draft tokens): a tree is another state
        split = split_record(per, sizes, bits, nreq, nacc, joins)
        split["by_key"] = by_key(per, bits, tags)
        split["key_cycles"] = key_cycles(bits, tags)
        split["control"] = self._control(tags)
        if self._version is False:
            self._version = _sglang_version()
        rank, size = self._rank
        rec = build_record(
            window=window, per_cycle=per, hist=hist, mode=b.name, spec=self.spec,
            route=self.route, sglang_version=self._version, rank=rank, tp_size=size,
            idle_cycles=idle, notes=self._notes, split=split,
        )
        if self.mode_requested not in ("auto", b.name):
            rec["mode_requested"] = self.mode_requested
        # the profiler's own cost per window, measured: host time blocked on the GPU before the
        # read (0 when read a window late), and reading + building the record
        rec["probe_wait_ms"] = round(wait_ms, 4)
        rec["probe_read_ms"] = round((perf_counter() - t0) * 1000.0, 4)
        from . import tree  # additive (issue 24): the tree probes' window, when they captured any

        tr = tree.window_field()
        if tr is not None:
            rec["tree"] = tr
        self._emit(rec)
        return rec

    def _control(self, tags: list) -> dict[str, Any]:
        """Which decider held the steps (stepctl, when the plugin installed one) and what ran at
        each batch size in this window."""
        sc = sys.modules.get("sglang_eagle3_ext.runtime.stepctl")
        head = sc.control() if sc is not None else {"decider": None, "block": None, "candidates": None}
        head["choices"] = choices(tags)
        if self._mismatch:
            head["unmatched_accepts"] = self._mismatch
        return head

    def _emit(self, rec: dict[str, Any]) -> None:
        """The one place a finished window record leaves the profiler: the block on stderr
        (rank 0 only: the TP ranks share one server log), a JSONL line in this rank's stream
        (``rank_path``), the in-process sink. (Publishers hook here.)"""
        rank = rec.get("rank", 0)
        if rank == 0:
            sys.stderr.write(format_block(rec) + "\n")
            sys.stderr.flush()
        if self.out:
            path = rank_path(self.out, rank)
            try:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            except OSError as exc:
                sys.stderr.write(f"EAGLE3_PROF warning: cannot append to {path}: {exc}\n")
        if self.sink is not None:
            self.sink.append(rec)
        metrics.publish(rec)  # EAGLE3_PROFILE_METRICS: Prometheus families on SGLang's /metrics

    def flush(self, min_cycles: int = 1) -> dict[str, Any] | None:
        """Close the open cycle at its cycle_end (if it had one) and emit what was collected."""
        if self._open and self._ce is not None:
            self._cycles.append((self._cb, self._ce, False, self._ph, self._why, self._nreq, self._nacc,
                                 self._tag))
            self._open = False
        rec = self._read_pending() if self._pending is not None else None
        if len(self._cycles) < min_cycles:
            return rec
        # a cycle still open (no cycle_end yet) keeps its start mark through the pool reset
        return self._close_window(newest=self._cycles[-1][1], keep=self._cb if self._open else None,
                                  now=True)


class TracingProfiler(Profiler):
    """Also appends every call to ``probes.trace`` (EAGLE3_PROFILE_TRACE=1; tests and demo)."""

    def cycle_begin(self) -> None:
        self.trace.append(("cycle_begin", None))
        super().cycle_begin()

    def phase_begin(self, name: str) -> None:
        self.trace.append(("phase_begin", name))
        super().phase_begin(name)

    def phase_end(self, name: str) -> None:
        self.trace.append(("phase_end", name))
        super().phase_end(name)

    def cycle_end(self) -> None:
        self.trace.append(("cycle_end", None))
        super().cycle_end()

    def mark_boundary(self, reason: str) -> None:
        self.trace.append(("mark_boundary", reason))
        super().mark_boundary(reason)

    def record_accept(self, per_req: Iterable[int], bonus_included: bool) -> None:
        tolist = getattr(per_req, "tolist", None)  # a tensor or a generator: trace plain ints
        per_req = tolist() if tolist is not None else list(per_req)
        self.trace.append(("record_accept", tuple(int(x) for x in per_req)))
        super().record_accept(per_req, bonus_included)

    def tag_cycle(self, steps: int | None, topk: int | None, draft_tokens: int | None,
                  batch_size: int | None, graph: bool | None, block: int) -> None:
        self.trace.append(("tag_cycle", (steps, topk, draft_tokens, batch_size, graph, block)))
        super().tag_cycle(steps, topk, draft_tokens, batch_size, graph, block)

    def set_spec_config(self, steps: int | None, topk: int | None, draft_tokens: int | None,
                        route: str | None) -> None:
        self.trace.append(("set_spec_config", (steps, topk, draft_tokens, route)))
        super().set_spec_config(steps, topk, draft_tokens, route)
