"""Real-shape runs on the lent H200 (docs/results.md, round 3): one plan per device call.

Every plan builds its models with our own `sgl-eagle3 tiny --shape ...` (skipped when a previous
call on the same warm machine left them in /tmp/campaign), starts its servers (the first alone,
so SGLang's JIT kernel cache is warm, then the rest one after another as soon as the previous one
has sized its KV pool), then benches each server alone with our `bench` (the others sit idle),
and scrapes /metrics. Analysis happens on the CPU machine afterwards (`sgl-eagle3 profile`,
`compare`, ...): only raw data travels back, packed as OUT/<plan>.tar.gz.

    tools/gpu/run.sh python3 tools/gpu/campaign.py --plan 8b-p08 --out $OUT --deadline 560

Servers outlive nothing: every one is stopped before the script returns.
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
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from sglang_eagle3_ext.serve import server  # noqa: E402
from sglang_eagle3_ext.tune import sweep  # noqa: E402

T0 = time.monotonic()
WORK = Path("/tmp/campaign")
CLI = [sys.executable, "-m", "sglang_eagle3_ext"]
# What the carried bundle supports (reference/gpu-h200-sglang.md) plus a capped KV pool, so that
# several 8B servers fit on one H200 (~16 GB weights + 2 GB draft + KV + graphs each).
BASE_ARGS = ["--attention-backend", "triton", "--sampling-backend", "pytorch",
             "--grammar-backend", "none", "--disable-prefill-cuda-graph", "--enable-metrics",
             "--mem-fraction-static", "0.85"]


def log(msg: str) -> None:
    print(f"[campaign {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def run(cmd: list[str], out: Path | None = None, timeout: float = 300, env: dict | None = None) -> int:
    t = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})})
        text, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as exc:
        text, rc = f"{exc.stdout or ''}{exc.stderr or ''}\n[timeout after {timeout} s]", 124
    except OSError as exc:
        text, rc = str(exc), 127
    if out is not None:
        out.write_text(f"$ {' '.join(cmd)}\n{text}\n[exit {rc}, {time.monotonic() - t:.1f} s]\n")
    last = [ln for ln in text.strip().splitlines() if ln.strip()][-3:]
    log(f"{Path(cmd[min(3, len(cmd) - 1)]).name} -> exit {rc} ({time.monotonic() - t:.1f} s): "
        + " | ".join(last)[:300])
    return rc


# --------------------------------------------------------------------------------------------
# Plans: the models to build and the sweep groups (one sweep YAML each, run by our own `sweep`
# code with servers started beforehand). Extras run on a group's servers after its sweep.

BENCH = {"runs": 3, "warmup": 1, "max_tokens": 256, "ignore_eos": True}


def group(name: str, models: str, draft: str | None, steps: list[int], conc: list[int], *,
          aux: str | None = None, adaptive: str | None = None, extra: list[str] = (),
          every: int = 50, env: dict[str, str] | None = None) -> dict[str, Any]:
    bs = max(8, max(conc))
    args = [*BASE_ARGS, "--max-running-requests", str(bs), "--cuda-graph-max-bs-decode", str(bs),
            "--max-total-tokens", str(max(8192, bs * 640)), *extra]
    launch: dict[str, Any] = {"model": str(WORK / models / "target"), "timeout": 900,
                              "extra_args": args, "sglang_check": False,
                              "env": {"HF_HUB_OFFLINE": "1", "EAGLE3_PROFILE_METRICS": "1", **(env or {})}}
    if draft:
        launch["draft"] = str(WORK / models / draft)
    if aux:
        launch["aux_layers"] = aux
    if adaptive:
        launch["adaptive"] = str(REPO / adaptive)
    return {"name": name, "launch": launch, "matrix": {"steps": steps, "topk": [1]}, "baseline": 0 in steps,
            "concurrency": conc, "profile": True, "profile_every": every, "profile_mode": "events",
            "bench": dict(BENCH)}


PARTIAL = ["--shape", "llama3-8b", "--acceptance", "0.6,0.8"]
WIRED = ["--shape", "llama3-8b", "--acceptance", "0.8", "--trained-on", "2,16,29"]
PLANS: dict[str, Any] = {
    # issue 14 sweep (P 0.8, steps 0..5), 15 fidelity at 1 and 8 streams (plugin route) and
    # bench_serving, 16 ladder, 19 metrics
    "8b-p08": lambda: {"route": "plugin", "build": {"8b": PARTIAL},
                       "groups": [group("p08", "8b", "draft-0.8", [0, 1, 2, 3, 4, 5], [1, 8, 32])],
                       "bench_serving": "p08-eagle3-s3-k1-d4-no-nccl", "toggle": None},
    # the wiring table (issue 14), the source-patch route + probe cost (15), adaptive tiers (16)
    "8b-wire": lambda: {"route": "patch", "build": {"8b": PARTIAL, "wire": WIRED},
                        "groups": [
                            group("wire-default", "wire", "draft", [3], [1]),
                            group("wire-fixed", "wire", "draft", [3], [1], aux="2,16,29"),
                            group("wire-off1", "wire", "draft", [3], [1], aux="1,15,28"),
                            group("p06", "8b", "draft-0.6", [3], [1, 8],
                                  env={"EAGLE3_PROFILE_TOGGLE": "SIGUSR2"}),
                            group("adapt-ours", "8b", "draft-0.8", [5], [1, 8, 32],
                                  adaptive="docs/data/h200-2026-12-01/adaptive-p08.json"),
                            group("adapt-sglang", "8b", "draft-0.8", [7], [1, 8, 32],
                                  extra=["--speculative-adaptive"]),
                        ],
                        "bench_serving": None, "toggle": "p06-eagle3-s3-k1-d4-no-nccl"},
    "moe": lambda: {"route": "plugin", "build": {"moe": ["--shape", "moe", "--acceptance", "0.8"]},
                    "clean": ["8b", "wire"],
                    "groups": [group("moe", "moe", "draft", [0, 2], [1, 8])],
                    "bench_serving": None, "toggle": None},
}


# issue 24: chain or tree per load on the llama3-8b tree draft (tools/gpu/trees_plan.md)
TREE = ["--shape", "llama3-8b", "--acceptance", "0.7", "--alternatives", "0.5,0.3"]
TREE_CONFIGS = [(3, 1, 4), (5, 1, 6), (3, 2, 7), (3, 4, 13), (5, 4, 21), (5, 8, 41)]


def tree_group(name: str, models: str, draft: str, configs: list[tuple[int, int, int]],
               conc: list[int], env: dict[str, str] | None = None) -> dict[str, Any]:
    """A group whose servers are (steps, topk, draft tokens) trees (sweep matrix.trees)."""
    g = group(name, models, draft, [], conc, env=env)
    g["matrix"] = {"trees": [list(c) for c in configs]}
    g["baseline"] = False
    return g


PLANS["trees"] = lambda: {"route": "plugin", "build": {"tree": TREE}, "clean": ["moe"],
                          "groups": [tree_group("trees", "tree", "draft", TREE_CONFIGS, [1, 8, 32])],
                          "bench_serving": None, "toggle": None}


def build(models: dict[str, list[str]], out: Path) -> None:
    for name, args in models.items():
        folder = WORK / name
        if (folder / "tiny.json").exists():
            log(f"models {name}: already built on this machine")
        else:
            shutil.rmtree(folder, ignore_errors=True)
            rc = run(CLI + ["tiny", "--out", str(folder), *args], out / f"build-{name}.txt", timeout=600)
            if rc:
                raise SystemExit(f"building {name} failed (see build-{name}.txt)")
        shutil.copy(folder / "tiny.json", out / f"tiny-{name}.json")


class Prestarted:
    """A server started before its sweep: sweep's start() only waits; stop() waits for us."""

    def __init__(self, sv: server.Server) -> None:
        self.srv, self.url, self.log_path = sv, sv.url, sv.log_path

    def start(self, wait: bool = True) -> Prestarted:
        self.srv.wait_healthy()
        return self

    def stop(self) -> None:
        pass  # every server is stopped at the end, after the extras

    def tail(self) -> list[str]:
        return self.srv.tail()


def configs_for(groups: list[dict[str, Any]], out: Path, port: int, *,
                rehearse: bool = False) -> tuple[list[sweep.SweepSpec], list[server.LaunchConfig]]:
    """One sweep YAML per group (written under OUT/<group>), its launch configs on consecutive
    ports. ``policy:`` is applied here as flags.validate applies it for `launch` (the servers
    start without validate, and Server refuses a policy left unapplied); ``rehearse``: the CPU
    stand-in server instead of SGLang."""
    specs, cfgs = [], []
    for g in groups:
        (out / g["name"]).mkdir(parents=True, exist_ok=True)
        path = out / g["name"] / "sweep.yaml"
        path.write_text(yaml.safe_dump(g, sort_keys=False))
        spec = sweep.load_spec(path)
        specs.append(spec)
        for c in spec.configs:
            cfg = sweep.launch_config(spec, c, out / g["name"] / "configs" / c.slug)
            cfg = server.override(cfg, port=port)
            if cfg.policy:
                from sglang_eagle3_ext.runtime.sglang_env import locate
                from sglang_eagle3_ext.serve import flags
                from sglang_eagle3_ext.serve.policy_launch import apply_policy

                for note in apply_policy(cfg, locate(None), flags.extra_flags(list(cfg.extra_args))):
                    log(note)
            if rehearse:
                cfg = server.override(cfg, server_module="standin_openai",
                                      extra_args=[*cfg.extra_args, "--interval-ms", "2", "--spec", "metrics"],
                                      env={**cfg.env, "PYTHONPATH": str(REPO / "tests")})
            cfgs.append(cfg)
            port += 1
    return specs, cfgs


def start_all(cfgs: list[server.LaunchConfig], stagger: float = 120, first_alone: bool = True
              ) -> dict[str, server.Server]:
    """The first alone (it warms the JIT kernel cache; ``first_alone=False`` where an earlier
    server of the same shape already did), then each next one as soon as the previous has sized
    its KV pool (SGLang budgets it from the free memory measured before loading)."""
    started: dict[str, server.Server] = {}
    for i, cfg in enumerate(cfgs):
        t = time.monotonic()
        sv = started[cfg.name] = server.Server(cfg).start(wait=False)
        if i == 0 and first_alone:
            try:
                sv.wait_healthy()
                log(f"{cfg.name} healthy in {time.monotonic() - t:.0f} s (first server)")
            except Exception as exc:  # noqa: BLE001
                log(f"{cfg.name} failed: {str(exc).splitlines()[0]}")
            continue
        until = time.monotonic() + stagger
        while time.monotonic() < until and sv.is_running():
            text = sv.log_path.read_text(errors="replace") if sv.log_path.exists() else ""
            if "Memory pool end" in text or "KV Cache is allocated" in text:
                break
            time.sleep(0.5)
    for name, sv in started.items():
        try:
            sv.wait_healthy()
        except Exception as exc:  # noqa: BLE001
            log(f"{name} failed: {str(exc).splitlines()[0]}")
    log(f"{sum(s.is_running() for s in started.values())}/{len(started)} servers healthy")
    return started


def scrape(sv: server.Server, path: Path) -> None:
    try:
        with urllib.request.urlopen(sv.url + "/metrics", timeout=10) as r:
            path.write_bytes(r.read())
    except Exception as exc:  # noqa: BLE001
        log(f"/metrics of {sv.cfg.name}: {exc}")


def bench_serving(sv: server.Server, out: Path) -> None:
    """SGLang's own client against the same server (the bundle lacks HF datasets: a stand-in)."""
    env = {"PYTHONPATH": f"{REPO / 'tools' / 'gpu' / 'standins'}:{os.environ.get('PYTHONPATH', '')}"}
    for c in (1, 8):
        run([sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", "127.0.0.1",
             "--port", str(sv.cfg.port), "--dataset-name", "random-ids", "--random-input-len", "64",
             "--random-output-len", "256", "--random-range-ratio", "1", "--num-prompts", str(3 * c + 1),
             "--max-concurrency", str(c), "--tokenizer", str(sv.cfg.model),
             "--output-file", str(out / f"bench_serving.c{c}.jsonl")],
            out / f"bench_serving.c{c}.txt", timeout=180, env=env)


def toggle_ab(sv: server.Server, rounds: int, out: Path, deadline: float) -> None:
    """Probes on vs off on ONE server (EAGLE3_PROFILE_TOGGLE=SIGUSR2), the order alternating per
    round against drift; decode tok/s of every run kept (OUT/toggle_ab.json)."""
    pids = server.scheduler_pids(sv.pgid)
    res: dict[str, Any] = {"pids": pids, "on": [], "off": []}
    state = "on"
    for r in range(rounds):
        if time.monotonic() - T0 > deadline or not pids:
            break
        for _ in range(2):
            f = out / f"toggle-{r}-{state}.json"
            run(CLI + ["bench", "--url", sv.url, "--runs", "2", "--warmup", "0", "--max-tokens", "256",
                       "--ignore-eos", "--out", str(f)], None, timeout=120)
            if f.exists():
                doc = json.loads(f.read_text())
                res[state] += [x.get("decode_tok_s") for x in doc.get("runs", []) if x.get("decode_tok_s")]
                f.unlink()
            for pid in pids:
                os.kill(pid, signal.SIGUSR2)
            state = "off" if state == "on" else "on"
            time.sleep(0.2)
        (out / "toggle_ab.json").write_text(json.dumps(res, indent=2))
    if state == "off":
        for pid in pids:
            os.kill(pid, signal.SIGUSR2)


def _flush_probes(pids: list[int]) -> None:
    """Pause then resume the probes (EAGLE3_PROFILE_TOGGLE=SIGUSR2): the resume writes the partial
    window, so every verify so far is in the records. Only while the server is idle."""
    for _ in range(2):
        for pid in pids:
            os.kill(pid, signal.SIGUSR2)
        time.sleep(0.5)


def counter_check(sv: server.Server, path: Path, conc: int = 8, max_tokens: int = 2048) -> None:
    """Probes vs SGLang's counters over the same requests (issue 24): flush the probes and read
    /metrics, run one bench, flush and read again; the server is idle before and after, so the
    records written in between hold exactly the bench's verifies. SGLang counts per finished request
    (0.5.23 metrics_collector.observe_one_finished_request): completion tokens (the prefill's
    first token included, cut at max_tokens) over verifies of unfinished requests; the probes
    count every accepted token of every verify row. Long requests make the per-request end
    effects (1 prefill token, the tokens accepted past max_tokens) small; the prefill token is
    also taken out exactly (one per request). OUT: ``path`` (JSON)."""
    try:
        _counter_check(sv, path, conc, max_tokens)
    except Exception as exc:  # noqa: BLE001 - a failed check never costs the rest of the call
        log(f"counter check {sv.cfg.name}: {type(exc).__name__}: {exc}")


def _counter_check(sv: server.Server, path: Path, conc: int, max_tokens: int) -> None:
    from sglang_eagle3_ext.measure import chat_client
    from sglang_eagle3_ext.runtime.probes import tree as ptree
    from sglang_eagle3_ext.tune.tiers import read_records

    pids = server.scheduler_pids(sv.pgid)
    rec_path = Path(server.build_command(sv.cfg)[1]["EAGLE3_PROFILE_OUT"])
    if not pids:
        log(f"counter check {sv.cfg.name}: no sglang::scheduler process; skipped")
        return

    def counters() -> dict[str, float]:
        with urllib.request.urlopen(sv.url + "/metrics", timeout=10) as r:
            return chat_client.parse_counters(r.read().decode())

    _flush_probes(pids)
    n0, c0 = len(read_records(rec_path)), counters()
    run(CLI + ["bench", "--url", sv.url, "--concurrency", str(conc), "--runs", "1", "--warmup", "0",
               "--max-tokens", str(max_tokens), "--ignore-eos", "--out", str(path.with_suffix(".bench.json"))],
        path.with_suffix(".txt"), timeout=120)
    time.sleep(0.5)
    _flush_probes(pids)
    recs, c1 = read_records(rec_path)[n0:], counters()
    gen = c1.get(chat_client._COUNTER_GEN, 0) - c0.get(chat_client._COUNTER_GEN, 0)
    ver = c1.get(chat_client._COUNTER_VERIFY, 0) - c0.get(chat_client._COUNTER_VERIFY, 0)
    tok = sum(r.get("tokens", 0) or 0 for r in recs)
    pver = sum(r.get("requests", 0) or 0 for r in recs)  # request-verifies (probes/window.py)
    tr = ptree.merge([r.get("tree") for r in recs if r.get("tree")])
    doc = {"server": sv.cfg.name, "streams": conc, "max_tokens": max_tokens, "requests": conc,
           "sglang": {"generation_tokens": gen, "verify_calls": ver, "accept_len": gen / ver if ver else None,
                      "accept_len_less_prefill_token": (gen - conc) / ver if ver else None},
           "probes": {"windows": len(recs), "tokens": tok, "verifies": pver,
                      "accept_len": tok / pver if pver else None,
                      "tree_accept_len": (tr or {}).get("accept_len"), "tree_cycles": (tr or {}).get("cycles"),
                      "chain_replay": ptree.merge_replay([(r.get("tree") or {}).get("chain_replay") for r in recs])}}
    path.write_text(json.dumps(doc, indent=1))
    a, b = doc["probes"]["accept_len"], doc["sglang"]["accept_len"]
    log(f"counter check {sv.cfg.name}: probes {a} over {pver} verifies, SGLang {b} over {ver:.0f}"
        + (f" ({100 * (a / b - 1):+.2f} %)" if a and b else ""))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True, choices=sorted(PLANS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=540, help="no new sweep group after this (s)")
    ap.add_argument("--toggle-rounds", type=int, default=8)
    ap.add_argument("--stagger", type=float, default=120,
                    help="start the next server once this one sized its KV pool, or after this many s")
    ap.add_argument("--hard-stop", type=float, default=570,
                    help="at this many seconds stop everything and pack what exists (the call's limit is 600)")
    ap.add_argument("--rehearse", action="store_true",
                    help="CPU: reduced shapes and stand-in servers (tests/standin_openai.py), same plumbing")
    a = ap.parse_args()
    global WORK
    if a.rehearse:
        WORK = Path(a.out) / "work"
        small = ["--layers", "4", "--hidden", "256", "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
                 "--intermediate", "256", "--vocab", "4096", "--draft-vocab", "1024", "--device", "cpu"]
        for k, v in list(PLANS.items()):
            PLANS[k] = (lambda f: lambda: {**f(), "route": "plugin",
                                            "build": {m: [*b, *small, *(["--layers", "32"] if "--trained-on" in b else [])]
                                                      for m, b in f()["build"].items()}})(v)
    plan = PLANS[a.plan]()
    out = Path(a.out) / a.plan

    def hard_stop(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"hard stop at {a.hard_stop:.0f} s")

    signal.signal(signal.SIGALRM, hard_stop)
    signal.alarm(int(a.hard_stop))
    out.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    for old in plan.get("clean", []):
        shutil.rmtree(WORK / old, ignore_errors=True)  # the MoE needs the disk
    run(["nvidia-smi", "--query-gpu=name,memory.used,memory.total,clocks.sm", "--format=csv"],
        out / "nvidia-smi.txt")
    if plan["route"] == "patch":
        run(CLI + ["patch", "apply"], out / "patch-apply.txt")
    started: dict[str, server.Server] = {}
    specs: list[sweep.SweepSpec] = []
    try:
        build(plan["build"], out)
        specs, cfgs = configs_for(plan["groups"], out, 31000, rehearse=a.rehearse)
        started = start_all(cfgs, stagger=0 if a.rehearse else a.stagger)
        for spec in specs:
            if time.monotonic() - T0 > a.deadline:
                log(f"deadline: group {spec.name} not benched")
                continue
            sweep.run_sweep(spec, out / spec.name, factory=lambda cfg, _r: Prestarted(started[cfg.name]),
                            log=log)
            for c in spec.configs:
                sv = started.get(f"{spec.name}-{c.slug}")
                if sv is not None and sv.is_running():
                    scrape(sv, out / spec.name / "configs" / c.slug / "metrics.txt")
        bs = started.get(plan["bench_serving"] or "")
        if bs is not None and bs.is_running() and time.monotonic() - T0 < a.deadline + 30:
            bench_serving(bs, out)
        tg = started.get(plan["toggle"] or "")
        if tg is not None and tg.is_running():
            toggle_ab(tg, a.toggle_rounds, out, a.deadline + 40)
    except KeyboardInterrupt as exc:
        log(f"interrupted: {exc}")
    finally:
        signal.alarm(0)
        for sv in started.values():
            try:
                sv.stop(grace=5)
            except Exception:  # noqa: BLE001
                pass
        if plan["route"] == "patch":
            run(CLI + ["patch", "revert"], out / "patch-revert.txt")
        for f in out.rglob("server.log"):  # keep logs small: head and tail
            lines = f.read_text(errors="replace").splitlines()
            if len(lines) > 300:
                f.write_text("\n".join(lines[:100] + ["[...]"] + lines[-200:]) + "\n")
        with tarfile.open(Path(a.out) / f"{a.plan}.tar.gz", "w:gz") as tf:
            tf.add(out, arcname=a.plan)
        log("packed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
