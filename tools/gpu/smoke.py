#!/usr/bin/env python3
"""GPU smoke run (inside tools/gpu/run.sh on the H200): tiny models -> real SGLang -> a few requests.

Builds the built-in tiny models with the machine's torch, starts ``sglang.launch_server`` with
EAGLE3 (or no speculation with ``--steps 0``), sends sequential greedy requests, prints per-request
tok/s and SGLang's own accept length, writes the server log and a JSON record under --out, stops.
Self-contained on purpose (only ``sglang_eagle3_ext.tiny``), so it runs even when the rest of the
package is mid-change. Flags from ../shared/reference/gpu-h200-sglang.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

# What was carried / what the H200 image lacks: these keep the server inside the bundle.
BASE_FLAGS = ["--attention-backend", "triton", "--sampling-backend", "pytorch",
              "--grammar-backend", "none", "--mem-fraction-static", "0.3",
              "--max-running-requests", "8", "--cuda-graph-max-bs-decode", "8",
              "--disable-prefill-cuda-graph"]
PROMPT = "Tell me a long story about a tiny model that learned to speak."


def _get(url: str, timeout: float = 5) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status


def _post(url: str, body: dict, timeout: float = 120) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def versions() -> dict:
    info: dict = {"python": sys.version.split()[0]}
    for mod in ("torch", "sglang", "transformers", "tokenizers", "triton", "flashinfer"):
        try:
            m = __import__(mod)
            info[mod] = getattr(m, "__version__", "?")
        except Exception as exc:  # noqa: BLE001 - report, never stop on a version probe
            info[mod] = f"not importable: {type(exc).__name__}"
    try:
        import torch

        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        info["gpu"] = None
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--acceptance", default="oracle")
    ap.add_argument("--steps", type=int, default=2, help="EAGLE3 steps; 0 = no speculation")
    ap.add_argument("--requests", type=int, default=3, help="sequential requests (first warms up)")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--timeout", type=float, default=240, help="seconds to wait for health")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--models", default="/tmp/tiny", help="where tiny models are built")
    ap.add_argument("extra", nargs="*", help="extra server flags (after --)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{a.acceptance}-s{a.steps}"
    record: dict = {"tag": tag, "versions": versions(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    print("[smoke]", json.dumps(record["versions"]), flush=True)

    from sglang_eagle3_ext import tiny

    t0 = time.time()
    models = tiny.build(Path(a.models) / str(a.acceptance), a.acceptance)
    print(f"[smoke] tiny models ({a.acceptance}) built in {time.time() - t0:.1f} s", flush=True)

    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(models.target),
           "--host", "127.0.0.1", "--port", str(a.port), *BASE_FLAGS]
    if a.steps > 0:
        cmd += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                str(models.draft), "--speculative-num-steps", str(a.steps),
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(a.steps + 1)]
    cmd += a.extra
    record["command"] = cmd
    print("[smoke] $", " ".join(cmd), flush=True)
    log_path = out / f"server-{tag}.log"
    url = f"http://127.0.0.1:{a.port}"
    t_launch = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    rc = 1
    try:
        while True:
            if proc.poll() is not None:
                print(f"[smoke] server exited with {proc.returncode}; log tail:", flush=True)
                print(log_path.read_text()[-4000:])
                return 1
            try:
                if _get(url + "/health") == 200:
                    break
            except OSError:
                pass
            if time.time() - t_launch > a.timeout:
                print(f"[smoke] not healthy after {a.timeout:.0f} s; log tail:")
                print(log_path.read_text()[-4000:])
                return 1
            time.sleep(1)
        record["healthy_after_s"] = round(time.time() - t_launch, 1)
        print(f"[smoke] healthy after {record['healthy_after_s']} s", flush=True)
        rows = []
        for i in range(a.requests):
            t = time.perf_counter()
            res = _post(url + "/generate", {"text": PROMPT, "sampling_params": {
                "max_new_tokens": a.max_tokens, "temperature": 0}})
            dt = time.perf_counter() - t
            mi = res.get("meta_info", {})
            n = mi.get("completion_tokens", 0)
            verify = mi.get("spec_verify_ct")
            rows.append({"request": i, "completion_tokens": n, "seconds": round(dt, 4),
                         "tok_s": round(n / dt, 1) if dt else None,
                         "spec_accept_length": mi.get("spec_accept_length"),
                         "spec_verify_ct": verify,
                         "tokens_per_verify": round(n / verify, 3) if verify else None,
                         "text_head": res.get("text", "")[:40]})
        record["requests"] = rows
        print(f"\n{'req':>3} {'tokens':>6} {'s':>7} {'tok/s':>8} {'accept(SGLang)':>15} "
              f"{'verify_ct':>9} {'tok/verify':>10}")
        for r in rows:
            print(f"{r['request']:>3} {r['completion_tokens']:>6} {r['seconds']:>7.3f} "
                  f"{r['tok_s']:>8} {str(r['spec_accept_length']):>15} "
                  f"{str(r['spec_verify_ct']):>9} {str(r['tokens_per_verify']):>10}")
        rc = 0
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        accept_lines = [ln for ln in log_path.read_text().splitlines() if "accept len" in ln]
        record["server_accept_log_tail"] = accept_lines[-3:]
        for ln in accept_lines[-2:]:
            print("[smoke] server:", ln.strip()[-160:])
        (out / f"smoke-{tag}.json").write_text(json.dumps(record, indent=2) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
