"""A controlled-timing, streaming OpenAI-compatible stand-in for an SGLang server (tests, benchmarks).

It streams ``/v1/chat/completions`` the way SGLang 0.5.23 does (a role chunk, content chunks with
per-chunk usage when ``continuous_usage_stats`` is asked, a finish chunk, an ``sglext`` chunk, a
usage chunk, ``[DONE]``), and SGLang's native ``/generate`` (``Handler._generate``), on a fixed clock: the first content chunk (1 token) is written
``ttft_s`` after the request arrived, then one chunk of ``tokens_per_chunk`` tokens every
``interval_s``, on absolute deadlines so sleeps do not drift. Every request generates exactly
``max_tokens`` tokens. Hence, for N = max_tokens and c = tokens_per_chunk:

    decode tok/s = c / interval_s           (tokens after the first over time after the first)
    verify calls = ceil((N - 1) / c)        (one "verify" per decode chunk)
    accept length = N / verify calls        (SGLang's definition, completion_tokens / verify_ct)

``spec`` picks how accept length is exposed: ``"sglext"`` (per request in the stream, SGLang
0.5.19+), ``"metrics"`` (Prometheus counters on ``/metrics``, 0.5.13+), ``"none"``.
``mode`` misbehaves on purpose: ``"cut"`` closes the stream after ``cut_after`` content chunks
(no finish chunk, no ``[DONE]``), ``"hang"`` reads the request and never answers.
``die_after=K``: the server dies when its K-th chat request arrives (every stream in flight is
cut where it is, the listening socket closes, later connects are refused), like a crash.
``arrived`` holds each chat request's arrival time (``time.perf_counter``: the same clock as a
client in the same process, for schedule checks).
``python tests/standin_openai.py --port 8000 --interval-ms 10`` runs it standalone.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from standins.httpd import Httpd


class StandIn:
    def __init__(self, *, ttft_s: float = 0.02, interval_s: float = 0.005, tokens_per_chunk: int = 1,
                 spec: str = "none", model: str = "standin-model", host: str = "127.0.0.1",
                 port: int = 0, extra_metrics_tokens: int = 0, mode: str = "normal",
                 cut_after: int = 3, load_s: float = 0.0, die_after: int = 0) -> None:
        # Each chunk interval grows by load_s per other stream in flight: a server whose step cost
        # rises with the batch (per-stream tok/s falls with concurrency, as on a GPU).
        self.load_s = load_s
        self.active = 0
        self.peak = 0  # most streams in flight at once
        self.mode = mode
        self.cut_after = cut_after
        self.released = threading.Event()  # wakes "hang" handlers at stop()
        self.die_after = die_after
        self.dead = threading.Event()
        self.arrived: list[float] = []
        # POST /flush_cache: when each came, and the status answered (SGLang: 200, or 400 while
        # requests run)
        self.flushes: list[float] = []
        self.flush_status = 200
        self.ttft_s = ttft_s
        self.interval_s = interval_s
        self.tokens_per_chunk = tokens_per_chunk
        self.spec = spec
        self.model = model
        self.verify_total = 0
        self.gen_total = 0
        # Tokens "served to someone else" added to the generation counter per request (tests the
        # contaminated-counter flag).
        self.extra_metrics_tokens = extra_metrics_tokens
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd = Httpd((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> StandIn:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.released.set()
        if not self.dead.is_set():
            self._httpd.shutdown()
            self._httpd.server_close()

    def die(self) -> None:
        """Stop listening and cut every stream (die_after)."""
        if not self.dead.is_set():
            self.dead.set()
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def verify_calls(self, n_tokens: int) -> int:
        return math.ceil((n_tokens - 1) / self.tokens_per_chunk) if n_tokens > 1 else 1

    def metrics_text(self) -> str:
        with self._lock:
            v, g = self.verify_total, self.gen_total
        return (
            "# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.\n"
            "# TYPE sglang:spec_verify_calls_total counter\n"
            f'sglang:spec_verify_calls_total{{model_name="{self.model}"}} {float(v)}\n'
            "# TYPE sglang:generation_tokens_total counter\n"
            f'sglang:generation_tokens_total{{is_streaming="true",model_name="{self.model}"}} {float(g)}\n'
            f'sglang:generation_tokens_total{{is_streaming="false",model_name="{self.model}"}} 0.0\n'
        )


def _handler_for(srv: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # body ends at close: no chunked framing needed

        def setup(self) -> None:
            super().setup()
            # Small SSE writes + Nagle + delayed ACK would add ~40 ms stalls and ruin the clock.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": srv.model, "object": "model"}]}))
            elif self.path in ("/health", "/health_generate"):
                self._send(200, "")
            elif self.path == "/metrics" and srv.spec == "metrics":
                self._send(200, srv.metrics_text(), "text/plain; version=0.0.4")
            else:
                self._send(404, json.dumps({"detail": "Not Found"}))

        def do_POST(self) -> None:  # noqa: N802
            t_arrive = time.perf_counter()
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/flush_cache":
                srv.flushes.append(t_arrive)
                self._send(srv.flush_status, "Cache flushed.\n" if srv.flush_status == 200 else
                           "Flush cache failed: requests are running.\n", "text/plain")
                return
            if self.path not in ("/v1/chat/completions", "/generate"):
                self._send(404, json.dumps({"detail": "Not Found"}))
                return
            with srv._lock:
                srv.requests.append(body)
                srv.arrived.append(t_arrive)
                dying = srv.die_after and len(srv.arrived) == srv.die_after
            if dying:
                threading.Thread(target=srv.die, daemon=True).start()
            if srv.dead.is_set() or dying:
                return  # the connection closes without an answer
            if srv.mode == "hang":
                srv.released.wait()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            with srv._lock:
                srv.active += 1
                srv.peak = max(srv.peak, srv.active)
            try:
                (self._generate if self.path == "/generate" else self._chat)(body, t_arrive)
            finally:
                with srv._lock:
                    srv.active -= 1

        def _generate(self, body: dict[str, Any], t_arrive: float) -> None:
            """SGLang's native /generate stream (0.5.16 ``tokenizer_manager``): each chunk the text
            so far and a cumulative ``meta_info``; the last carries the finish reason and, on a
            speculative server, ``spec_verify_ct`` / ``spec_accept_length``; then ``[DONE]``."""
            sp = body.get("sampling_params") or {}
            n = int(sp.get("max_new_tokens") or 16)
            text: list[str] = []

            def meta(done: int, last: bool) -> dict[str, Any]:
                m: dict[str, Any] = {"id": f"gen-{id(self)}", "prompt_tokens": 37, "completion_tokens": done,
                                     "cached_tokens": 0,
                                     "finish_reason": {"type": "length", "length": n} if last else None}
                if last and srv.spec != "none":
                    v = srv.verify_calls(n)
                    m.update(spec_verify_ct=v, spec_accept_length=n / v)
                return m

            def chunk(step: int, done: int) -> None:
                text.append(" tok" * step)
                obj = {"text": "".join(text), "output_ids": [], "meta_info": meta(done, done >= n)}
                self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())

            if self._stream(n, t_arrive, chunk):
                self.wfile.write(b"data: [DONE]\n\n")

        def _chat(self, body: dict[str, Any], t_arrive: float) -> None:
            n = int(body.get("max_tokens") or 16)
            opts = body.get("stream_options") or {}
            per_chunk_usage = bool(opts.get("continuous_usage_stats"))
            rid = f"chatcmpl-{id(self)}"

            def emit(obj: dict[str, Any]) -> None:
                obj.setdefault("id", rid)
                obj.setdefault("object", "chat.completion.chunk")
                obj.setdefault("model", body.get("model"))
                self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())

            def usage(done: int) -> dict[str, int]:
                return {"prompt_tokens": 37, "completion_tokens": done, "total_tokens": 37 + done}

            emit({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})

            def chunk(step: int, done: int) -> None:
                c: dict[str, Any] = {"choices": [{"index": 0, "delta": {"content": " tok" * step}}]}
                if per_chunk_usage:
                    c["usage"] = usage(done)
                emit(c)

            if not self._stream(n, t_arrive, chunk):
                return
            emit({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            if srv.spec == "sglext" and body.get("return_spec_tokens_details"):
                v = srv.verify_calls(n)
                emit({"choices": [], "sglext": {"spec_tokens_details": {
                    "spec_verify_ct": v, "spec_accept_length": n / v}}})
            if opts.get("include_usage"):
                emit({"choices": [], "usage": usage(n)})
            self.wfile.write(b"data: [DONE]\n\n")

        def _stream(self, n: int, t_arrive: float, chunk: Any) -> bool:
            """The clock: ``chunk(step, done)`` for each content chunk; False when the stream was
            cut (mode "cut", or the server died) and must end without its finish."""
            done = 0
            deadline = t_arrive + srv.ttft_s
            first = True
            while done < n:
                if srv.dead.is_set():
                    return  # a crash: the stream stops where it is
                step = 1 if first else min(srv.tokens_per_chunk, n - done)
                pause = deadline - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                done += step
                chunk(step, done)
                deadline += srv.interval_s + srv.load_s * max(0, srv.active - 1)
                first = False
                if srv.mode == "cut" and done >= 1 + (srv.cut_after - 1) * srv.tokens_per_chunk:
                    self.wfile.flush()
                    return False  # the connection closes here: no finish chunk, no [DONE]
            with srv._lock:  # like SGLang: counters bump when the request finishes
                srv.verify_total += srv.verify_calls(n) if srv.spec == "metrics" else 0
                srv.gen_total += n + srv.extra_metrics_tokens
            return True

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--interval-ms", type=float, default=10.0)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--spec", choices=("none", "sglext", "metrics"), default="none")
    ap.add_argument("--mode", choices=("normal", "cut", "hang"), default="normal")
    a, _ = ap.parse_known_args()  # tolerate SGLang's argv when it stands in for launch_server
    s = StandIn(ttft_s=a.ttft_ms / 1000, interval_s=a.interval_ms / 1000,
                tokens_per_chunk=a.tokens_per_chunk, spec=a.spec, port=a.port, mode=a.mode)
    print(f"stand-in serving on {s.url}", flush=True)
    s.start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        s.stop()


if __name__ == "__main__":
    main()
