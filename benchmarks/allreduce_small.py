"""Latency of the small all-reduces of TP decode, with and without an NCCL preset.

A decode step of a TP-sharded model all-reduces hidden_size x batch values (bf16) a couple of
times per layer; EAGLE-3 verify does it for batch x (draft tokens) rows. This times exactly those
message sizes with torch.distributed, once per NCCL preset (launch/nccl.yaml), each preset in a
fresh set of processes because NCCL reads its environment when the communicator is created.

    python benchmarks/allreduce_small.py                       # every GPU, presets none + tuned
    python benchmarks/allreduce_small.py --presets none,tuned,debug --hidden 7168 --batch 1,8
    python benchmarks/allreduce_small.py --cpu 2               # gloo on CPU: plumbing check only

With the `debug` preset NCCL prints its TUNING lines (which algorithm/protocol it chose), the way
to see whether NCCL_PROTO/NCCL_ALGO took effect (NVIDIA/nccl#1595). NVLink multicast stays off
(NCCL_NVLS_ENABLE=0) as the lent machines require. Prints one table: median us per all-reduce.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank: int, world: int, port: int, cfg: dict, out: str) -> None:
    import torch
    import torch.distributed as dist

    cpu = cfg["cpu"]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if not cpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("gloo" if cpu else "nccl", rank=rank, world_size=world)
    dev = "cpu" if cpu else f"cuda:{rank}"
    dtype = torch.float32 if cpu else torch.bfloat16  # gloo has no bf16 all-reduce
    results = []
    for rows in cfg["rows"]:
        x = torch.randn(rows, cfg["hidden"], device=dev).to(dtype)
        for _ in range(cfg["warmup"]):
            dist.all_reduce(x)
        times = []
        for _ in range(cfg["iters"]):
            if cpu:
                t0 = time.perf_counter()
                dist.all_reduce(x)
                times.append((time.perf_counter() - t0) * 1e6)
            else:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                dist.all_reduce(x)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1000.0)
        results.append({"rows": rows, "bytes": x.numel() * x.element_size(),
                        "median_us": statistics.median(times)})
    if rank == 0:
        Path(out).write_text(json.dumps(results))
    dist.destroy_process_group()


def run_preset(preset: str, world: int, cfg: dict) -> list[dict]:
    """One preset in fresh processes (NCCL reads env at communicator creation)."""
    from sglang_eagle3_ext.runtime import nccl

    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(NCCL_NVLS_ENABLE="0")
    env.update(nccl.preset_env(preset))
    out = Path(f"/tmp/allreduce_small_{os.getpid()}_{preset}.json")
    here = str(Path(__file__).parent)
    code = (f"import json, sys; sys.path.insert(0, {here!r}); import allreduce_small as m; "
            f"import torch.multiprocessing as mp; cfg = json.loads({json.dumps(cfg)!r}); "
            f"mp.spawn(m.worker, args=({world}, {free_port()}, cfg, {str(out)!r}), nprocs={world})")
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    data = json.loads(out.read_text())
    out.unlink()
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="none,tuned", help="NCCL presets from launch/nccl.yaml")
    ap.add_argument("--hidden", type=int, default=7168, help="hidden size (7168: DeepSeek-V3 / Kimi-K2)")
    ap.add_argument("--batch", default="1,8", help="decode batch sizes")
    ap.add_argument("--draft-tokens", default="1,3,6", help="rows per request (1 = plain decode)")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--cpu", type=int, default=0, metavar="N", help="N gloo processes on CPU instead")
    a = ap.parse_args(argv)
    if a.cpu:
        world = a.cpu
    else:
        import torch

        world = torch.cuda.device_count()
        if world < 2:
            print(f"needs >= 2 GPUs for an all-reduce (found {world}); --cpu N checks the plumbing",
                  file=sys.stderr)
            return 2
    rows = sorted({b * t for b in map(int, a.batch.split(",")) for t in map(int, a.draft_tokens.split(","))})
    cfg = {"cpu": bool(a.cpu), "hidden": a.hidden, "rows": rows, "iters": a.iters, "warmup": a.warmup}
    presets = [p.strip() for p in a.presets.split(",") if p.strip()]
    table = {p: run_preset(p, world, cfg) for p in presets}
    backend = f"gloo on CPU x{world} (plumbing check, not NCCL)" if a.cpu else f"NCCL x{world} GPUs"
    print(f"all-reduce median us per call, hidden {a.hidden}, {backend}")
    print(f"{'rows':>6} {'bytes':>9} " + " ".join(f"{p:>10}" for p in presets))
    for i, r in enumerate(rows):
        cells = " ".join(f"{table[p][i]['median_us']:>10.1f}" for p in presets)
        print(f"{r:>6} {table[presets[0]][i]['bytes']:>9} {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
