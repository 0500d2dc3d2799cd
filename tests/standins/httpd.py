"""The HTTP server class every stand-in and scripted server in tests/ listens with."""

from __future__ import annotations

from http.server import ThreadingHTTPServer


class Httpd(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: more simultaneous connects (rate inf) drop a SYN
    # and wait the kernel's 1 s retry, a TTFT no real server (uvicorn: 2048) shows.
    request_queue_size = 128
