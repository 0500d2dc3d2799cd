"""The enabled-path state machine behind ``sglang_eagle3_ext.probes`` (imported only when on).

Cycle bookkeeping is kept flat (lists, no objects per boundary) because it runs in the
scheduler's hot loop: one backend mark per boundary and a list append per phase.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from time import perf_counter
from typing import Any

from . import timers
from .window import CYCLE, PHASES, build_record, format_block

# Cycle record layout (a list, indexed for speed).
_BEGIN, _BEGIN_T, _END, _END_T, _PH, _OPEN = range(6)


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


class Profiler:
    def __init__(self, s: dict[str, Any], *, backend: Any = None, sink: Any = None,
                 trace: list | None = None) -> None:
        self.every: int = s["every"]
        self.mode_requested: str = s["mode"]
        self.out: str | None = s["out"]
        self.idle_s: float = s["idle_ms"] / 1000.0
        self.spec: dict[str, int | None] = dict(s["spec"])
        self.route: str | None = s["route"]
        self.trace = trace if s["trace"] else None
        self.sink = sink
        self._backend = backend
        self._notes: list[str] = []
        self.window = 0
        self._cycles: list[list[Any]] = []  # closed cycles: [begin, end, idle, phases]
        self._cur: list[Any] | None = None
        self._hist: dict[int, int] = {}
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
        if self.trace is not None:
            self.trace.append(("cycle_begin", None))
        b = self.backend
        h = b.mark()
        t = perf_counter()
        cur = self._cur
        if cur is not None:
            # the previous cycle ends here, unless the scheduler went idle (or ran prefills)
            # after its cycle_end: then it ends at that cycle_end.
            end_t = cur[_END_T]
            if end_t is not None and t - end_t > self.idle_s:
                self._cycles.append([cur[_BEGIN], cur[_END], True, cur[_PH]])
            else:
                self._cycles.append([cur[_BEGIN], h, False, cur[_PH]])
            if len(self._cycles) >= self.every:
                self._emit(newest=h)
                # the window's read and write must not be billed to the next cycle: restart it
                h = b.mark()
                t = perf_counter()
        self._cur = [h, t, None, None, [], {}]

    def phase_begin(self, name: str) -> None:
        if self.trace is not None:
            self.trace.append(("phase_begin", name))
        cur = self._cur
        if cur is None:  # outside a decode cycle (e.g. a prefill path): not ours to time
            return
        cur[_OPEN][name] = self.backend.mark()

    def phase_end(self, name: str) -> None:
        if self.trace is not None:
            self.trace.append(("phase_end", name))
        cur = self._cur
        if cur is None:
            return
        start = cur[_OPEN].pop(name, None)
        if start is None:
            return
        cur[_PH].append((name, start, self.backend.mark()))

    def cycle_end(self) -> None:
        if self.trace is not None:
            self.trace.append(("cycle_end", None))
        cur = self._cur
        if cur is None:
            return
        cur[_END] = self.backend.mark()
        cur[_END_T] = perf_counter()

    def record_accept(self, per_req: Iterable[int], bonus_included: bool) -> None:
        tolist = getattr(per_req, "tolist", None)
        vals = tolist() if tolist is not None else per_req
        vals = tuple(int(x) for x in vals)
        if self.trace is not None:
            self.trace.append(("record_accept", vals))
        hist = self._hist
        off = 1 if bonus_included else 0
        for v in vals:
            n = v - off
            if n < 0:
                n = 0
            hist[n] = hist.get(n, 0) + 1

    def set_spec_config(self, steps: int | None, topk: int | None, draft_tokens: int | None,
                        route: str | None) -> None:
        if self.trace is not None:
            self.trace.append(("set_spec_config", (steps, topk, draft_tokens, route)))
        for k, v in (("steps", steps), ("topk", topk), ("draft_tokens", draft_tokens)):
            if v is not None:
                self.spec[k] = int(v)
        if route is not None:
            self.route = route

    # -- windows -----------------------------------------------------------------------------
    def _resolve(self, cycles: list[list[Any]]) -> tuple[dict[str, list[float]], int]:
        b = self.backend
        per: dict[str, list[float]] = {name: [] for name in (*PHASES, CYCLE)}
        idle = 0
        for begin, end, was_idle, phases in cycles:
            idle += was_idle
            total = b.elapsed_ms(begin, end)
            sums = dict.fromkeys(("draft", "verify", "extend"), 0.0)
            for name, s, e in phases:
                if name in sums:
                    sums[name] += b.elapsed_ms(s, e)
            for name, v in sums.items():
                per[name].append(v)
            per["other"].append(max(0.0, total - sum(sums.values())))
            per[CYCLE].append(total)
        return per, idle

    def _emit(self, newest: Any) -> dict[str, Any] | None:
        cycles, self._cycles = self._cycles, []
        hist, self._hist = self._hist, {}
        if self._rank is None:
            self._rank = _rank_and_size()
        rank, size = self._rank
        b = self.backend
        self.window += 1
        if rank != 0:  # other ranks record but do not read or write (no sync there either)
            b.release(None)
            return None
        b.wait(newest)  # the only host wait of the window (a no-op for wall/sync)
        per, idle = self._resolve(cycles)
        b.release(None)  # every handle is read; the next cycle starts with a fresh mark
        if self._version is False:
            self._version = _sglang_version()
        rec = build_record(
            window=self.window, per_cycle=per, hist=hist, mode=b.name, spec=self.spec,
            route=self.route, sglang_version=self._version, rank=rank, tp_size=size,
            idle_cycles=idle, notes=self._notes,
        )
        if self.mode_requested not in ("auto", b.name):
            rec["mode_requested"] = self.mode_requested
        sys.stderr.write(format_block(rec) + "\n")
        sys.stderr.flush()
        if self.out:
            try:
                with open(self.out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            except OSError as exc:
                sys.stderr.write(f"EAGLE3_PROF warning: cannot append to {self.out}: {exc}\n")
        if self.sink is not None:
            self.sink.append(rec)
        return rec

    def flush(self, min_cycles: int = 1) -> dict[str, Any] | None:
        """Close the open cycle at its cycle_end (if it had one) and emit what was collected."""
        cur = self._cur
        if cur is not None and cur[_END] is not None:
            self._cycles.append([cur[_BEGIN], cur[_END], False, cur[_PH]])
            self._cur = None
        if len(self._cycles) < min_cycles:
            return None
        newest = self._cycles[-1][1]
        return self._emit(newest=newest)
