"""Client-side cost per token of `sgl-eagle3 bench`'s streaming client (goal: < 1% of 10 ms/token).

The stand-in server (tests/standin_openai.py) runs in its own process with no delay between
chunks, one token per chunk with per-chunk usage (the worst case: one SSE event + one JSON parse
per token). Two figures:

- client CPU per token: this process's CPU time over the streams / tokens (what the client adds);
- wall per token at full speed: an upper bound that includes the server's own cost.

Run: .venv/bin/python benchmarks/bench_client_overhead.py [--tokens 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglang_eagle3_ext.measure import bench, chat_client  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "standin_openai.py"), "--port", str(port),
                             "--ttft-ms", "0", "--interval-ms", "0"], stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()  # "stand-in serving on ..."
        ep = chat_client.Endpoint(f"http://127.0.0.1:{port}")
        opts = bench.BenchOptions(url=ep.url, max_tokens=a.tokens)
        best_cpu = best_wall = float("inf")
        for _ in range(a.repeats):
            rec = chat_client.RequestRecord(prompt_index=0)
            c0, w0 = time.process_time(), time.perf_counter()
            chat_client.stream_chat(ep, bench.request_body(opts, "x", "m"), rec)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            assert rec.error is None and rec.completion_tokens == a.tokens, rec
            best_cpu = min(best_cpu, cpu / a.tokens)
            best_wall = min(best_wall, wall / a.tokens)
    finally:
        proc.terminate()
        proc.wait()
    cpu_us, wall_us = best_cpu * 1e6, best_wall * 1e6
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {platform.system()}")
    print(f"tokens per stream: {a.tokens}, repeats: {a.repeats} (best shown), 1 token per chunk")
    print(f"client CPU per token:      {cpu_us:7.1f} us  = {cpu_us / 100:.3f}% of a 10 ms/token stream")
    print(f"wall per token, full speed: {wall_us:7.1f} us  (client + stand-in server + loopback)")
    print("goal: client < 1% of 10 ms/token (< 100 us): " + ("met" if cpu_us < 100 else "NOT met"))


if __name__ == "__main__":
    main()
