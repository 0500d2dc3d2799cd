"""The whole flow on one GPU, for docs/results.md: both probe routes, three timing modes,
profiling off vs on, oracle / random / partial drafts, a steps sweep with the one-run prediction,
and a byte-exact revert. Run on the H200 through tools/gpu/run.sh (see docs/results.md).

Start-up dominates on a fresh machine (SGLang JIT-compiles kernels during the first CUDA-graph
capture), so every server is started before any is measured: one first (it warms the JIT cache),
then the rest together; then each config is benchmarked alone while the others sit idle, through
the same code path as `sgl-eagle3 sweep` (sweep.run_sweep with a factory handing out the
already-started servers). Everything lands in OUT/e2e/, packed into OUT/e2e.tar.gz at the end.
--parallel starts all servers after the first at once (capped KV pools); --rounds N re-benches
every server in turn (OUT/e2e/rounds.json); --toggle-rounds N with the `toggle` group A/Bs the
probes on one server through EAGLE3_PROFILE_TOGGLE (OUT/e2e/toggle_ab.json).

    tools/gpu/run.sh python3 tools/gpu/e2e.py --out $OUT
    python3 tools/gpu/e2e.py --out /tmp/x --rehearse     # CPU: stand-in servers, same plumbing
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sglang_eagle3_ext import tiny  # noqa: E402
from sglang_eagle3_ext.measure import bench  # noqa: E402
from sglang_eagle3_ext.runtime.sglang_env import locate  # noqa: E402
from sglang_eagle3_ext.serve import flags, server  # noqa: E402
from sglang_eagle3_ext.tune import sweep  # noqa: E402

T0 = time.monotonic()
P_PARTIAL = 0.6
BENCH = {"runs": 5, "warmup": 1, "max_tokens": 384, "ignore_eos": True}
GPU_ARGS = ["--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend",
            "none", "--mem-fraction-static", "0.1", "--max-running-requests", "8",
            "--cuda-graph-max-bs-decode", "8", "--disable-prefill-cuda-graph", "--enable-metrics"]
# --parallel: SGLang 0.5.16 budgets the KV pool as free memory minus pre-load free memory x
# (1 - mem_fraction_static) (mem_cache/kv_cache_configurator.py, _profile_available_bytes), so a
# neighbour allocating during our load shrinks our pool. A large fraction leaves a wide margin and
# a fixed token cap keeps every pool small: servers may then start all at once.
PARALLEL_ARGS = {"--mem-fraction-static": "0.8", "--max-total-tokens": "32768"}


def gpu_args(parallel: bool) -> list[str]:
    if not parallel:
        return list(GPU_ARGS)
    args = list(GPU_ARGS)
    i = args.index("--mem-fraction-static")
    del args[i:i + 2]
    for k, v in PARALLEL_ARGS.items():
        args += [k, v]
    return args


def log(msg: str) -> None:
    print(f"[e2e {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def sh(cmd: list[str], out: Path, name: str) -> str:
    """Run one of our CLI commands, keep its output as OUT/e2e/<name>.txt, echo it."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    text = f"$ {' '.join(cmd)}\n{p.stdout}{p.stderr}[exit {p.returncode}]\n"
    (out / f"{name}.txt").write_text(text)
    print(text, flush=True)
    return p.stdout


def tree_hashes(pkg: Path) -> dict[str, str]:
    return {str(f.relative_to(pkg)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(pkg.rglob("*.py")) if "__pycache__" not in f.parts}


class Prestarted:
    """A server.Server that was started earlier; sweep's start() only waits for health."""

    def __init__(self, srv: server.Server) -> None:
        self.srv = srv
        self.url, self.log_path = srv.url, srv.log_path

    def start(self, wait: bool = True) -> Prestarted:
        self.srv.wait_healthy()
        return self

    keep = False  # --rounds: the servers stay up after their sweep for the interleaved rounds

    def stop(self) -> None:
        if not self.keep:
            self.srv.stop()

    def tail(self) -> list[str]:
        return self.srv.tail()


def copy_pycache(src: Path, dst: Path) -> None:
    """Give the plugin route's plain SGLang copy the bytecode the first server just compiled.

    copytree kept the sources' mtimes, so these .pyc files stay valid there (the patched files'
    do not match and are recompiled); without them that server spends ~30 s compiling SGLang.
    """
    for d in src.rglob("__pycache__"):
        target = dst / d.relative_to(src)
        if target.parent.is_dir():
            shutil.copytree(d, target, dirs_exist_ok=True)


def group(name: str, models: Path, out: Path, *, matrix_steps: list[int], baseline: bool = False,
          profile: bool = True, mode: str | None = "events", env: dict[str, str] | None = None,
          every: int = 50, parallel: bool = False) -> sweep.SweepSpec:
    doc: dict[str, Any] = {
        "name": name,
        "launch": {"model": str(models / "target"), "draft": str(models / "draft"),
                   "algorithm": "EAGLE3", "timeout": 900,
                   "extra_args": gpu_args(parallel), "env": {"HF_HUB_OFFLINE": "1", **(env or {})}},
        "matrix": {"steps": matrix_steps, "topk": [1]},
        "baseline": baseline, "profile": profile, "profile_every": every, "bench": BENCH,
    }
    if mode:
        doc["profile_mode"] = mode
    path = out / f"sweep-{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return sweep.load_spec(path)


def run_stats(values: list[float]) -> dict[str, Any]:
    """bench.summarize's figures for one server's decode tok/s runs, plus the runs themselves."""
    s = bench.summarize(values)
    return {"runs": len(values), "mean": s["avg"], "median": s["median"], "stdev": s["stdev"],
            "values": [round(x, 1) for x in values]}


def interleave(started: dict[str, server.Server], docs: dict[str, dict], rounds: int, out: Path,
               deadline: float) -> None:
    """Bench each healthy server once per round, in turn: every config sees the same machine
    drift, so the tok/s ratios between them are fair (OUT/e2e/rounds.json)."""
    names = {g if len(d["configs"]) == 1 else f"{g}/{r['name']}": (g, r)
             for g, d in docs.items() for r in d["configs"] if r["status"] == "ok"}
    per: dict[str, list[float]] = {k: [] for k in names}
    for rnd in range(rounds):
        if time.monotonic() - T0 > deadline:
            log(f"rounds: deadline after {rnd} round(s)")
            break
        for key, (_g, r) in names.items():
            srv = started[r["launch"]["name"]] if r.get("launch", {}).get("name") in started else None
            if srv is None:
                continue
            opts = bench.BenchOptions(url=srv.url, runs=2, warmup=0, max_tokens=BENCH["max_tokens"],
                                      ignore_eos=True, label=key)
            res = bench.run_bench(opts)
            per[key] += [x["decode_tok_s"] for x in res["runs"] if x["decode_tok_s"]]

    table = {k: run_stats(v) for k, v in per.items() if v}
    ref = table.get("off")
    for k, t in table.items():
        if ref:
            t["ratio_to_off_mean"] = t["mean"] / ref["mean"]
            t["ratio_to_off_median"] = t["median"] / ref["median"]
        log(f"rounds {k:<12} n={t['runs']:<3} mean {t['mean']:7.1f} median {t['median']:7.1f} tok/s"
            + (f"  ratio to off {t['ratio_to_off_mean']:.3f} (median {t['ratio_to_off_median']:.3f})"
               if ref else ""))
    (out / "rounds.json").write_text(json.dumps(table, indent=2))


def toggle_ab(srv: server.Server, rounds: int, out: Path, deadline: float) -> None:
    """Probes on vs off on ONE server (EAGLE3_PROFILE_TOGGLE=SIGUSR2 pauses/resumes them), so
    server-to-server spread (up to 9% between two identical servers here) drops out. The order
    alternates per round (on,off / off,on) against drift. OUT/e2e/toggle_ab.json."""
    import signal

    pids = server.scheduler_pids(srv.pgid)
    if not pids:
        log("toggle A/B: no sglang::scheduler process found; skipped")
        return
    state, per = "on", {"on": [], "off": []}

    def flip() -> None:
        nonlocal state
        for pid in pids:
            os.kill(pid, signal.SIGUSR2)
        state = "off" if state == "on" else "on"
        time.sleep(0.2)

    def measure() -> None:
        opts = bench.BenchOptions(url=srv.url, runs=2, warmup=0, max_tokens=BENCH["max_tokens"],
                                  ignore_eos=True, label=f"toggle-{state}")
        per[state] += [x["decode_tok_s"] for x in bench.run_bench(opts)["runs"] if x["decode_tok_s"]]

    def report(final: bool) -> None:
        res: dict[str, Any] = {k: run_stats(v) for k, v in per.items() if v}
        if "on" in res and "off" in res:
            on_, off_ = res["on"], res["off"]
            res["ratio_on_off_mean"] = on_["mean"] / off_["mean"]
            res["ratio_on_off_median"] = on_["median"] / off_["median"]
            res["ratio_se"] = (on_["stdev"] ** 2 / on_["runs"] + off_["stdev"] ** 2 / off_["runs"]) ** 0.5 / off_["mean"]
            if final:
                log(f"toggle A/B on one server ({done} rounds, scheduler pids {pids}): on {on_['mean']:.1f} "
                    f"off {off_['mean']:.1f} tok/s; ratio {res['ratio_on_off_mean']:.3f} "
                    f"(median {res['ratio_on_off_median']:.3f}, +- {res['ratio_se']:.3f} SE)")
        (out / "toggle_ab.json").write_text(json.dumps(res, indent=2))  # each round: a cut run keeps it

    done = 0
    for _ in range(rounds):
        if time.monotonic() - T0 > deadline:
            break
        measure()
        flip()
        measure()
        done += 1  # the state stays flipped: the next round starts with the other one
        report(final=False)
    if state == "off":
        flip()
    report(final=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rehearse", action="store_true", help="CPU: stand-in servers, no SGLang GPU run")
    ap.add_argument("--deadline", type=float, default=540, help="skip optional groups past this (s)")
    ap.add_argument("--parallel", action="store_true",
                    help="start every server after the first at once (capped KV pools; see PARALLEL_ARGS)")
    ap.add_argument("--rounds", type=int, default=0,
                    help="after the sweeps, bench every healthy server again, round-robin, this many "
                         "rounds (tok/s ratios free of drift between the servers' own bench slots)")
    ap.add_argument("--toggle-rounds", type=int, default=0,
                    help="with the 'toggle' group: probes on/off A/B rounds on that one server")
    ap.add_argument("--groups", default="core,sync,wall,off,plugin,oracle,random",
                    help="which groups to run, in this order (the first group's 2nd config starts alone)")
    a = ap.parse_args()
    out = Path(a.out) / "e2e"
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/e2e-work") if not a.rehearse else out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    env = locate(None)
    log(f"SGLang {env.version} at {env.package_dir}; families {env.families}")
    cli = [sys.executable, "-m", "sglang_eagle3_ext"]

    # 1. tiny models, built here with this machine's torch/transformers
    models = {}
    for acc in ("0.6", "oracle", "random"):
        t = time.monotonic()
        models[acc] = tiny.build(work / f"tiny-{acc}", acc).root
        log(f"tiny models ({acc}) in {time.monotonic() - t:.1f} s")

    # 2. plugin route needs an unpatched SGLang: a plain copy that goes first on PYTHONPATH
    plain = work / "plain"
    shutil.copytree(env.package_dir, plain / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    root: list[str] = []
    if a.rehearse:  # never touch the dev venv's SGLang: patch a copy instead
        shutil.copytree(plain, work / "site")
        env = locate(work / "site")
        root = ["--sglang-root", str(work / "site")]
    before = tree_hashes(env.package_dir)
    sh(cli + ["patch", "apply", *root], out, "patch-apply")
    sh(cli + ["patch", "status", *root], out, "patch-status")
    sh(cli + ["doctor", *root], out, "doctor")
    pp = os.pathsep.join([str(REPO), str(plain), *filter(None, [os.environ.get("PYTHONPATH")])])
    plugin_env = {"PYTHONPATH": pp}

    m6 = models["0.6"]
    def grp(name: str, models_: Path, **kw: Any) -> sweep.SweepSpec:
        return group(name, models_, out, parallel=a.parallel, **kw)

    known = {
        "core": lambda: grp("core", m6, matrix_steps=[1, 2, 3, 4], baseline=True),  # patch
        "sync": lambda: grp("sync", m6, matrix_steps=[2], mode="sync"),
        "wall": lambda: grp("wall", m6, matrix_steps=[2], mode="wall"),
        "off": lambda: grp("off", m6, matrix_steps=[2], profile=False, mode=None),
        "plugin": lambda: grp("plugin", m6, matrix_steps=[2], env=plugin_env),  # plugin route
        "oracle": lambda: grp("oracle", models["oracle"], matrix_steps=[2]),
        "random": lambda: grp("random", models["random"], matrix_steps=[2]),
        "every100": lambda: grp("every100", m6, matrix_steps=[2], every=100),
        "on": lambda: grp("on", m6, matrix_steps=[2]),  # events, deferred window reads (default)
        "now": lambda: grp("now", m6, matrix_steps=[2], env={"EAGLE3_PROFILE_DEFER": "0"}),
        # A/A controls: a second server of the same config shows the server-to-server spread
        "off2": lambda: grp("off2", m6, matrix_steps=[2], profile=False, mode=None),
        "on2": lambda: grp("on2", m6, matrix_steps=[2]),
        "toggle": lambda: grp("toggle", m6, matrix_steps=[2], env={"EAGLE3_PROFILE_TOGGLE": "SIGUSR2"}),
        "wall100": lambda: grp("wall100", m6, matrix_steps=[2], mode="wall", every=100),
    }
    groups = [known[g.strip()]() for g in a.groups.split(",")]

    # 3. start every server: the first alone (JIT warm-up), then all the others together
    started: dict[str, server.Server] = {}
    port = 31000
    cfgs = []
    for g in groups:
        for c in g.configs:
            cfg = sweep.launch_config(g, c, out / g.name / "configs" / c.slug)
            cfg = server.override(cfg, port=port, sglang_check=False)
            if a.rehearse:
                cfg = server.override(cfg, server_module="standin_openai",
                                      extra_args=[*cfg.extra_args, "--interval-ms", "1"],
                                      env={**cfg.env, "PYTHONPATH": str(REPO / "tests")})
            else:
                flags.validate(cfg, env)
            port += 1
            cfgs.append(cfg)
    # Waves: 1) one spec server alone (warms SGLang's JIT kernel cache); 2) one server per
    # distinct shape; 3) the rest, whose kernels now exist. Within a wave each server starts once
    # the previous one has sized its KV pool: SGLang budgets the pool from the free memory it
    # measured before loading, and a neighbour allocating in between fails it (seen on the H200).
    spec_first = next(i for i, c in enumerate(cfgs) if not c.no_spec)
    shapes: set[tuple] = {(cfgs[spec_first].no_spec, cfgs[spec_first].steps)}
    wave2, wave3 = [], []
    for i, c in enumerate(cfgs):
        if i == spec_first:
            continue
        key = (c.no_spec, c.steps)
        (wave3 if key in shapes else wave2).append(c)
        shapes.add(key)
    waves = [w for w in ([cfgs[spec_first]], wave2, wave3) if w]
    failed = []
    for i, wave in enumerate(waves, 1):
        t = time.monotonic()
        if i == 2:
            copy_pycache(env.package_dir, plain / "sglang")
        for cfg in wave:
            srv = started[cfg.name] = server.Server(cfg).start(wait=False)
            until = time.monotonic() + (0 if a.parallel and i > 1 else 90)
            while time.monotonic() < until and srv.is_running():
                log_text = srv.log_path.read_text(errors="replace") if srv.log_path.exists() else ""
                if "Memory pool end" in log_text or a.rehearse:
                    break
                time.sleep(0.5)
        for cfg in wave:
            try:
                started[cfg.name].wait_healthy()
            except Exception as exc:  # noqa: BLE001 - sweep records the failure for that config
                failed.append(cfg.name)
                log(f"{cfg.name} failed to start: {str(exc).splitlines()[0]}")
        log(f"wave {i}: {len(wave)} server(s) started in {time.monotonic() - t:.0f} s")

    Prestarted.keep = a.rounds > 0 or a.toggle_rounds > 0

    def factory(cfg: server.LaunchConfig, _root: str | None) -> Prestarted:
        return Prestarted(started[cfg.name])

    # 4. bench each config alone, in priority order, through sweep's own runner
    docs: dict[str, dict] = {}
    try:
        for g in groups:
            if time.monotonic() - T0 > a.deadline:
                log(f"deadline: skipping group {g.name}")
                continue
            docs[g.name] = sweep.run_sweep(g, out / g.name, factory=factory, log=log)
        if a.rounds:
            interleave(started, docs, a.rounds, out, deadline=a.deadline + 40)
        tog = [r["launch"]["name"] for r in (docs.get("toggle") or {}).get("configs", [])
               if r["status"] == "ok" and r.get("launch", {}).get("name") in started]
        if a.toggle_rounds and tog:
            toggle_ab(started[tog[0]], a.toggle_rounds, out, deadline=a.deadline + 15)
    finally:
        for s in started.values():
            try:
                s.stop()
            except Exception:  # noqa: BLE001
                pass

    # 5. revert and prove the install is byte-identical
    sh(cli + ["patch", "revert", *root], out, "patch-revert")
    after = tree_hashes(env.package_dir)
    same = before == after
    diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    log(f"revert byte-identical: {same} ({len(before)} .py files; differing: {diff[:5]})")

    # 6. reports with our own commands
    if "core" in docs:
        sh(cli + ["compare", str(out / "core" / "results.json")], out, "compare-core")
        an = sweep.analyse(docs["core"])
        (out / "analysis-core.json").write_text(json.dumps(an, indent=2))
        print(json.dumps(an, indent=2)[:4000])
        try:
            from sglang_eagle3_ext.measure import plot

            plot.plots(docs["core"], out)
        except Exception as exc:  # noqa: BLE001 - a plot is optional
            log(f"plots skipped: {exc}")
    profs = {}
    for gname, slug_hint in (("core", "-s2-"), ("sync", ""), ("wall", ""), ("plugin", ""),
                             ("every100", ""), ("wall100", ""), ("on", ""), ("now", ""), ("on2", ""), ("toggle", ""), ("oracle", ""), ("random", "")):
        for p in sorted((out / gname / "configs").glob("*/prof.jsonl")):
            if slug_hint in p.parent.name:
                profs[f"{gname}/{p.parent.name}"] = p
    if profs:
        sh(cli + ["profile", *map(str, profs.values())], out, "profile-modes")
    big = sorted((out / "core" / "configs").glob("*-s4-*/prof.jsonl"))
    if big:
        sh(cli + ["profile", str(big[0]), "--predict"], out, "profile-predict")
    summary = {
        "sglang": env.version, "elapsed_s": round(time.monotonic() - T0, 1), "failed_start": failed,
        "revert_byte_identical": same, "revert_diff": diff,
        "rounds": json.loads((out / "rounds.json").read_text()) if (out / "rounds.json").exists() else None,
        "toggle_ab": (json.loads((out / "toggle_ab.json").read_text())
                      if (out / "toggle_ab.json").exists() else None),
        "groups": {k: [{"name": r["name"], "status": r["status"],
                        "tok_s": ((r.get("bench") or {}).get("summary") or {}).get("decode_tok_s"),
                        "accept_sglang": ((r.get("bench") or {}).get("summary") or {}).get("accept_length"),
                        "profile": r.get("profile"), "error": r.get("error")}
                       for r in d["configs"]] for k, d in docs.items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    with tarfile.open(Path(a.out) / "e2e.tar.gz", "w:gz") as tf:
        tf.add(out, arcname="e2e", filter=lambda ti: None if "/work" in ti.name else ti)
    for f in ("summary.json", "tok_s.png", "phases.png"):
        if (out / f).exists():
            shutil.copy(out / f, Path(a.out) / f)
    log("done")
    return 0 if same and not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
