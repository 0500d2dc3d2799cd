"""H200 runs for the one-start scan and the run-time policy (issues 22 and 25), one plan per call.

Built on tools/gpu/campaign.py (model builds, staggered server starts, our own sweep over
pre-started servers, /metrics scrapes, a hard stop that always packs what exists):

- ``scan-8b``: static servers (plain, 2 and 5 steps) started first and left idle, then
  ``sgl-eagle3 scan`` (steps 0..5 at 1 / 8 / 32 streams in one start), then the static servers
  benched at the same loads: every scan cell beside a separately started server, same machine,
  same day.
- ``adapt-8b``: servers that choose the step count at run time on the same model: SGLang's EMA
  with its default tiers, the EMA with the tiers our scan wrote, our policy (``launch --policy``
  on the scan's table), and the best static step count; each benched at steady loads and on a
  transition workload.
- ``moe``: scan 0..4 at 1 / 8 streams on the MoE shape, beside a plain server.
- ``moe4`` / ``moe4b`` (round 7): the MoE scan 3..7 and our policy against static 3, the static
  count best at 1 stream and both EMAs; ``moe5`` / ``moe5b``: the same on a ``tiny --paths 32``
  build, every request cycling through its prompts; ``long``: single-stream 3072-token tree
  replays, then the 8B policy beside static 5; ``8bp`` (round 8): the 8B policy beside static 5
  on a ``--paths 32`` build, paired run by run.

    tools/gpu/run.sh python3 tools/gpu/scan_campaign.py --plan scan-8b --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import campaign as C  # noqa: E402

from sglang_eagle3_ext.serve import server  # noqa: E402
from sglang_eagle3_ext.tune import sweep

# Every server any plan starts, also those a hard stop catches inside campaign.start_all.
LIVE: list[server.Server] = []
_start = server.Server.start


def _tracked_start(self: server.Server, *args: Any, **kwargs: Any) -> server.Server:
    LIVE.append(self)
    return _start(self, *args, **kwargs)


server.Server.start = _tracked_start  # type: ignore[method-assign]


def run_cli(cmd: list[str], log_path: Path, timeout: float, env: dict[str, str] | None = None) -> int:
    """A CLI command that starts its own server (scan): on a hard stop it gets SIGINT, so it stops
    its server and keeps what it measured (subprocess.run would SIGKILL it and leak the server)."""
    t = time.monotonic()
    with open(log_path, "w") as fh:
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        try:
            rc = p.wait(timeout=timeout)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=25)
            except subprocess.TimeoutExpired:
                p.kill()
            raise
    C.log(f"{cmd[3]} -> exit {rc} ({time.monotonic() - t:.1f} s)")
    return rc


P08 = ["--shape", "llama3-8b", "--acceptance", "0.8"]
MOE = ["--shape", "moe", "--acceptance", "0.8"]


HARD_STOP = [565.0]  # --hard-stop: plans start nothing that could not end before it


def by(deadline: float) -> float:
    """A plan's deadline, no later than 10 s before the hard stop (its last checkpoint's margin)."""
    return min(deadline, HARD_STOP[0] - 10)

REHEARSE = False  # CPU: reduced shapes, stand-in servers (tests/standins), same plumbing
SMALL = ["--layers", "4", "--hidden", "256", "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
         "--intermediate", "256", "--vocab", "4096", "--draft-vocab", "1024", "--device", "cpu"]


def build(models: dict[str, list[str]], out: Path) -> None:
    C.build({k: [*v, *SMALL] if REHEARSE else v for k, v in models.items()}, out)


def scan_cmd(models: str, steps: str, conc: str, out: Path, port: int, *, bs: int,
             extra: list[str] = (), min_cycles: int = 256, max_tokens: int = 256,
             time_limit: int = 75, kv: int | None = None) -> list[str]:
    stand = ["--python", sys.executable, "--server-module", "standin_scan"] if REHEARSE else []
    return [*C.CLI, "scan", *stand, *PROMPTS, "--model", str(C.WORK / models / "target"),
            "--draft", str(C.WORK / models / "draft"),
            "--steps", steps, "--concurrency", conc, "--max-tokens", str(max_tokens), "--block", "32",
            "--min-cycles", str(min_cycles), "--time-limit", str(time_limit), "--out", str(out), "--port", str(port),
            "--timeout", "420", "--no-sglang-check", "--",
            *C.BASE_ARGS, "--max-running-requests", str(bs), "--cuda-graph-max-bs-decode", str(bs),
            "--max-total-tokens", str(kv or max(8192, bs * 640)), *extra]


PACK: dict[str, Path] = {}
PROMPTS: list[str] = []  # ["--prompts", FILE] for bench and scan on a `tiny --paths` build (moe5)  # "src": the working folder, "dest": the tarball under --out


def checkpoint() -> None:
    """Pack what exists now (temp file + rename): a call cut at its limit still returns the last one."""
    src, dest = PACK["src"], PACK["dest"]
    for f in src.rglob("*.log"):  # keep logs small: head and tail
        lines = f.read_text(errors="replace").splitlines()
        if len(lines) > 300:
            f.write_text("\n".join(lines[:100] + ["[...]"] + lines[-200:]) + "\n")
    tmp = dest.with_suffix(".part")
    with tarfile.open(tmp, "w:gz") as tf:
        tf.add(src, arcname=src.name)
    tmp.replace(dest)
    C.log(f"packed {dest.name}")


def scan_env() -> dict[str, str]:
    """The stand-in scan server runs this checkout's real hold decider (rehearsal only)."""
    if not REHEARSE:
        return {}
    return {"PYTHONPATH": f"{C.REPO / 'tests' / 'standins'}:{C.REPO}"}


def specs_for(groups: list[dict[str, Any]], out: Path, port: int) -> tuple[list[sweep.SweepSpec], list[Any]]:
    return C.configs_for(groups, out, port, rehearse=REHEARSE)


def bench_groups(specs: list[sweep.SweepSpec], started: dict[str, server.Server], out: Path) -> None:
    for spec in specs:
        sweep.run_sweep(spec, out / spec.name, factory=lambda cfg, _r: C.Prestarted(started[cfg.name]), log=C.log)
        for c in spec.configs:
            sv = started.get(f"{spec.name}-{c.slug}")
            if sv is not None and sv.is_running():
                C.scrape(sv, out / spec.name / "configs" / c.slug / "metrics.txt")


def plan_scan_8b(out: Path) -> dict[str, server.Server]:
    build({"8b": P08}, out)
    specs, cfgs = specs_for([C.group("static", "8b", "draft", [0, 2, 5], [1, 8, 32])], out, 31000)
    started = C.start_all(cfgs, stagger=0 if REHEARSE else 90)
    run_cli(scan_cmd("8b", "0-5", "1,8,32", out / "scan", 31100, bs=32), out / "scan.txt", timeout=330,
            env=scan_env())
    checkpoint()
    bench_groups(specs, started, out)
    return started


def transition(sv: server.Server, path: Path) -> None:
    """Phases of low and high load in one run on one server (benchmarks/transition.py reads it)."""
    C.run([*C.CLI, "bench", "--url", sv.url, *PROMPTS, "--concurrency", "1,32,8,64", "--runs", "3", "--warmup", "1",
           "--max-tokens", "256", "--ignore-eos", "--label", f"{sv.cfg.name} transition", "--out", str(path)],
          path.with_suffix(".txt"), timeout=150)


SCAN_R4 = C.REPO / "docs" / "data" / "h200-2026-12-01-r4" / "scan-8b" / "scan"


def adapt_groups(out: Path, last_static: int, env: dict[str, str] | None = None
                 ) -> tuple[list[sweep.SweepSpec], list[Any]]:
    """The 8B P 0.8 contenders: policy on the round-4 scan's table, SGLang's EMA with its default
    tiers and with the scan's tiers, static 5 and ``last_static`` steps (``env``: the policy's and
    static 5's, e.g. the probe toggle a counter check needs)."""
    build({"8b": P08}, out)
    scan_json = out / "scan.json"
    shutil.copy(SCAN_R4 / "scan.json", scan_json)
    shutil.copy(SCAN_R4 / "adaptive.json", out / "adaptive-scan.json")
    conc = [1, 8, 32, 64]
    pol = C.group("policy", "8b", "draft", [5], conc, env=env)
    pol["launch"]["policy"] = str(scan_json)
    groups = [pol,
              C.group("ema-default", "8b", "draft", [7], conc, extra=["--speculative-adaptive"]),
              C.group("static5", "8b", "draft", [5], conc, env=env),
              C.group("ema-scan", "8b", "draft", [5], conc, adaptive=str(out / "adaptive-scan.json")),
              C.group(f"static{last_static}", "8b", "draft", [last_static], conc)]
    return specs_for(groups, out, 31000)


def plan_adapt_8b(out: Path) -> dict[str, server.Server]:
    """Run-time step choosers on one machine: our policy on the scan's table, SGLang's EMA with its
    default tiers and with the tiers the scan wrote, and static 5 / 3 steps; each benched at steady
    loads 1 / 8 / 32 / 64 and on a transition workload, one server after the other."""
    specs, cfgs = adapt_groups(out, 3)
    started = C.start_all(cfgs, stagger=0 if REHEARSE else 90)
    for spec in specs:
        bench_groups([spec], started, out)
        sv = started.get(f"{spec.name}-{spec.configs[0].slug}")
        if sv is not None and sv.is_running():
            transition(sv, out / spec.name / "transition.json")
        checkpoint()
    return started


def plan_final(out: Path) -> dict[str, server.Server]:
    """The last call of round 4: chain vs trees on the tree draft (issue 24), then the MoE scan
    (issue 22). The disk holds one shape at a time: the tree models are deleted once their
    servers are benched and stopped, then the MoE is built and scanned alone on the GPU."""
    build({"tree": C.TREE}, out)
    trees = C.tree_group("trees", "tree", "draft", [(3, 1, 4), (3, 4, 13), (5, 4, 21)], [1, 8, 32])
    specs, cfgs = specs_for([trees], out, 31000)
    started = C.start_all(cfgs, stagger=0 if REHEARSE else 30)
    bench_groups(specs, started, out)
    checkpoint()
    for sv in started.values():
        sv.stop(grace=3)
    shutil.rmtree(C.WORK / "tree", ignore_errors=True)
    build({"moe": MOE}, out)
    run_cli(scan_cmd("moe", "0-4", "1,8", out / "scan-moe", 31100, bs=8), out / "scan-moe.txt", timeout=300,
            env=scan_env())
    checkpoint()
    return started


def set_arg(g: dict[str, Any], flag: str, value: str) -> dict[str, Any]:
    """Replace one server flag's value in a group (SGLang's argparse would take the last anyway)."""
    args = g["launch"]["extra_args"]
    i = args.index(flag)
    args[i + 1] = value
    return g


def build_parallel(models: dict[str, list[str]], out: Path) -> None:
    """Two builds at once (each mostly CPU: readout solve and writing shards)."""
    todo = {k: v for k, v in models.items() if not (C.WORK / k / "tiny.json").exists()}
    procs = {}
    for name, args in todo.items():
        shutil.rmtree(C.WORK / name, ignore_errors=True)
        args = [*args, *SMALL] if REHEARSE else args
        fh = open(out / f"build-{name}.txt", "w")
        procs[name] = (subprocess.Popen([*C.CLI, "tiny", "--out", str(C.WORK / name), *args],
                                        stdout=fh, stderr=subprocess.STDOUT), fh)
    for name, (pr, fh) in procs.items():
        rc = pr.wait()
        fh.close()
        C.log(f"build {name} -> exit {rc}")
        if rc:
            raise SystemExit(f"building {name} failed (see build-{name}.txt)")
    for name in models:
        shutil.copy(C.WORK / name / "tiny.json", out / f"tiny-{name}.json")


REGIONS = [*C.TREE, "--regions", "0.9,0.6,0.3", "--prompts", str(C.REPO / "examples" / "prompts-trees.jsonl")]


def plan_trees2(out: Path) -> dict[str, server.Server]:
    """Issue 24 after the tree-hook fix: tree probes on the GPU, the 5-step chain on the tree draft
    (the tree-derived chain's twin), topk 2 and 8, a second budget for topk 4; and a prompt-region
    build benched per category (easy / medium / hard walk different paths under one template)."""
    for old in ("8b", "moe"):
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    build_parallel({"tree": C.TREE, "regions": REGIONS}, out)
    trees = C.tree_group("trees", "tree", "draft", [(5, 1, 6), (5, 4, 21), (3, 2, 7), (3, 4, 8), (5, 8, 41)],
                         [1, 8, 32])
    reg = C.tree_group("regions", "regions", "draft", [(5, 4, 21)], [1])
    for g in (trees, reg):  # six 18 GB servers on one GPU: a smaller KV pool, a smaller reserve
        set_arg(set_arg(g, "--max-total-tokens", "16384"), "--mem-fraction-static", "0.9")
    specs, cfgs = specs_for([trees, reg], out, 31000)
    started = C.start_all(cfgs, stagger=0 if REHEARSE else 8)
    checkpoint()
    bench_groups([specs[0]], started, out)
    checkpoint()
    sv = started.get(f"regions-{specs[1].configs[0].slug}")
    if sv is not None and sv.is_running():
        rows = [json.loads(x) for x in (C.REPO / "examples" / "prompts-trees.jsonl").read_text().splitlines() if x]
        for cat in ("easy", "medium", "hard"):
            f = out / "regions" / f"prompts-{cat}.jsonl"
            f.write_text("".join(json.dumps(r) + "\n" for r in rows if r["category"] == cat))
            for conc in ("1", "8"):
                C.run([*C.CLI, "bench", "--url", sv.url, "--prompts", str(f), "--concurrency", conc,
                       "--runs", "2", "--warmup", "1", "--max-tokens", "256", "--ignore-eos",
                       "--label", f"regions {cat}", "--out", str(out / "regions" / f"{cat}-c{conc}.json")],
                      out / "regions" / f"{cat}-c{conc}.txt", timeout=90)
        C.scrape(sv, out / "regions" / "metrics.txt")
    checkpoint()
    return started


def plan_adapt2_8b(out: Path) -> dict[str, server.Server]:
    """Issue 25's transition workload, whole runs kept: our policy (the round-4 scan's table),
    SGLang's EMA with its default tiers and with the scan's tiers, static 5 and 4 steps; rounds of
    the same transition (1 -> 32 -> 8 -> 64), server order reversed each round against drift."""
    for old in ("tree", "regions", "moe"):
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    specs, cfgs = adapt_groups(out, 4)
    started = C.start_all(cfgs, stagger=0 if REHEARSE else 8)
    checkpoint()
    names = [(spec.name, started.get(f"{spec.name}-{spec.configs[0].slug}")) for spec in specs]
    rounds(names, 3, lambda name, sv, rnd: transition(sv, out / name / f"transition-r{rnd}.json"), DEADLINE[0])
    for name, sv in names:
        if sv is not None and sv.is_running():
            C.scrape(sv, out / name / "metrics.txt")
    return started


DEADLINE = [480.0]  # no new transition after this (s)
TOGGLE = {"EAGLE3_PROFILE_TOGGLE": "SIGUSR2"}  # the probes' flush for counter_check


def rounds(names: list[tuple[str, server.Server | None]], n: int, bench: Any, deadline: float) -> None:
    """``n`` rounds of ``bench(name, server, round)`` over the servers, the order reversed each
    round against drift; none started after ``deadline`` s."""
    for rnd in range(n):
        for name, sv in (names if rnd % 2 == 0 else names[::-1]):
            if time.monotonic() - C.T0 > deadline:
                C.log(f"deadline: round {rnd} {name} not run")
                continue
            if sv is not None and sv.is_running():
                bench(name, sv, rnd)
                checkpoint()


def plan_adapt3_8b(out: Path) -> dict[str, server.Server]:
    """adapt2-8b with the policy applied (round 5's ran static 5): the same five servers and
    transition rounds, then probes vs SGLang's counters on the policy and static 5 servers."""
    for old in ("tree", "regions", "moe"):
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    specs, cfgs = adapt_groups(out, 4, env=TOGGLE)
    started = C.start_all(cfgs, stagger=0 if REHEARSE else 8)
    checkpoint()
    names = [(spec.name, started.get(f"{spec.name}-{spec.configs[0].slug}")) for spec in specs]
    rounds(names, 4, lambda name, sv, rnd: transition(sv, out / name / f"transition-r{rnd}.json"), 465)
    for name, sv in names:
        if sv is not None and sv.is_running():
            if name in ("policy", "static5"):
                C.counter_check(sv, out / name / "counter-check.json")
            C.scrape(sv, out / name / "metrics.txt")
    checkpoint()
    return started


SCAN_MOE_R5 = C.REPO / "docs" / "data" / "h200-2026-12-02-r5" / "moe2" / "scan-moe"


def plan_moe3(out: Path) -> dict[str, server.Server]:
    """Issue 25 on the MoE shape, on round 5's MoE scan (steps 0..4 at 1 / 8 streams: 3 best at
    both): our policy and static 3 steps, then SGLang's EMA with its default tiers and with the
    scan's tiers (two MoE servers fit at once), each pair on 1 -> 8 streams, three rounds."""
    for old in ("8b", "tree", "regions"):
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    build({"moe": MOE}, out)
    shutil.copy(SCAN_MOE_R5 / "scan.json", out / "scan-moe.json")
    shutil.copy(SCAN_MOE_R5 / "adaptive.json", out / "adaptive-scan-moe.json")
    pol = C.group("policy", "moe", "draft", [4], [1, 8])
    pol["launch"]["policy"] = str(out / "scan-moe.json")
    pairs = [[pol, C.group("static3", "moe", "draft", [3], [1, 8])],
             [C.group("ema-default", "moe", "draft", [7], [1, 8], extra=["--speculative-adaptive"]),
              C.group("ema-scan", "moe", "draft", [4], [1, 8], adaptive=str(out / "adaptive-scan-moe.json"))]]
    return moe_pairs(out, pairs, [340, 500])


def moe_pairs(out: Path, pairs: list[list[dict[str, Any]]], deadlines: list[float], *,
              first_alone: bool = True, warm_up: bool = False) -> dict[str, server.Server]:
    """Two 57 GB MoE servers at a time: each pair started together, benched on the MoE ladder in
    three rounds (order reversed each round; none started after the pair's deadline), scraped and
    stopped before the next pair. ``first_alone=False`` once the MoE JIT cache is warm (a scan or
    an earlier call on this machine); ``warm_up``: one untimed short ladder per server first."""
    started: dict[str, server.Server] = {}

    def ladder(name: str, sv: server.Server, rnd: int) -> None:
        moe_ladder(out, name, sv, rnd)

    for i, groups in enumerate(pairs):
        specs, cfgs = specs_for(groups, out, 31000 + 10 * i)
        now = C.start_all(cfgs, stagger=0 if REHEARSE else 8, first_alone=first_alone)
        started.update(now)
        checkpoint()
        names = [(spec.name, now.get(f"{spec.name}-{spec.configs[0].slug}")) for spec in specs]
        if warm_up:
            for name, sv in names:
                if sv is not None and sv.is_running():
                    warm(out, name, sv)
        rounds(names, 3, ladder, deadlines[i])
        for name, sv in names:
            if sv is not None and sv.is_running():
                C.scrape(sv, out / name / "metrics.txt")
        checkpoint()
        for sv in now.values():
            sv.stop(grace=3)
    return started


def warm(out: Path, name: str, sv: server.Server) -> None:
    """One untimed short ladder: the first use of a prefill shape compiles a kernel (round 6: a
    1.6 s first TTFT on the first server benched in each MoE pair), here, not in round 0."""
    (out / name).mkdir(parents=True, exist_ok=True)
    C.run([*C.CLI, "bench", "--url", sv.url, *PROMPTS, "--concurrency", "1,8", "--runs", "1", "--warmup", "1",
           "--max-tokens", "32", "--ignore-eos", "--label", f"{name} warm-up", "--out", str(out / name / "warm.json")],
          out / name / "warm.txt", timeout=90)


def plan_trees3(out: Path) -> dict[str, server.Server]:
    """Issue 24's leftovers: the second budgets of topk 2 and 8 (5 x 2 x 11, 3 x 8 x 25), the
    chain servers at 3 and 5 steps beside 5 x 4 x 21 (tree-derived chains), benched at 1 / 8 / 32;
    then probes vs SGLang's counters over the same requests on every server (counter_check)."""
    for old in ("8b", "moe", "regions"):
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    build({"tree": C.TREE}, out)
    trees = C.tree_group("trees", "tree", "draft", [(5, 1, 6), (3, 1, 4), (5, 4, 21), (5, 2, 11), (3, 8, 25)],
                         [1, 8, 32], env=TOGGLE)
    set_arg(set_arg(trees, "--max-total-tokens", "16384"), "--mem-fraction-static", "0.9")
    specs, cfgs = specs_for([trees], out, 31000)
    started = C.start_all(cfgs, stagger=0 if REHEARSE else 8)
    checkpoint()
    bench_groups(specs, started, out)
    checkpoint()
    for c in specs[0].configs:
        sv = started.get(f"trees-{c.slug}")
        if sv is not None and sv.is_running():
            C.counter_check(sv, out / "trees" / "configs" / c.slug / "counter-check.json", conc=4, max_tokens=3072)
            checkpoint()
    return started


def plan_moe2(out: Path) -> dict[str, server.Server]:
    """The MoE scan (steps 0..4 at 1 / 8 streams, one start), then our policy on its table beside
    SGLang's EMA with its default tiers (two 57 GB servers fit at once), each on 1 -> 8, two rounds."""
    for old in ("8b", "tree", "regions"):
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    build({"moe": MOE}, out)
    run_cli(scan_cmd("moe", "0-4", "1,8", out / "scan-moe", 31100, bs=8), out / "scan-moe.txt", timeout=300,
            env=scan_env())
    checkpoint()
    scan_json = out / "scan-moe" / "scan.json"
    if not scan_json.exists():
        return {}
    pol = C.group("policy", "moe", "draft", [4], [1, 8])
    pol["launch"]["policy"] = str(scan_json)
    groups = [pol, C.group("ema-default", "moe", "draft", [7], [1, 8], extra=["--speculative-adaptive"])]
    specs, cfgs = specs_for(groups, out, 31000)
    started = C.start_all(cfgs, stagger=0 if REHEARSE else 8)
    checkpoint()
    names = [(spec.name, started.get(f"{spec.name}-{spec.configs[0].slug}")) for spec in specs]

    def ladder(name: str, sv: server.Server, rnd: int) -> None:
        moe_ladder(out, name, sv, rnd)
        C.scrape(sv, out / name / "metrics.txt")

    rounds(names, 2, ladder, float("inf"))
    return started


SCAN_DIR = [C.REPO / "docs" / "data" / "h200-2026-12-02-r7" / "moe4" / "scan-moe"]  # moe4b / moe5b: --scan
MOE_BUILDS = {"moe": MOE, "moep": [*MOE, "--paths", "32"]}
STATIC1: list[int | None] = [None]  # moe4b / moe5b: --static1, the static count beside the default tiers


def plan_moe4(out: Path, model: str = "moe") -> dict[str, server.Server]:
    """Issue 25 where the best step count changes with load: the MoE scan over 3..7 steps at 1 / 8
    streams (round 6's default tiers ran 7 steps at 1 stream, 5.5 % above a policy limited to 0..4;
    3 is best at 8), then our policy on it beside static 3 (the best at 8), three ladder rounds."""
    for old in {"8b", "tree", "regions", "moe", "moep"} - {model}:
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    build({model: MOE_BUILDS[model]}, out)
    run_cli(scan_cmd(model, "3-7", "1,8", out / "scan-moe", 31100, bs=8), out / "scan-moe.txt", timeout=360,
            env=scan_env())
    checkpoint()
    scan_json = out / "scan-moe" / "scan.json"
    if not scan_json.exists():
        return {}
    pol = C.group("policy", model, "draft", [7], [1, 8])
    pol["launch"]["policy"] = str(scan_json)
    return moe_pairs(out, [[pol, C.group("static3", model, "draft", [3], [1, 8])]], [530],
                     first_alone=False, warm_up=True)


def plan_moe4b(out: Path, model: str = "moe") -> dict[str, server.Server]:
    """moe4's other contenders, on its scan (``--scan``, default docs/data/h200-2026-12-02-r7/moe4/
    scan-moe): the static step count best at 1 stream beside SGLang's EMA with its default tiers,
    then the EMA with the tiers the scan wrote beside our policy again (the drift between pairs)."""
    for old in {"8b", "tree", "regions", "moe", "moep"} - {model}:
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    build({model: MOE_BUILDS[model]}, out)
    shutil.copy(SCAN_DIR[0] / "scan.json", out / "scan-moe.json")
    shutil.copy(SCAN_DIR[0] / "adaptive.json", out / "adaptive-scan-moe.json")
    doc = json.loads((out / "scan-moe.json").read_text())
    s1 = STATIC1[0] if STATIC1[0] is not None else int(doc["best"]["1"]["steps"])
    top = max(s for v in doc["adaptive"]["tiers"].values() for s in v)  # 0.5.16 starts at the largest
    pol = C.group("policy", model, "draft", [7], [1, 8])
    pol["launch"]["policy"] = str(out / "scan-moe.json")
    pairs = [[C.group(f"static{s1}", model, "draft", [s1], [1, 8]),
              C.group("ema-default", model, "draft", [7], [1, 8], extra=["--speculative-adaptive"])],
             [C.group("ema-scan", model, "draft", [top], [1, 8], adaptive=str(out / "adaptive-scan-moe.json")),
              pol]]
    return moe_pairs(out, pairs, [230, 470], first_alone=False, warm_up=True)


def plan_moe5(out: Path) -> dict[str, server.Server]:
    """moe4 on traffic that walks many paths (`tiny --paths 32`, docs/reference/tiny.md): the scan, the
    policy's online rates and every server's bench cycle through 32 prompts whose walks start at
    32 different points, so a step count's acceptance is no longer one stretch's (round 7: the
    policy's model was 4.7 % low for 3 steps on the one chat path, benchmarks/policy_path_bias.py)."""
    PROMPTS[:] = ["--prompts", str(C.WORK / "moep" / "prompts-paths.jsonl")]
    return plan_moe4(out, "moep")


def plan_moe5b(out: Path) -> dict[str, server.Server]:
    """moe4b on the paths build, on moe5's scan (give it with ``--scan``)."""
    PROMPTS[:] = ["--prompts", str(C.WORK / "moep" / "prompts-paths.jsonl")]
    return plan_moe4b(out, "moep")


def plan_long(out: Path) -> dict[str, server.Server]:
    """Issue 24's last miss and issue 25's 8-stream gap, one 8B-shape build after the other.
    Trees: one 3072-token request at one stream per server (three laps of the 1024-id cycle, not
    round 6's one 256-token stretch), the probes flushed around it (counter_check): the tree
    servers' chain replay against the chain servers' SGLang counter over the same tokens. Then the
    8B P 0.8 policy (round 4's table) beside static 5 on round 6's transition, four rounds."""
    for old in ("moe", "8b", "regions"):
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    build({"tree": C.TREE}, out)
    trees = C.tree_group("trees", "tree", "draft", [(5, 1, 6), (3, 1, 4), (5, 4, 21), (5, 2, 11)], [1], env=TOGGLE)
    set_arg(set_arg(trees, "--max-total-tokens", "16384"), "--mem-fraction-static", "0.9")
    specs, cfgs = specs_for([trees], out, 31000)
    started = C.start_all(cfgs, stagger=0 if REHEARSE else 8)
    checkpoint()
    for c in specs[0].configs:
        sv = started.get(f"trees-{c.slug}")
        if sv is not None and sv.is_running():
            (out / "trees" / c.slug).mkdir(parents=True, exist_ok=True)
            C.counter_check(sv, out / "trees" / c.slug / "long.json", conc=1, max_tokens=3072)
            checkpoint()
    for sv in started.values():
        sv.stop(grace=3)
    shutil.rmtree(C.WORK / "tree", ignore_errors=True)
    build({"8b": P08}, out)
    started.update(policy_beside_static5(out, "8b", 4, 520, first_alone=False))
    return started


def policy_beside_static5(out: Path, model: str, n: int, deadline: float, *, first_alone: bool = True
                          ) -> dict[str, server.Server]:
    """The 8B P 0.8 policy (round 4's table) and static 5 started together, one warm-up ladder
    each, then ``n`` rounds of the 1 -> 32 -> 8 -> 64 transition (none after ``deadline`` s)."""
    shutil.copy(SCAN_R4 / "scan.json", out / "scan.json")
    conc = [1, 8, 32, 64]
    pol = C.group("policy", model, "draft", [5], conc)
    pol["launch"]["policy"] = str(out / "scan.json")
    specs, cfgs = specs_for([C.group("static5", model, "draft", [5], conc), pol], out, 31100)
    started = C.start_all(cfgs, stagger=0 if REHEARSE else 8, first_alone=first_alone)
    checkpoint()
    names = [(spec.name, started.get(f"{spec.name}-{spec.configs[0].slug}")) for spec in specs]
    for name, sv in names:
        if sv is not None and sv.is_running():
            warm(out, name, sv)
    rounds(names, n, lambda name, sv, rnd: transition(sv, out / name / f"transition-r{rnd}.json"), deadline)
    for name, sv in names:
        if sv is not None and sv.is_running():
            C.scrape(sv, out / name / "metrics.txt")
    checkpoint()
    return started


def plan_8bp(out: Path) -> dict[str, server.Server]:
    """Issue 25's 8B goals the same day as moe5: the policy (round 4's table) beside static 5 on a
    ``tiny --paths 32`` build, round 6's transition (1 -> 32 -> 8 -> 64 streams) for as many rounds
    as fit, the order reversed each round. Run ``r`` of a level sends the same prompts to both
    servers, so the two compare run by run (round 7's -2.0 % at 64 streams was between two servers
    both running 5 steps)."""
    for old in {"8b", "tree", "regions", "moe", "moep"}:
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    PROMPTS[:] = ["--prompts", str(C.WORK / "8bp" / "prompts-paths.jsonl")]
    build({"8bp": [*P08, "--paths", "32"]}, out)
    return policy_beside_static5(out, "8bp", 8, 505)


def moe_ladder(out: Path, name: str, sv: server.Server, rnd: int) -> None:
    """The MoE plans' workload: 1 -> 8 streams, 3 runs a level, 256 tokens."""
    C.run([*C.CLI, "bench", "--url", sv.url, *PROMPTS, "--concurrency", "1,8", "--runs", "3", "--warmup", "1",
           "--max-tokens", "256", "--ignore-eos", "--label", f"{name} moe",
           "--out", str(out / name / f"transition-r{rnd}.json")], out / name / f"transition-r{rnd}.txt",
          timeout=120)


PLANS = {"scan-8b": plan_scan_8b, "adapt-8b": plan_adapt_8b, "final": plan_final,
         "trees2": plan_trees2, "adapt2-8b": plan_adapt2_8b, "moe2": plan_moe2,
         "adapt3-8b": plan_adapt3_8b, "moe3": plan_moe3, "trees3": plan_trees3,
         "moe4": plan_moe4, "moe4b": plan_moe4b, "long": plan_long, "moe5": plan_moe5, "moe5b": plan_moe5b,
         "8bp": plan_8bp}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True, choices=sorted(PLANS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--hard-stop", type=float, default=565)
    ap.add_argument("--rehearse", action="store_true", help="CPU: reduced shapes and stand-in servers")
    ap.add_argument("--scan", type=Path, default=None, help="moe4b / moe5b: the scan-moe folder to read")
    ap.add_argument("--static1", type=int, default=None,
                    help="moe4b / moe5b: the static step count to run (default: the scan's best at 1 stream)")
    a = ap.parse_args()
    STATIC1[0] = a.static1
    HARD_STOP[0] = a.hard_stop
    if a.scan is not None:
        SCAN_DIR[0] = a.scan.resolve()
    global REHEARSE
    if a.rehearse:
        REHEARSE = True
        C.WORK = Path(a.out) / "work"
    # work outside --out (only the tarball and the log travel back: at most 8 files come back)
    out = Path("/tmp/scan-campaign" if not REHEARSE else Path(a.out) / "work-out") / a.plan
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    PACK.update(src=out, dest=Path(a.out) / f"{a.plan}.tar.gz")

    def hard_stop(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"hard stop at {a.hard_stop:.0f} s")

    signal.signal(signal.SIGALRM, hard_stop)
    signal.alarm(int(a.hard_stop))
    C.WORK.mkdir(parents=True, exist_ok=True)
    C.run(["nvidia-smi", "--query-gpu=name,memory.used,memory.total,clocks.sm", "--format=csv"],
          out / "nvidia-smi.txt")
    started: dict[str, server.Server] = {}
    t0 = time.monotonic()
    try:
        started = PLANS[a.plan](out)
    except KeyboardInterrupt as exc:
        C.log(f"interrupted: {exc}")
    finally:
        signal.alarm(0)
        (out / "wall.json").write_text(json.dumps({"plan": a.plan, "wall_s": time.monotonic() - t0}))
        checkpoint()  # before the stops: a call cut while servers stop still has everything
        for sv in {id(x): x for x in [*LIVE, *started.values()]}.values():
            try:
                sv.stop(grace=3)
            except Exception:  # noqa: BLE001
                pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
