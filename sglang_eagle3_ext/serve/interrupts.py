"""SIGTERM and SIGHUP take the Ctrl-C path in commands that start servers (launch, sweep, demo).

The servers run in their own session (server.Server), so a signal to the command does not reach
them: without this, a `kill`, a job scheduler's timeout or a closed terminal ended the command at
once and left its server running, holding the port, unknown to `stop --all` (issue 23, case 5).
Inside ``as_interrupt()`` the first such signal raises KeyboardInterrupt where the command is, so
its ``except KeyboardInterrupt`` / ``finally`` stop the server's whole group; further ones are
ignored until the block ends, so the stop itself is not cut short. Ctrl-C (SIGINT) is untouched.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # handlers are main-thread only
        yield
        return

    def handler(signum: int, frame: object) -> None:
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt

    old = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
