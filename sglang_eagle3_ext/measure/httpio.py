"""Bounded reads from a server we do not trust: a total deadline per request and a cap per line.

``http.client`` alone bounds each blocking read (the socket timeout), not a request: a server that
sends one byte a second, never a newline, keeps ``readline`` going for as long as it likes, and a
200 MB line is read whole. Here every request gets

- a total deadline (``--timeout``): each read waits at most the time left, and a watchdog shuts the
  socket down at the deadline (the header read inside ``getresponse`` is covered too);
- a cap on one stream line (``LINE_CAP``) and on a whole GET body (``BODY_CAP``): longer is a
  failed request, not memory.

Stdlib only, cheap per chunk (benchmarks/bench_client_overhead.py measures the client).
"""

from __future__ import annotations

import heapq
import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

LINE_CAP = 1 << 20   # one SSE line (a chunk of a few tokens is < 1 KiB)
BODY_CAP = 8 << 20   # a GET body: /v1/models, /metrics (SGLang's page is ~100 KiB with histograms)
READ_SIZE = 1 << 16
MAX_TIMEOUT_S = 1e6  # larger waits overflow the C timeouts of sockets and locks


class BadStream(Exception):
    """The server answered, but not as an OpenAI-compatible server does: the request fails with
    this message (one line, says what was wrong)."""


class Deadline:
    """A total time budget for one request; ``watch(conn)`` cuts the connection when it runs out."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds
        self.fired = False
        self._timer: list[Any] | None = None
        self._sock: socket.socket | None = None

    def left(self) -> float:
        return self._end - self._clock()

    def check(self) -> float:
        left = self.left()
        if left <= 0:
            self.fired = True
            raise TimeoutError(self.message())
        return left

    def message(self) -> str:
        return f"no complete answer after {self.seconds:g} s (--timeout)"

    def watch(self, conn: http.client.HTTPConnection) -> socket.socket:
        """Connect ``conn`` (bounded by its timeout) and cut its socket at the deadline. The socket
        is kept here: http.client drops ``conn.sock`` once a response says it will close (HTTP/1.0),
        while the response still reads from it."""
        conn.connect()
        self._sock = conn.sock

        def fire() -> None:
            self.fired = True
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        self._timer = _WATCHDOG.add(time.monotonic() + max(0.0, self.left()), fire)
        return conn.sock

    def cancel(self) -> None:
        if self._timer is not None:
            _WATCHDOG.cancel(self._timer)
            self._timer = None

    def arm(self, conn: http.client.HTTPConnection) -> None:
        """Before a blocking read: the socket waits at most the time left."""
        left = self.check()
        if self._sock is not None:
            self._sock.settimeout(min(left, MAX_TIMEOUT_S))


def lines(conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, deadline: Deadline,
          cap: int = LINE_CAP) -> Iterator[bytes]:
    """The response body line by line (the last one may lack its newline); BadStream for a line
    over ``cap`` bytes, TimeoutError at the deadline."""
    buf = bytearray()
    scan = 0
    while True:
        j = buf.find(b"\n", scan)
        if j > cap:  # the same cap whatever the read boundaries (the line came in one read)
            raise BadStream(f"a stream line longer than {cap // 1024} KiB: not an SSE stream")
        if j >= 0:
            yield bytes(buf[: j + 1])
            del buf[: j + 1]
            scan = 0
            continue
        if len(buf) > cap:
            raise BadStream(f"a stream line longer than {cap // 1024} KiB (no newline): not an SSE stream")
        scan = len(buf)
        deadline.arm(conn)
        data = resp.read1(READ_SIZE)
        if not data:
            if deadline.fired:  # the watchdog shut the socket: that end of stream is ours
                raise TimeoutError(deadline.message())
            if buf:
                yield bytes(buf)
            return
        buf += data


def read_body(conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, deadline: Deadline,
              cap: int = BODY_CAP) -> bytes:
    """A whole (non-streamed) body, at most ``cap`` bytes, before the deadline."""
    buf = bytearray()
    while True:
        deadline.arm(conn)
        data = resp.read1(READ_SIZE)
        if not data:
            if deadline.fired:
                raise TimeoutError(deadline.message())
            return bytes(buf)
        buf += data
        if len(buf) > cap:
            raise BadStream(f"an answer longer than {cap // (1 << 20)} MiB")


class _Watchdog:
    """One thread for every request's deadline (a timer thread per request doubled the threads a
    run needs, and a process at its thread limit could not start them)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[list[Any]] = []   # [when, seq, fire or None (cancelled)]
        self._seq = 0
        self._cancelled = 0
        self._thread: threading.Thread | None = None

    def add(self, when: float, fire: Callable[[], None]) -> list[Any]:
        entry: list[Any] = [when, 0, fire]
        with self._cv:
            self._seq += 1
            entry[1] = self._seq
            heapq.heappush(self._heap, entry)
            if self._thread is None or not self._thread.is_alive():
                t = threading.Thread(target=self._run, name="bench-deadlines", daemon=True)
                try:
                    t.start()
                    self._thread = t
                except RuntimeError:  # a thread limit: each read still waits at most the time left
                    pass              # (Deadline.arm); the next request tries again
            self._cv.notify()
        return entry

    def cancel(self, entry: list[Any]) -> None:
        with self._cv:
            if entry[2] is not None:
                entry[2] = None
                self._cancelled += 1
            if self._cancelled > 1024 and 2 * self._cancelled > len(self._heap):  # long timeouts
                self._heap = [e for e in self._heap if e[2] is not None]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._heap and self._heap[0][2] is None:
                    heapq.heappop(self._heap)
                    self._cancelled = max(0, self._cancelled - 1)
                if not self._heap:
                    self._cv.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cv.wait(min(wait, 1.0))
                    continue
                entry = heapq.heappop(self._heap)
                fire, entry[2] = entry[2], None
            if fire is not None:
                fire()


_WATCHDOG = _Watchdog()
