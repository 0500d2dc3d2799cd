"""Timer backends for the probes: one object decides how a phase boundary is time-stamped.

A backend has four methods: ``mark()`` returns an opaque handle for "now", ``wait(newest)`` blocks
until ``newest`` (and so every older handle) can be read, ``elapsed_ms(a, b)`` reads the time
between two handles, and ``release(keep)`` lets the backend recycle handles after a window was
read (``keep`` is the one handle that still belongs to an open cycle). ``name`` is the timing mode
printed in every report. A backend whose ``deferred`` is True also has ``ready(newest)`` (a
non-blocking ``wait``) and ``swap()`` (keep the closed window's handles, record into fresh ones):
the profiler then reads each window once the GPU has passed it, never waiting at the boundary.

Backends are injectable (``probes.reset(backend=...)``) so the ``events`` logic is testable on
a machine without CUDA: :class:`FakeEventTimer` behaves like CUDA events and counts the syncs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from time import perf_counter
from typing import Any, Protocol


class TimerBackend(Protocol):
    name: str

    def mark(self) -> Any: ...

    def wait(self, newest: Any) -> None: ...

    def elapsed_ms(self, start: Any, end: Any) -> float: ...

    def release(self, keep: Any) -> None: ...


class WallTimer:
    """perf_counter at the boundary (the seeds' method): on GPU it measures host launch time."""

    name = "wall"
    deferred = False  # host clock values: readable at once

    def mark(self) -> float:
        return perf_counter()

    def wait(self, newest: Any) -> None:
        return None

    def elapsed_ms(self, start: float, end: float) -> float:
        return (end - start) * 1000.0

    def release(self, keep: Any) -> None:
        return None


class SyncTimer(WallTimer):
    """Device synchronize, then perf_counter: ground truth per phase, but it stalls the pipeline."""

    name = "sync"

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self._sync = synchronize
        self.syncs = 0

    def mark(self) -> float:
        self._sync()
        self.syncs += 1
        return perf_counter()


class EventTimer:
    """CUDA events recorded on the current stream; read once per window, a window late.

    Events live in two pools used in turn (double buffering): a closed window's events stay
    untouched in one pool while the next window records into the other, so the profiler can
    read a window once the GPU has passed it (``ready``) instead of waiting for it at the
    window boundary (a host stall whenever the GPU runs behind the host). Nothing is allocated
    per cycle once both pools are filled.
    """

    name = "events"
    deferred = True  # windows may be read late: see Profiler._close_window

    def __init__(self, event_factory: Callable[[], Any],
                 current_stream: Callable[[], Any] | None = None) -> None:
        self._new = event_factory
        self._current_stream = current_stream
        self._stream: Any = None
        self._pools: tuple[list[Any], list[Any]] = ([], [])
        self._pool = self._pools[0]
        self._i = 0
        self.syncs = 0

    def begin_cycle(self) -> None:
        # torch's Event.record() without a stream builds a Stream object (a device switch) on
        # every call; the current stream is looked up once per cycle instead.
        if self._current_stream is not None:
            self._stream = self._current_stream()

    def mark(self) -> Any:
        i = self._i
        if i == len(self._pool):
            self._pool.append(self._new())
        ev = self._pool[i]
        self._i = i + 1
        ev.record(self._stream)  # the current stream: the compute timeline the phases run on
        return ev

    def wait(self, newest: Any) -> None:
        newest.synchronize()
        self.syncs += 1

    def ready(self, newest: Any) -> bool:
        """True once the GPU has passed ``newest`` (non-blocking)."""
        return bool(newest.query())

    def swap(self) -> None:
        """Record into the other pool from now on; the current one keeps the closed window."""
        self._pool = self._pools[1] if self._pool is self._pools[0] else self._pools[0]
        self._i = 0

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def release(self, keep: Any) -> None:
        # `keep` (optional) is a mark that still belongs to an open cycle: move it to slot 0 so
        # the next window cannot overwrite it before it is read.
        self._i = 0
        if keep is None:
            return
        for j, ev in enumerate(self._pool):
            if ev is keep:
                self._pool[0], self._pool[j] = ev, self._pool[0]
                self._i = 1
                return

    @property
    def pool_size(self) -> int:
        return len(self._pools[0]) + len(self._pools[1])


class _FakeEvent:
    """Stands in for ``torch.cuda.Event``: stamped from a clock on ``record()``."""

    __slots__ = ("_owner", "t", "recorded")

    def __init__(self, owner: FakeEventTimer) -> None:
        self._owner = owner
        self.t = 0.0
        self.recorded = False

    def record(self, stream: Any = None) -> None:
        self.t = self._owner.clock()
        self.recorded = True
        self._owner.records += 1

    def synchronize(self) -> None:
        owner = self._owner
        if owner.clock() < self.t + owner.lag:
            owner.blocked += 1  # a real host would stall here until the GPU caught up
        owner.resolved_upto = max(owner.resolved_upto, self.t)

    def query(self) -> bool:
        owner = self._owner
        if owner.clock() < self.t + owner.lag:  # the "GPU" is still behind this event
            return False
        owner.resolved_upto = max(owner.resolved_upto, self.t)
        return True

    def elapsed_time(self, end: _FakeEvent) -> float:
        owner = self._owner
        # CUDA raises when an event has not completed; a fake that allows it would hide the bug
        # this backend exists to catch (reading a window before its newest event was waited for).
        if end.t > owner.resolved_upto or self.t > owner.resolved_upto:
            raise RuntimeError("elapsed_time read before the event was synchronized")
        owner.reads += 1
        return (end.t - self.t) * 1000.0


class FakeEventTimer(EventTimer):
    """The ``events`` backend without CUDA: same pool and lazy reading, a host clock as "GPU".

    Used by the tests (to prove there is no per-cycle sync) and by the overhead benchmark on
    machines without a GPU. ``clock`` returns seconds; ``syncs`` counts host waits; ``lag``
    (seconds of ``clock``) is how far the "GPU" runs behind: ``query()`` is False until then.
    """

    def __init__(self, clock: Callable[[], float] = perf_counter, lag: float = 0.0) -> None:
        self.clock = clock
        self.lag = lag
        self.blocked = 0  # waits that would have stalled the host (the GPU had not got there yet)
        self.records = 0
        self.reads = 0
        self.resolved_upto = float("-inf")
        super().__init__(lambda: _FakeEvent(self))


def cuda_available() -> bool:
    """True when torch is already imported by the host and sees CUDA (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA setup just means "no events mode"
        return False


def make_backend(mode: str) -> tuple[TimerBackend, str | None]:
    """Backend for a requested mode ('auto' | 'events' | 'wall' | 'sync') and a warning or None."""
    cuda = cuda_available()
    if mode == "auto":
        mode = "events" if cuda else "wall"
    if mode in ("events", "sync") and not cuda:
        return WallTimer(), f"timing mode {mode!r} needs CUDA (torch imported, a GPU visible); using 'wall'"
    if mode == "events":
        torch = sys.modules["torch"]
        return EventTimer(lambda: torch.cuda.Event(enable_timing=True), torch.cuda.current_stream), None
    if mode == "sync":
        torch = sys.modules["torch"]
        return SyncTimer(torch.cuda.synchronize), None
    return WallTimer(), None
