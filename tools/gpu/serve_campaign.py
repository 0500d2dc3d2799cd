"""H200 round 9 (issue 33): open-loop traffic, the scan on one repeated text, the policy under churn.

Three plans meant to run back to back on one warm machine (the servers ``r9a`` starts stay up
for ``r9b``: ``live.json`` under the work folder names them; a cold machine starts them again):

- ``r9a``: the 8B shape on a ``tiny --paths 32`` build; static servers at 2 and 4 steps; the scan
  (steps 2, 4 at 1 / 16 streams, 512-token requests, 3000 steady cycles a key, one start) on ONE
  prompt; the statics benched on that prompt (ladder 1, 16); then ``bench --request-rate`` beside
  SGLang's own ``bench_serving`` on static 4, same traffic file, rates and seed, order alternated.
- ``r9b``: the same scan on EIGHT prompts; the statics benched on them; then the policy (on round
  4's 8B table, steps 0..5, as rounds 6-8), SGLang's EMA with its default tiers and with that
  scan's tiers, beside static 5 (the best static count of the 8B shape at every load) and static 4,
  each on open-loop traffic (``sgl-eagle3 traffic``) at three rates, server order reversed per rate.
- ``r9c``: the MoE shape on its ``--paths 32`` build; pairs (policy on round 8's moe5 scan,
  static 3), (static 7, EMA with default tiers); open loop at three rates.

    tools/gpu/run.sh python3 tools/gpu/serve_campaign.py --plan r9a --out $OUT
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import campaign as C  # noqa: E402
import scan_campaign as S  # noqa: E402

from sglang_eagle3_ext.serve import server  # noqa: E402

P08P = [*S.P08, "--paths", "32"]
MOEP = [*S.MOE, "--paths", "32"]
STATIC_8B = [2, 4]  # the scan's candidates and their separately started twins
KV_TOKENS = {"8b": 32768, "moe": 16384}  # open-loop prompts up to 1000 + answers up to 1000 tokens
LOADS = [1, 16]
SCAN_MOE_R8 = C.REPO / "docs" / "data" / "h200-2026-12-02-r8" / "moe5" / "scan-moe"
# open loop: requests/s from light load to saturation, seconds of arrivals per rate, and the SLO
# goodput is counted against (docs/results.md round 9 says why these)
RATES = {"8b": [2, 8, 32], "moe": [1, 3, 8]}
DURATION = {"8b": 15, "moe": 15}
SLO = {"8b": "ttft=300,tpot=6", "moe": "ttft=600,tpot=12"}
TWIN_RATES = [4, 16]
TWIN_N = 100
SEED = 42


def live_path() -> Path:
    return C.WORK / "live.json"


def keep(started: dict[str, server.Server]) -> None:
    """Leave these servers up for the next call on this machine: out of the stop lists, named in
    live.json (url, process group, probe file)."""
    doc = {}
    for name, sv in started.items():
        if sv.is_running():
            doc[name] = {"url": sv.url, "pgid": sv.pgid, "port": sv.cfg.port,
                         "prof": server.build_command(sv.cfg)[1].get("EAGLE3_PROFILE_OUT")}
            if sv in S.LIVE:
                S.LIVE.remove(sv)
    live_path().write_text(json.dumps(doc, indent=1))
    C.log(f"kept {len(doc)} server(s) for the next call: {', '.join(doc)}")


class Kept:
    """A server a previous call started: its URL, and a stop for its process group."""

    def __init__(self, name: str, info: dict[str, Any]) -> None:
        self.name, self.url, self.pgid = name, info["url"], int(info["pgid"])
        self.prof = info.get("prof")

    def is_running(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
        except OSError:
            return False
        return True

    def stop(self, grace: float = 3) -> None:
        server.kill_group(self.pgid, grace=grace)


def kept() -> dict[str, Kept]:
    if not live_path().exists():
        return {}
    out = {n: Kept(n, i) for n, i in json.loads(live_path().read_text()).items()}
    return {n: k for n, k in out.items() if k.is_running()}


def prompt_sets(build: str, out: Path) -> dict[str, Path]:
    """ONE prompt (the seeds' pattern: one text at temperature 0) and EIGHT different ones of the
    paths build (eight walks with their own expectations)."""
    rows = [x for x in (C.WORK / build / "prompts-paths.jsonl").read_text().splitlines() if x.strip()]
    sets = {"one": rows[:1], "many": rows[:8]}
    paths = {}
    for name, rs in sets.items():
        paths[name] = out / f"prompts-{name}.jsonl"
        paths[name].write_text("\n".join(rs) + "\n")
    return paths


def static_ladder(name: str, url: str, prompts: Path, out: Path, tag: str, runs: int = 3) -> None:
    (out / name).mkdir(parents=True, exist_ok=True)
    C.run([*C.CLI, "bench", "--url", url, "--prompts", str(prompts), "--concurrency", ",".join(map(str, LOADS)),
           "--runs", str(runs), "--warmup", "1", "--max-tokens", "512", "--ignore-eos", "--label", f"{name} {tag}",
           "--out", str(out / name / f"ladder-{tag}.json")], out / name / f"ladder-{tag}.txt", timeout=150)


def ladders(statics: dict[str, Any], prompts: Path, out: Path, tag: str, runs: int = 3) -> None:
    for name, sv in statics.items():
        if sv is not None and sv.is_running():
            static_ladder(name, sv.url, prompts, out, tag, runs)


def named(groups: list[dict[str, Any]], started: dict[str, Any]) -> list[tuple[str, Any]]:
    """(group name, its started server or None), in the groups' order."""
    return [(g["name"], started.get(f"{g['name']}-{spec_slug(g['matrix']['steps'][0])}")) for g in groups]


def traffic(build: str, out: Path, requests: int) -> Path:
    path = out / f"traffic-{build}.json"
    if not path.exists():
        C.run([*C.CLI, "traffic", "--build", str(C.WORK / build), "--out", str(path), "--requests",
               str(requests), "--seed", "0", "--prompt-len", "lognormal:300,1.0", "--output-len",
               "lognormal:150,0.9", "--max-prompt-len", "1000", "--max-output-len", "1000"],
              out / f"traffic-{build}.txt", timeout=120)
    return path


def open_loop(name: str, url: str, tr: Path, rate: float, shape: str, out: Path) -> None:
    (out / name).mkdir(parents=True, exist_ok=True)
    f = out / name / f"serving-r{rate:g}.json"
    C.run([*C.CLI, "bench", "--url", url, "--prompts", str(tr), "--request-rate", f"{rate:g}",
           "--duration", str(DURATION[shape]), "--seed", str(SEED), "--ignore-eos", "--slo", SLO[shape],
           "--label", f"{name} rate {rate:g}", "--out", str(f)], f.with_suffix(".txt"),
          timeout=DURATION[shape] + 90)


def open_loop_rounds(names: list[tuple[str, Any]], tr: Path, shape: str, out: Path, deadline: float,
                     rates: list[float] | None = None, flip: bool = False) -> None:
    """Every server at every rate, the server order reversed from one rate to the next (drift
    lands on both ends); none started after ``deadline`` s."""
    for i, rate in enumerate(rates or RATES[shape]):
        for name, sv in (names if (i % 2 == 0) != flip else names[::-1]):
            if time.monotonic() - C.T0 > deadline:
                C.log(f"deadline: {name} at {rate:g} req/s not run")
                continue
            if sv is not None and sv.is_running():
                open_loop(name, sv.url, tr, rate, shape, out)
        S.checkpoint()


def twin(sv: Any, target: Path, tr: Path, out: Path, rates: list[float] = TWIN_RATES) -> None:
    """Ours beside bench_serving on one server, same traffic file, rates, request count and seed
    (our --seed/--order shuffle reproduce its sharegpt order and exponential gaps, docs/guide/bench.md);
    the order alternates per rate."""
    d = out / "twin"
    d.mkdir(parents=True, exist_ok=True)
    port = sv.url.rsplit(":", 1)[1]
    env = {"PYTHONPATH": f"{C.REPO / 'tools' / 'gpu' / 'standins'}:{os.environ.get('PYTHONPATH', '')}"}
    for i, rate in enumerate(rates):
        ours = [*C.CLI, "bench", "--url", sv.url, "--prompts", str(tr), "--request-rate", f"{rate:g}",
                "--num-requests", str(TWIN_N), "--seed", str(SEED), "--ignore-eos", "--label", f"ours rate {rate:g}",
                "--out", str(d / f"ours-r{rate:g}.json")]
        theirs = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang-oai-chat", "--host", "127.0.0.1",
                  "--port", port, "--dataset-name", "sharegpt", "--dataset-path", str(tr), "--num-prompts",
                  str(TWIN_N), "--request-rate", f"{rate:g}", "--seed", str(SEED), "--tokenizer", str(target),
                  "--output-file", str(d / f"bench_serving-r{rate:g}.jsonl")]
        pair = [("ours", ours, {}), ("bench_serving", theirs, env)]
        for who, cmd, e in (pair if i % 2 == 0 else pair[::-1]):
            C.run(cmd, d / f"{who}-r{rate:g}.txt", timeout=TWIN_N / rate + 120, env=e)
    S.checkpoint()


def start(groups: list[dict[str, Any]], out: Path, port: int, *, first_alone: bool) -> dict[str, server.Server]:
    specs, cfgs = S.specs_for(groups, out, port)
    return C.start_all(cfgs, stagger=0 if S.REHEARSE else 8, first_alone=first_alone)


def scan(build: str, prompts: Path, out: Path, tag: str) -> Path:
    S.PROMPTS[:] = ["--prompts", str(prompts)]
    d = out / f"scan-{tag}"
    cmd = S.scan_cmd(build, ",".join(map(str, STATIC_8B)), ",".join(map(str, LOADS)), d, 31100, bs=16,
                     min_cycles=3000, max_tokens=512, time_limit=120)
    S.run_cli(cmd, out / f"scan-{tag}.txt", timeout=330, env=S.scan_env())
    S.checkpoint()
    return d


def statics_8b(out: Path) -> dict[str, Any]:
    """The 8B statics, kept from r9a when this machine still runs them, else started here."""
    have = kept()
    names = {f"static{s}" for s in STATIC_8B}
    if names <= set(have):
        C.log("statics: kept from the previous call")
        return {n: have[n] for n in sorted(names)}
    S.build({"8bp": P08P}, out)
    groups = [kv(C.group(f"static{s}", "8bp", "draft", [s], LOADS), "8b") for s in STATIC_8B]
    started = start(groups, out, 31000, first_alone=True)
    return {g["name"]: started.get(f"{g['name']}-{spec_slug(s)}") for g, s in zip(groups, STATIC_8B, strict=True)}


def kv(g: dict[str, Any], shape: str) -> dict[str, Any]:
    return S.set_arg(g, "--max-total-tokens", str(KV_TOKENS[shape]))


def spec_slug(steps: int) -> str:
    return f"eagle3-s{steps}-k1-d{steps + 1}-no-nccl"


def plan_r9a(out: Path) -> dict[str, server.Server]:
    live_path().unlink(missing_ok=True)
    for old in ("8b", "tree", "regions", "moe", "moep"):
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    statics = statics_8b(out)
    sets = prompt_sets("8bp", out)
    tr = traffic("8bp", out, 400)
    scan("8bp", sets["one"], out, "one")
    ladders(statics, sets["one"], out, "one")
    S.checkpoint()
    s4 = statics.get("static4")
    if s4 is not None and s4.is_running():
        twin(s4, C.WORK / "8bp" / "target", tr, out)
    keep({n: sv for n, sv in statics.items() if isinstance(sv, server.Server)})
    return {}


def plan_r9b(out: Path) -> dict[str, Any]:
    statics = statics_8b(out)
    sets = prompt_sets("8bp", out)
    tr = traffic("8bp", out, 400)
    scan("8bp", sets["many"], out, "many")
    ladders(statics, sets["many"], out, "many")
    S.checkpoint()
    sv2 = statics.pop("static2", None)  # room on the GPU for the adaptive servers
    if sv2 is not None:
        sv2.stop(grace=3)
    groups = r9d_groups(out)[1:]  # static 4 is kept from r9a
    started = start(groups, out, 31010, first_alone=False)
    S.checkpoint()
    names = named(groups, started)
    names.append(("static4", statics.get("static4")))
    open_loop_rounds(names, tr, "8b", out, 545)
    scrape_all(names, out, "r9b")
    return {**started, **statics}


def plan_r9c(out: Path) -> dict[str, Any]:
    for sv in kept().values():
        sv.stop(grace=3)
    for old in ("8b", "8bp", "tree", "regions", "moe"):
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    S.build({"moep": MOEP}, out)
    tr = traffic("moep", out, 400)
    shutil.copy(SCAN_MOE_R8 / "scan.json", out / "scan-moe.json")
    pol = kv(C.group("policy", "moep", "draft", [7], [1, 8]), "moe")
    pol["launch"]["policy"] = str(out / "scan-moe.json")
    pairs = [[pol, kv(C.group("static3", "moep", "draft", [3], [1, 8]), "moe")],
             [kv(C.group("static7", "moep", "draft", [7], [1, 8]), "moe"),
              kv(C.group("ema-default", "moep", "draft", [7], [1, 8], extra=["--speculative-adaptive"]), "moe")]]
    started: dict[str, Any] = {}
    for i, groups in enumerate(pairs):
        now = start(groups, out, 31000 + 10 * i, first_alone=i == 0)
        started.update(now)
        S.checkpoint()
        names = named(groups, now)
        open_loop_rounds(names, tr, "moe", out, [300, 540][i])
        scrape_all(names, out, "r9c")
        for sv in now.values():
            sv.stop(grace=3)
    return started


def r9d_groups(out: Path) -> list[dict[str, Any]]:
    shutil.copy(S.SCAN_R4 / "scan.json", out / "scan-8b.json")
    shutil.copy(S.SCAN_R4 / "adaptive.json", out / "adaptive-scan-8b.json")
    pol = kv(C.group("policy", "8bp", "draft", [5], LOADS), "8b")
    pol["launch"]["policy"] = str(out / "scan-8b.json")
    return [kv(C.group("static4", "8bp", "draft", [4], LOADS), "8b"), pol,
            kv(C.group("static5", "8bp", "draft", [5], LOADS), "8b"),
            kv(C.group("ema-default", "8bp", "draft", [7], LOADS, extra=["--speculative-adaptive"]), "8b"),
            kv(C.group("ema-scan", "8bp", "draft", [5], LOADS, adaptive=str(out / "adaptive-scan-8b.json")), "8b")]


def scrape_all(names: list[tuple[str, Any]], out: Path, tag: str) -> None:
    for name, sv in names:
        if sv is not None and sv.is_running():
            (out / name).mkdir(parents=True, exist_ok=True)
            try:
                with urllib.request.urlopen(sv.url + "/metrics", timeout=10) as r:
                    (out / name / f"metrics-{tag}.txt").write_bytes(r.read())
            except Exception as exc:  # noqa: BLE001
                C.log(f"/metrics of {name}: {exc}")


def plan_r9d(out: Path) -> dict[str, Any]:
    """r9a ran out of time at the twin; r9b's pieces on the same servers in one start: static 4
    (the twin's server, and the best count on one text), the policy, static 5, EMA default and
    EMA on the scan's tiers; the twin at 16 and 4 req/s, then open loop at 8 req/s. The servers
    stay for r9e (rates 32 and 2)."""
    live_path().unlink(missing_ok=True)
    for old in ("8b", "tree", "regions", "moe", "moep"):
        shutil.rmtree(C.WORK / old, ignore_errors=True)
    S.build({"8bp": P08P}, out)
    tr = traffic("8bp", out, 400)
    groups = r9d_groups(out)
    started = start(groups, out, 31000, first_alone=True)
    names = named(groups, started)
    keep({n: sv for n, sv in names if isinstance(sv, server.Server)})
    S.checkpoint()
    s4 = dict(names).get("static4")
    if s4 is not None and s4.is_running():
        twin(s4, C.WORK / "8bp" / "target", tr, out, rates=[16, 4])
    open_loop_rounds(names, tr, "8b", out, 530, rates=[8])
    scrape_all(names, out, "r9d")
    return {}


def plan_r9e(out: Path) -> dict[str, Any]:
    """On r9d's kept servers: open loop at 32 and 2 req/s (order reversed from r9d's), then
    /metrics and the probe files (every cycle of both calls)."""
    have = kept()
    order = ["static4", "policy", "static5", "ema-default", "ema-scan"]
    names = [(n, have.get(n)) for n in order]
    C.log(f"kept servers running: {[n for n, sv in names if sv is not None]}")
    tr = Path("/tmp/scan-campaign/r9d/traffic-8bp.json")
    if not tr.exists():
        tr = traffic("8bp", out, 400)
    open_loop_rounds(names, tr, "8b", out, 520, rates=[32, 2], flip=True)
    finish(names, have, out, "r9e")
    return {}


def finish(names: list[tuple[str, Any]], have: dict[str, Any], out: Path, tag: str) -> None:
    """The last step of a plan: /metrics of every server, each one's whole probe file, the
    checkpoint, then every server stopped."""
    scrape_all(names, out, tag)
    for n, sv in names:
        if sv is not None and sv.prof and Path(sv.prof).exists():
            shutil.copy(sv.prof, out / n / "prof-all.jsonl")
    S.checkpoint()
    for sv in have.values():
        sv.stop(grace=3)


def plan_r9f(out: Path) -> dict[str, Any]:
    """r9d's policy lost to static 5 at 8 req/s while running 5 steps throughout: the same pair
    again, ABAB at 8 req/s (two 15-s runs each, alternated), then one run each at 32 req/s."""
    S.build({"8bp": P08P}, out)
    tr = traffic("8bp", out, 400)
    groups = r9d_groups(out)[1:3]
    started = start(groups, out, 31000, first_alone=True)
    names = named(groups, started)
    S.checkpoint()
    for rnd, rate in enumerate([8, 8, 32]):
        for name, sv in (names if rnd % 2 == 0 else names[::-1]):
            if time.monotonic() - C.T0 > 380:
                C.log(f"deadline: {name} at {rate} req/s round {rnd} not run")
                continue
            if sv is not None and sv.is_running():
                open_loop(name, sv.url, tr, rate, "8b", out / f"round{rnd}")
        S.checkpoint()
    scrape_all(names, out, "r9f")
    return started


S.PLANS.update({"r9a": plan_r9a, "r9b": plan_r9b, "r9c": plan_r9c, "r9d": plan_r9d, "r9e": plan_r9e,
                "r9f": plan_r9f})

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    raise SystemExit(S.main())
