"""Host cost of the probes per decode cycle, per timing mode, in microseconds.

One cycle = what the patch / plugin calls per decode cycle: cycle_begin, begin/end of draft,
verify and extend, record_accept, cycle_end (9 calls), with a window every 100 cycles written
to a JSONL file (the block goes to /dev/null). Goal: disabled ~0, wall <= 5 us.

Without CUDA, `events` uses timers.FakeEventTimer (same pool and lazy read, a host clock as GPU)
and `sync` a no-op synchronize, and the output says so. Run: python benchmarks/probe_overhead.py
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import tempfile
from time import perf_counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sglang_eagle3_ext.runtime import probes  # noqa: E402
from sglang_eagle3_ext.runtime.probes import timers  # noqa: E402


def one_run(n: int) -> float:
    cb, pb, pe, ra, ce = (probes.cycle_begin, probes.phase_begin, probes.phase_end,
                          probes.record_accept, probes.cycle_end)
    acc = [2]
    t0 = perf_counter()
    for _ in range(n):
        cb()
        pb("draft")
        pe("draft")
        pb("verify")
        pe("verify")
        pb("extend")
        pe("extend")
        ra(acc, bonus_included=False)
        ce()
    return (perf_counter() - t0) / n * 1e6


def empty_loop(n: int) -> float:
    t0 = perf_counter()
    for _ in range(n):
        pass
    return (perf_counter() - t0) / n * 1e6


def phase_demo(torch, cycles: int = 300) -> None:
    """Real GPU work per phase, then a host sync where a scheduler would (``.item()``): shows
    which phase each mode bills the GPU time to."""
    dev = "cuda"
    a = torch.randn(1024, 1024, device=dev)
    b = torch.randn(4096, 4096, device=dev)
    c = torch.randn(2048, 2048, device=dev)
    work = {
        "draft": lambda: [a @ a for _ in range(5)],
        "verify": lambda: [b @ b for _ in range(2)],
        "extend": lambda: c @ c,
    }
    print(f"\nphase attribution with real GPU work ({cycles} cycles; host waits only at the end of each cycle)")
    print(f"{'mode':<8} {'draft':>8} {'verify':>8} {'extend':>8} {'other':>8} {'cycle':>8}  (ms, mean)")
    for mode in ("events", "wall", "sync"):
        probes.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_EVERY": str(cycles),
                              "EAGLE3_PROFILE_MODE": mode})
        with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
            for _ in range(cycles + 1):
                probes.cycle_begin()
                for name, fn in work.items():
                    probes.phase_begin(name)
                    fn()
                    probes.phase_end(name)
                probes.record_accept([1], bonus_included=False)
                probes.cycle_end()
                torch.cuda.current_stream().synchronize()  # the scheduler's .tolist()
        r = probes.windows[-1]
        ph = r["phases"]
        print(f"{r['mode']:<8} " + " ".join(f"{ph[p]['mean_ms']:8.3f}" for p in
                                          ("draft", "verify", "extend", "other", "cycle")))


def event_costs(torch, n: int = 20_000) -> None:
    """What one CUDA event operation costs on the host (why the pool and the cached stream)."""
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    stream = torch.cuda.current_stream()
    t0 = perf_counter()
    for ev in evs:
        ev.record()
    t1 = perf_counter()
    for ev in evs:
        ev.record(stream)
    t2 = perf_counter()
    evs[-1].synchronize()
    for i in range(n - 1):
        evs[i].elapsed_time(evs[i + 1])
    t3 = perf_counter()
    for _ in range(n):
        torch.cuda.Event(enable_timing=True)
    t4 = perf_counter()
    print(f"\nCUDA event host costs (us per call): record() {(t1 - t0) / n * 1e6:.2f}, "
          f"record(stream) {(t2 - t1) / n * 1e6:.2f}, elapsed_time {(t3 - t2) / (n - 1) * 1e6:.2f}, "
          f"Event() {(t4 - t3) / n * 1e6:.2f}")


def measure(label: str, env: dict[str, str], backend, n: int, repeats: int) -> tuple[str, float]:
    probes.reset(environ=env, backend=backend() if backend else None)
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
        one_run(min(n, 1000))  # warm the pool / first window
        best = min(one_run(n) for _ in range(repeats))
    return label, best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--phase-demo", action="store_true",
                    help="on CUDA: also show which phase each mode bills real GPU work to")
    args = ap.parse_args()

    cuda = False
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        torch = None
    out = os.path.join(tempfile.mkdtemp(), "prof.jsonl")
    on = {"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_EVERY": "100", "EAGLE3_PROFILE_OUT": out,
          "EAGLE3_PROFILE_SPEC": "5,1,6"}
    rows = [measure("disabled (EAGLE3_PROFILE unset)", {}, None, args.cycles * 4, args.repeats),
            measure("wall", {**on, "EAGLE3_PROFILE_MODE": "wall"}, None, args.cycles, args.repeats),
            measure("wall + trace", {**on, "EAGLE3_PROFILE_MODE": "wall", "EAGLE3_PROFILE_TRACE": "1"},
                    None, min(args.cycles, 20_000), args.repeats)]
    if cuda:
        x = torch.zeros(1, device="cuda")
        del x
        rows.append(measure("events (CUDA events)", {**on, "EAGLE3_PROFILE_MODE": "events"}, None,
                            args.cycles, args.repeats))
        rows.append(measure("sync (torch.cuda.synchronize, idle GPU)", {**on, "EAGLE3_PROFILE_MODE": "sync"},
                            None, min(args.cycles, 20_000), args.repeats))
    else:
        rows.append(measure("events (FakeEventTimer: no CUDA here)", on, timers.FakeEventTimer,
                            args.cycles, args.repeats))
        rows.append(measure("sync (no-op synchronize: no CUDA here)", on,
                            lambda: timers.SyncTimer(lambda: None), args.cycles, args.repeats))
    probes.reset(environ={})
    base = empty_loop(args.cycles * 4)

    cpu = platform.processor() or platform.machine()
    print(f"probe overhead per decode cycle (9 probe calls, window every 100 cycles, best of {args.repeats})")
    print(f"machine: {platform.node()} {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"
          + (f", torch {torch.__version__}" if torch else "") + (f", GPU {torch.cuda.get_device_name(0)}" if cuda else ""))
    print(f"{'mode':<42} {'us/cycle':>9}")
    for label, us in rows:
        print(f"{label:<42} {us:9.2f}")
    print(f"{'(empty Python loop, for scale)':<42} {base:9.2f}")
    if args.phase_demo and cuda:
        event_costs(torch)
        phase_demo(torch)
    probes.reset(environ={})
    return 0


if __name__ == "__main__":
    sys.exit(main())
