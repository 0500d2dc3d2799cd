"""How a bench stops early and keeps what finished; starting a request thread at a thread limit.

A long run (several rates, a concurrency ladder, many runs) is stopped by Ctrl-C, a scheduler's
SIGTERM, a closed terminal's SIGHUP, or a step that cannot run (a rate's warm-up failed, the
server refused ``/flush_cache``). What finished before is a measurement like any other: the
bench keeps it, writes it, says why it stopped (the document's ``stopped``) and exits non-zero.

``signals_as_interrupts()`` turns SIGTERM / SIGHUP into ``Interrupted`` (a KeyboardInterrupt, so
every ``except KeyboardInterrupt`` that cuts the open streams runs), naming the signal; later
signals are ignored until the block ends, so writing what finished is not cut short.

``start_thread()``: a process at its thread or task limit (a container's pids limit, systemd
TasksMax) cannot start a thread; a request that cannot start is a failed request with that
reason, never an exception that loses the run.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from ..runtime.errors import UserError

NO_THREAD = ("not sent: the client could not start a thread for it (the process is at its thread or "
             "task limit, e.g. a container's pids limit; --max-concurrency C bounds the requests in flight)")


class Interrupted(KeyboardInterrupt):
    """SIGTERM / SIGHUP (or SIGINT) delivered as an interrupt, with the signal's name."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(exc: BaseException) -> int:
    return exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)


def exit_code(stopped: dict[str, Any]) -> int:
    """128 + the signal for an interrupt (130 for Ctrl-C), else 1."""
    sig = stopped.get("signal")
    return 128 + int(signal.Signals[sig]) if sig else 1


def stop_record(exc: BaseException, where: str) -> dict[str, Any]:
    """The document's ``stopped``: where the run stopped and why, in one line."""
    if isinstance(exc, KeyboardInterrupt):
        sig = signal.Signals(signal_of(exc)).name
        why = "Ctrl-C" if sig == "SIGINT" else sig
        return {"at": where, "signal": sig, "reason": f"interrupted ({why}) during {where}"}
    return {"at": where, "signal": None, "reason": str(exc) if isinstance(exc, UserError) else
            f"{type(exc).__name__}: {exc}"}


@contextlib.contextmanager
def signals_as_interrupts() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # handlers are main-thread only
        yield
        return
    sigs = [signal.SIGTERM, signal.SIGHUP]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        sigs.append(signal.SIGINT)

    def later(signum: int, frame: object) -> None:
        pass  # already stopping: what finished is being written

    def first(signum: int, frame: object) -> None:
        for s in sigs:
            signal.signal(s, later)
        raise Interrupted(signum)

    old = {s: signal.signal(s, first) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def start_thread(th: threading.Thread, live: list[threading.Thread] | None = None,
                 wait_s: float = 0.05) -> int:
    """Start ``th``; at a thread limit wait for one of ``live`` (threads started before, still
    running) to end and try again. How many tries failed before it started (0: at once), or -1
    when it cannot start and nothing is left to wait for."""
    failed = 0
    while True:
        try:
            th.start()
        except RuntimeError:  # "can't start new thread"
            failed += 1
            if live is None:
                return -1
            live[:] = [t for t in live if t.is_alive()]
            if not live:
                return -1
            live[0].join(wait_s)
            continue
        if live is not None:
            live.append(th)
        return failed
