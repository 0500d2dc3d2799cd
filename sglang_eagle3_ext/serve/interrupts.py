"""Ctrl-C, SIGTERM and SIGHUP take one path in commands that start servers (launch, scan, sweep,
demo): the first stops the server's whole group, with its full grace, and the rest wait for it.

The servers run in their own session (server.Server), so a signal to the command does not reach
them: without this, a `kill`, a job scheduler's timeout or a closed terminal ended the command at
once and left its server running, holding the port, unknown to `stop --all` (issue 23, case 5).
Inside ``as_interrupt()`` the first such signal raises KeyboardInterrupt where the command is, so
its ``except KeyboardInterrupt`` / ``finally`` stop the server's whole group (SIGTERM, the grace,
SIGKILL) and write what was measured; every later SIGINT / SIGTERM / SIGHUP until the block ends
is ignored, so a second Ctrl-C or a scheduler's repeated SIGTERM never cuts that stop short and
leaves the server running (issue 34, case 2). A SIGINT this process was started ignoring (``cmd
&`` from a script, ``nohup``) stays ignored. The later signals get a no-op handler, not SIG_IGN:
a child started meanwhile gets the default disposition back at exec.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # handlers are main-thread only
        yield
        return
    sigs = list(SIGNALS)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        sigs.append(signal.SIGINT)
    fired = []

    def later(signum: int, frame: object) -> None:
        if len(fired) == 1:
            fired.append(signum)
            sys.stderr.write(f"{signal.Signals(signum).name}: already stopping the server (its grace, then "
                             "SIGKILL); further signals are ignored until it is gone\n")

    def first(signum: int, frame: object) -> None:
        fired.append(signum)
        for s in sigs:
            signal.signal(s, later)
        raise KeyboardInterrupt

    old = {s: signal.signal(s, first) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
