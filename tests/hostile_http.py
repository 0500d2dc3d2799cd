"""A loopback HTTP server that answers with whatever a test scripts: hostile servers for bench.

``Hostile(script)`` serves every request through ``script(method, path, write, stop)``, where
``write(bytes)`` sends raw bytes (status line and headers included: the script owns the wire) and
``stop`` is an Event set at shutdown, so a script that trickles or hangs ends with the test.
Helpers build the usual answers: ``sse(chunks)`` (a 200 event stream), ``json_answer(obj)``.
Every loop in a script must be bounded by ``stop`` or a count.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from standins.httpd import Httpd

Script = Callable[[str, str, Callable[[bytes], None], threading.Event], None]

SSE_HEAD = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
MODELS = {"object": "list", "data": [{"id": "hostile-model", "object": "model"}]}


def json_answer(obj: Any, status: int = 200) -> bytes:
    body = json.dumps(obj).encode()
    return (f"HTTP/1.0 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)


def sse(chunks: list[Any], done: bool = True) -> bytes:
    """A 200 event stream of ``chunks`` (objects are JSON-encoded, bytes sent as the data as is)."""
    out = [SSE_HEAD]
    for c in chunks:
        data = c if isinstance(c, bytes) else json.dumps(c).encode()
        out.append(b"data: " + data + b"\n\n")
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def good_chunks(n: int = 5, usage: bool = True) -> list[dict[str, Any]]:
    """A well-formed SGLang-like stream of ``n`` one-token chunks (content, finish, usage)."""
    out: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    for i in range(1, n + 1):
        c: dict[str, Any] = {"choices": [{"index": 0, "delta": {"content": " t"}}]}
        if usage:
            c["usage"] = {"prompt_tokens": 3, "completion_tokens": i, "total_tokens": 3 + i}
        out.append(c)
    out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    if usage:
        out.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}})
    return out


def chat_script(stream: bytes, models: bytes | None = None) -> Script:
    """POST /v1/chat/completions -> ``stream``; GET /v1/models -> ``models`` (a normal list)."""
    models = models if models is not None else json_answer(MODELS)

    def script(method: str, path: str, write: Callable[[bytes], None], stop: threading.Event) -> None:
        if method == "GET" and path == "/v1/models":
            write(models)
        elif method == "POST":
            write(stream)
        else:
            write(json_answer({"detail": "Not Found"}, 404))

    return script


class Hostile:
    def __init__(self, script: Script) -> None:
        self.stop_event = threading.Event()
        self.requests: list[tuple[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _serve(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                outer.requests.append((method, self.path))
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

                def write(data: bytes) -> None:
                    self.wfile.write(data)
                    self.wfile.flush()

                try:
                    script(method, self.path, write, outer.stop_event)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its deadline): what a hostile server sees
                self.close_connection = True

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

        self._httpd = Httpd(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # a short poll: shutdown() waits one poll interval (0.5 s by default) per server
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Hostile:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self._httpd.shutdown()
        self._httpd.server_close()
