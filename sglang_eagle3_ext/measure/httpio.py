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

import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator

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
        self._timer: threading.Timer | None = None
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

        self._timer = threading.Timer(max(0.0, self.left()), fire)
        self._timer.daemon = True
        self._timer.start()
        return conn.sock

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

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
