"""H200 round 10 (issue 33): the policy under open-loop churn with only the states its table can
choose, every run on a flushed radix cache, and the bench_serving twin on both its backends.

Round 9 left two confounds and one lead (docs/results.md, round 9): the twin's 16 req/s pair
and static 4's open-loop figures ran on prefixes an earlier client had left in the radix cache;
bench_serving's ``sglang-oai-chat`` ITL re-tokenizes each chunk's text; the policy's tail went
with six adaptive states. Two plans, meant to run back to back on one warm machine (the servers
``r10a`` starts stay up for ``r10b``: serve_campaign's ``live.json``):

- ``r10a``: the 8B shape on its ``tiny --paths 32`` build; five servers: static 5 (the table's best
  count at every batch size up to 16), static 4, the policy on round 4's table as ``launch
  --policy`` now builds it (states within 5 % of the best at some batch size 1..16: 5 only),
  SGLang's EMA on its default tiers and on the scan's tiers ({4, 5}); the twin at 4 req/s (ours,
  bench_serving ``sglang-oai-chat`` and ``sglang``, each with --flush-cache); open loop at 8 req/s.
- ``r10b``: on the kept servers: 16 and 2 req/s, then 8 again in reversed order; /metrics, the
  probe files.

    tools/gpu/run.sh python3 tools/gpu/churn_campaign.py --plan r10a --out $OUT
    tools/gpu/run.sh python3 tools/gpu/churn_campaign.py --plan r10b --out $OUT

- ``r10``: both in one call, for a session with under 15 minutes of device time left (r10a's and
  r10b's results were lost with the try that ran them): three servers (static 5, the policy,
  SGLang's EMA on its default tiers), the twin at 8 req/s, then 16, 2 and 8 req/s. Since its one
  run (2026-12-04: servers up at 335 s, only 16 req/s fitted), every server first takes an
  unmeasured pass (``warm``): the first run's cold-start stalls went to whichever client came first.
  With the warm pass and the four-client twin, one call reaches only the 16 req/s round: a session
  with a full 30 minutes runs r10a + r10b back to back instead (r10a warms the servers r10b reuses).

    tools/gpu/run.sh python3 tools/gpu/churn_campaign.py --plan r10 --out $OUT
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import campaign as C  # noqa: E402
import scan_campaign as S  # noqa: E402
import serve_campaign as V  # noqa: E402

from sglang_eagle3_ext.serve import server  # noqa: E402

ORDER = ["static5", "static4", "policy", "ema-default", "ema-scan"]
TWIN_RATE = 4
RATES_A = [8]
RATES_B = [16, 2, 8]


def groups(out: Path) -> list[dict[str, Any]]:
    shutil.copy(S.SCAN_R4 / "scan.json", out / "scan-8b.json")
    shutil.copy(S.SCAN_R4 / "adaptive.json", out / "adaptive-scan-8b.json")
    pol = V.kv(C.group("policy", "8bp", "draft", [5], V.LOADS), "8b")
    pol["launch"]["policy"] = str(out / "scan-8b.json")
    return [V.kv(C.group("static5", "8bp", "draft", [5], V.LOADS), "8b"),
            V.kv(C.group("static4", "8bp", "draft", [4], V.LOADS), "8b"), pol,
            V.kv(C.group("ema-default", "8bp", "draft", [7], V.LOADS, extra=["--speculative-adaptive"]), "8b"),
            V.kv(C.group("ema-scan", "8bp", "draft", [5], V.LOADS, adaptive=str(out / "adaptive-scan-8b.json")), "8b")]


def open_loop(name: str, url: str, tr: Path, rate: float, out: Path, tag: str, shape: str = "8b") -> None:
    """One open-loop run. The label is the server's name alone (the rate is in the document), so
    ``compare --repeats`` finds the baseline's runs at every rate."""
    (out / name).mkdir(parents=True, exist_ok=True)
    f = out / name / f"serving-r{rate:g}-{tag}.json"
    C.run([*C.CLI, "bench", "--url", url, "--prompts", str(tr), "--request-rate", f"{rate:g}",
           "--duration", str(V.DURATION[shape]), "--seed", str(V.SEED), "--ignore-eos", "--flush-cache",
           "--slo", V.SLO[shape], "--label", name, "--out", str(f)], f.with_suffix(".txt"),
          timeout=V.DURATION[shape] + 90)


def rounds(names: list[tuple[str, Any]], tr: Path, out: Path, rates: list[float], deadline: float,
           flip: bool, shape: str = "8b", first: int = 0) -> None:
    """Every server at every rate, the order reversed from one rate to the next. ``first``: the
    first run's tag number (a server measured again in a later phase keeps the earlier files)."""
    for i, rate in enumerate(rates):
        order = names if (i % 2 == 0) != flip else names[::-1]
        for name, sv in order:
            if time.monotonic() - C.T0 > deadline:
                C.log(f"deadline: {name} at {rate:g} req/s not run")
                continue
            if sv is not None and sv.is_running():
                open_loop(name, sv.url, tr, rate, out, f"k{first + i}", shape)
        S.checkpoint()


def warm(names: list[tuple[str, Any]], tr: Path, out: Path, rate: float = RATES_B[0], n: int = 64) -> None:
    """One unmeasured pass per server at the top rate before anything is measured: round 10's
    first traffic on each fresh server paid ~3 s of stalls in its first 50 cycles (draft and verify
    means 33 and 26 ms, p90 normal) that a one-request warm-up does not reach; the server that
    took the twin first paid them there, the others inside their measured run."""
    for name, sv in names:
        if sv is not None and sv.is_running():
            (out / name).mkdir(parents=True, exist_ok=True)
            f = out / name / "warm.json"
            C.run([*C.CLI, "bench", "--url", sv.url, "--prompts", str(tr), "--request-rate", f"{rate:g}",
                   "--num-requests", str(n), "--seed", str(V.SEED + 1), "--ignore-eos", "--label", f"{name} warm",
                   "--out", str(f)], f.with_suffix(".txt"), timeout=150)


def start_warm(gs: list[dict[str, Any]], out: Path, port: int, tr: Path, *, first_alone: bool,
               rate: float = RATES_B[0], n: int = 64) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """Start these groups' servers, checkpoint, give each its unmeasured pass (``warm``)."""
    started = V.start(gs, out, port, first_alone=first_alone)
    names = V.named(gs, started)
    S.checkpoint()
    warm(names, tr, out, rate=rate, n=n)
    return started, names


def twin(sv: Any, target: Path, tr: Path, out: Path, r: float = TWIN_RATE, only: tuple[str, ...] = ()) -> None:
    """Ours and bench_serving on the chat API (its ITL re-tokenizes each chunk's text), then ours
    (``--api generate``) and bench_serving (``--backend sglang``) on /generate, raw text, both
    splitting each chunk by the server's token count: same file, rate, request count and seed,
    each after a cache flush. ``only``: these runs alone (r11: the /generate pair, round 10's open
    row), in the same order."""
    d = out / "twin"
    d.mkdir(parents=True, exist_ok=True)
    port = sv.url.rsplit(":", 1)[1]
    env = {"PYTHONPATH": f"{C.REPO / 'tools' / 'gpu' / 'standins'}:{os.environ.get('PYTHONPATH', '')}"}
    n = V.TWIN_N
    ours = [*C.CLI, "bench", "--url", sv.url, "--prompts", str(tr), "--request-rate", f"{r:g}", "--num-requests",
            str(n), "--seed", str(V.SEED), "--ignore-eos", "--flush-cache", "--label", f"ours rate {r:g}",
            "--out", str(d / f"ours-r{r:g}.json")]
    base = [sys.executable, "-m", "sglang.bench_serving", "--host", "127.0.0.1", "--port", port, "--dataset-name",
            "sharegpt", "--dataset-path", str(tr), "--num-prompts", str(n), "--request-rate", f"{r:g}", "--seed",
            str(V.SEED), "--tokenizer", str(target), "--flush-cache"]
    gen = [*ours[:-4], "--api", "generate", "--label", f"ours generate rate {r:g}", "--out",
           str(d / f"ours-generate-r{r:g}.json")]
    runs = [("bench_serving-chat", [*base, "--backend", "sglang-oai-chat"]),
            ("ours", ours),
            ("ours-generate", gen),  # /generate, raw text: like for like with --backend sglang
            ("bench_serving-generate", [*base, "--backend", "sglang"])]
    for who, cmd in runs:
        if only and who not in only:
            continue
        if not who.startswith("ours"):
            cmd = [*cmd, "--output-file", str(d / f"{who}-r{r:g}.jsonl")]
        C.run(cmd, d / f"{who}-r{r:g}.txt", timeout=n / r + 120, env={} if who.startswith("ours") else env)
    S.checkpoint()


def fresh_work() -> None:
    """No kept servers and no model folders of an earlier plan (the disk holds one shape's weights)."""
    V.live_path().unlink(missing_ok=True)
    for old in ("8b", "8bp", "tree", "regions", "moe", "moep"):
        shutil.rmtree(C.WORK / old, ignore_errors=True)


def start_8b(out: Path) -> tuple[Path, dict[str, Any], list[tuple[str, Any]]]:
    """A clean work folder, the 8B paths build and its traffic, the five servers of ``groups``
    (the first alone: it warms the JIT cache): (traffic file, started, (name, server) pairs)."""
    fresh_work()
    S.build({"8bp": V.P08P}, out)
    tr = V.traffic("8bp", out, 400)
    gs = groups(out)
    started = V.start(gs, out, 31000, first_alone=True)
    return tr, started, V.named(gs, started)


def plan_r10a(out: Path) -> dict[str, Any]:
    tr, _, names = start_8b(out)
    V.keep({n: sv for n, sv in names if isinstance(sv, server.Server)})
    S.checkpoint()
    warm(names, tr, out)
    s5 = dict(names).get("static5")
    if s5 is not None and s5.is_running():
        twin(s5, C.WORK / "8bp" / "target", tr, out)
    rounds(names, tr, out, RATES_A, 540, flip=False)
    V.scrape_all(names, out, "r10a")
    return {}


def plan_r10b(out: Path) -> dict[str, Any]:
    have = V.kept()
    names = [(n, have.get(n)) for n in ORDER]
    C.log(f"kept servers running: {[n for n, sv in names if sv is not None]}")
    tr = (C.WORK.parent / "work-out" if S.REHEARSE else Path("/tmp/scan-campaign")) / "r10a" / "traffic-8bp.json"
    if not tr.exists():
        tr = V.traffic("8bp", out, 400)
    rounds(names, tr, out, RATES_B, 500, flip=True)
    V.finish(names, have, out, "r10b")
    return {}


def plan_r10(out: Path) -> dict[str, Any]:
    """r10a + r10b in one call: three servers, the twin at 8 req/s, three rates (none started after
    500 s), /metrics, the probe files."""
    V.live_path().unlink(missing_ok=True)
    S.build({"8bp": V.P08P}, out)
    tr = V.traffic("8bp", out, 400)
    gs = [g for g in groups(out) if g["name"] in ("static5", "policy", "ema-default")]
    started, names = start_warm(gs, out, 31000, tr, first_alone=True)
    s5 = dict(names).get("static5")
    if s5 is not None and s5.is_running():
        twin(s5, C.WORK / "8bp" / "target", tr, out, r=8)
    rounds(names, tr, out, RATES_B, 500, flip=False)
    V.scrape_all(names, out, "r10")  # the probe files are packed already (configs/<slug>/prof.jsonl)
    return started


def moe_groups(out: Path) -> list[list[dict[str, Any]]]:
    """Two 57 GB MoE servers fit at once: (policy on round 8's moe5 scan, static 3: that scan's best
    at 8 streams), then (SGLang's EMA on its default tiers, static 7: the policy's choice at 1)."""
    shutil.copy(V.SCAN_MOE_R8 / "scan.json", out / "scan-moe.json")
    pol = V.kv(C.group("policy-moe", "moep", "draft", [7], [1, 8]), "moe")
    pol["launch"]["policy"] = str(out / "scan-moe.json")
    return [[pol, V.kv(C.group("static3-moe", "moep", "draft", [3], [1, 8]), "moe")],
            [V.kv(C.group("ema-default-moe", "moep", "draft", [7], [1, 8], extra=["--speculative-adaptive"]), "moe"),
             V.kv(C.group("static7-moe", "moep", "draft", [7], [1, 8]), "moe")]]


def next_shape(names: list[tuple[str, Any]], started: dict[str, Any], out: Path, tag: str, done: str,
               build: str, args: list[str]) -> Path:
    """One shape's servers scraped and stopped, its weights deleted (the disk holds one shape's at a
    time), the next shape built with its traffic file (returned)."""
    V.scrape_all(names, out, tag)
    S.checkpoint()
    for sv in started.values():
        sv.stop(grace=3)
    shutil.rmtree(C.WORK / done, ignore_errors=True)
    S.build({build: args}, out)
    return V.traffic(build, out, 400)


R11 = {"8b_rates": [8, 16, 2], "8b_deadline": 860, "moe_deadlines": [1380, 1640]}


def plan_r11(out: Path) -> dict[str, Any]:
    """Issue 33's GPU rows in ONE background run that outlives the device calls
    (``tools/gpu/bg.sh``: each call only starts it or waits and collects): the 8B shape's five
    servers (static 5, static 4, the policy, both EMAs) warmed, the /generate twin, open loop at
    8, 16 and 2 req/s; then the MoE shape in two pairs at 1, 3 and 8 req/s, each warmed."""
    tr, started, names = start_8b(out)
    S.checkpoint()
    warm(names, tr, out)
    s5 = dict(names).get("static5")
    if s5 is not None and s5.is_running():
        twin(s5, C.WORK / "8bp" / "target", tr, out, r=8, only=("ours-generate", "bench_serving-generate"))
    rounds(names, tr, out, R11["8b_rates"], R11["8b_deadline"], flip=False)
    trm = next_shape(names, started, out, "r11", "8bp", "moep", V.MOEP)
    for i, pair in enumerate(moe_groups(out)):
        now, pnames = start_warm(pair, out, 31100 + 10 * i, trm, first_alone=False, rate=8, n=32)
        rounds(pnames, trm, out, V.RATES["moe"], R11["moe_deadlines"][i], flip=False, shape="moe")
        V.scrape_all(pnames, out, "r11")
        S.checkpoint()
        for sv in now.values():
            sv.stop(grace=3)
    return started


R11_DATA = C.REPO / "docs" / "data" / "h200-2026-12-04-r11" / "r11"
MOE5_SCAN = C.REPO / "docs" / "data" / "h200-2026-12-02-r8" / "moe5" / "scan-moe"
R12 = {"moe_rates": [3, 8, 1, 3, 8], "moe_deadline": 720, "ab_deadline": 1380}


def moe_cal_groups(out: Path) -> list[dict[str, Any]]:
    """The MoE policy on round 11's calibrated table, static 7 (round 11's best static at every
    rate), SGLang's EMA on its default tiers, and on the tiers of round 8's scan (the scan the
    calibrated table starts from)."""
    shutil.copy(R11_DATA / "scan-moe-served.json", out / "scan-moe-served.json")
    shutil.copy(MOE5_SCAN / "adaptive.json", out / "adaptive-scan-moe.json")
    pol = V.kv(C.group("policy-cal-moe", "moep", "draft", [7], [1, 8]), "moe")
    pol["launch"]["policy"] = str(out / "scan-moe-served.json")
    return [pol, V.kv(C.group("static7-moe", "moep", "draft", [7], [1, 8]), "moe"),
            V.kv(C.group("ema-default-moe", "moep", "draft", [7], [1, 8], extra=["--speculative-adaptive"]), "moe"),
            V.kv(C.group("ema-scan-moe", "moep", "draft", [7], [1, 8],
                         adaptive=str(out / "adaptive-scan-moe.json")), "moe")]


def moe_calibrated(out: Path, rates: list[float], deadline: float
                   ) -> tuple[dict[str, Any], list[tuple[str, Any]], Path]:
    """The MoE policy on the calibrated table beside static 7, warmed, at these rates:
    (started, (name, server) pairs, traffic file)."""
    fresh_work()
    S.build({"moep": V.MOEP}, out)
    trm = V.traffic("moep", out, 400)
    now, names = start_warm(moe_cal_groups(out)[:2], out, 31100, trm, first_alone=True, rate=8, n=32)
    rounds(names, trm, out, rates, deadline, flip=False, shape="moe")
    return now, names, trm


def plan_r12m(out: Path) -> dict[str, Any]:
    """r12's MoE half alone, for a session with under 16 minutes of device time (2026-12-06: 15.8
    after two refused starts): the policy on the calibrated table beside static 7 at 3, 8, 1 and
    8 req/s, scraped."""
    now, names, _ = moe_calibrated(out, [3, 8, 1, 8], 600)
    V.scrape_all(names, out, "r12")
    return now


def plan_r12s(out: Path) -> dict[str, Any]:
    """Issue 33's open scan row on any one GPU (2026-12-06: no H200 came for r12m): the scan on
    EIGHT different texts of the 8B paths build (steps 2 and 4 at 1 and 16 streams, one start),
    against static 2 and static 4 started separately and benched on the same texts
    (round 9 ran the ONE-text half: docs/results.md)."""
    fresh_work()
    statics = V.statics_8b(out)
    sets = V.prompt_sets("8bp", out)
    S.checkpoint()
    V.scan("8bp", sets["many"], out, "many")
    # 8 runs: one stream then sends each of the eight texts once (round 12 ran 3, which sent
    # texts 1-3 only; bench now warns of it)
    V.ladders(statics, sets["many"], out, "many", runs=8)
    V.scrape_all(list(statics.items()), out, "r12s")
    return statics


def scan_served(out: Path, build: str, build_args: list[str], steps: str, conc: str, *, bs: int,
                min_cycles: int, shape: str, timeout: int) -> tuple[Path, Path, int] | None:
    """A clean work folder, the build and its traffic, then the scan on the traffic's own prompts
    (512-token answers, so verify reads contexts like the served ones): (traffic file, scan
    folder, the scan's overall best step count), or None when the scan did not finish."""
    fresh_work()
    S.build({build: build_args}, out)
    tr = V.traffic(build, out, 400)
    S.PROMPTS[:] = ["--prompts", str(tr)]
    d = out / "scan-served"
    cmd = S.scan_cmd(build, steps, conc, d, 31100, bs=bs, min_cycles=min_cycles, max_tokens=512,
                     time_limit=240, kv=V.KV_TOKENS[shape])
    S.run_cli(cmd, out / "scan-served.txt", timeout=timeout, env=S.scan_env())
    S.checkpoint()
    try:
        return tr, d, int(json.loads((d / "scan.json").read_text())["best"]["overall"]["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        C.log("scan-served: no overall best (the scan did not finish): nothing to compare")
        return None


R13H = {"rates": [2, 8, 16, 16, 8], "deadline": 1330}


def plan_r13h(out: Path) -> dict[str, Any]:
    """Issue 33's 8B row on ONE card of whichever kind comes (H100 when no H200 does: round 12),
    with its table measured on that card: the scan on the served traffic's own prompts (steps
    3-6 at 1, 4, 8 and 16 streams, 512-token answers, so verify reads contexts like the served
    ones), then the policy on that scan, static at the scan's overall best and SGLang's EMA on its
    default tiers, warmed, at 2, 8, 16, 16 and 8 req/s, the order reversed each time. Two device
    calls (``bg.sh r13h 560 --hard-stop 1700``, then ``bg.sh r13h 570``)."""
    served = scan_served(out, "8bp", V.P08P, "3,4,5,6", "1,4,8,16", bs=16, min_cycles=1500, shape="8b",
                         timeout=540)
    if served is None:
        return {}
    tr, d, best = served
    pol = V.kv(C.group("policy", "8bp", "draft", [best], V.LOADS), "8b")
    pol["launch"]["policy"] = str(d / "scan.json")
    gs = [V.kv(C.group(f"static{best}", "8bp", "draft", [best], V.LOADS), "8b"), pol,
          V.kv(C.group("ema-default", "8bp", "draft", [7], V.LOADS, extra=["--speculative-adaptive"]), "8b")]
    started, names = start_warm(gs, out, 31000, tr, first_alone=False)
    rounds(names, tr, out, R13H["rates"], R13H["deadline"], flip=False)
    V.scrape_all(names, out, "r13h")
    return started


def alternated_8b(out: Path, servers: tuple[str, ...], sched: dict[str, Any], tag: str) -> dict[str, Any]:
    """A clean work folder, the 8B paths build and its traffic, these servers of ``groups`` (the
    first alone: it warms the JIT cache), warmed, then every rate of ``sched`` with the order
    reversed every round, scraped."""
    fresh_work()
    S.build({"8bp": V.P08P}, out)
    return serve_8b(out, servers, sched["rates"], sched["deadline"], tag)


def serve_8b(out: Path, servers: tuple[str, ...], rates: list[float], deadline: float, tag: str) -> dict[str, Any]:
    """These servers of ``groups`` on a built 8B paths folder (the first alone: it warms the JIT
    cache), warmed, then every rate with the order reversed every round, scraped. Nothing starts
    past the deadline or the hard stop (two servers' start and warm pass: up to ~300 s)."""
    deadline = S.by(deadline)
    if time.monotonic() - C.T0 > deadline - 300:
        C.log(f"deadline: {', '.join(servers)} not started")
        return {}
    tr = V.traffic("8bp", out, 400)
    gs = [g for g in groups(out) if g["name"] in servers]
    started, names = start_warm(gs, out, 31000, tr, first_alone=True)
    rounds(names, tr, out, rates, deadline, flip=False)
    V.scrape_all(names, out, tag)
    return started


R13A = {"rates": [16, 16, 16, 16], "deadline": 520}


def plan_r13a(out: Path) -> dict[str, Any]:
    """Round 11's 8B loss at 16 req/s alone, in ONE call on any one card (2026-12-06: no H200, 16
    minutes of device time left): static 5 and the policy on round 4's table (one state, 5: the
    same step count, plus the policy's hooks), warmed, then four 16 req/s runs each, the order
    reversed each time (ABBAABBA), so host drift lands on both sides alike. ``bg.sh r13a 590
    --hard-stop 580``."""
    return alternated_8b(out, ("static5", "policy"), R13A, "r13a")


def plan_r13t(out: Path) -> dict[str, Any]:
    """The /generate twin alternated on one warm static-5 server (ours, bench_serving, ours,
    bench_serving at 8 req/s, 100 requests each after a cache flush), in ONE short call on any one
    card: round 11's ITL p50 gap (5.5 %) came with a server drift between the two clients.
    ``run.sh python3 tools/gpu/churn_campaign.py --plan r13t --out $OUT --hard-stop 300``."""
    fresh_work()
    S.build({"8bp": V.P08P}, out)
    tr = V.traffic("8bp", out, 400)
    gs = [g for g in groups(out) if g["name"] == "static5"]
    started, names = start_warm(gs, out, 31000, tr, first_alone=True)
    s5 = dict(names).get("static5")
    if s5 is not None and s5.is_running():
        for k in range(2):
            twin(s5, C.WORK / "8bp" / "target", tr, out / f"twin{k}", r=8,
                 only=("ours-generate", "bench_serving-generate"))
    return started


R14M = {"rates": [3, 8, 1], "again": [3, 8], "deadline": 1560}


def plan_r14m(out: Path) -> dict[str, Any]:
    """Issue 33's MoE row on ONE card of whichever kind comes, its table measured on that card
    (round 11's calibrated table is the H200's; an H100 holds one 57 GB MoE server at a time): the
    scan on the served traffic's own prompts (steps 3-7 at 1, 4 and 8 streams, 512-token answers),
    then ONE server at a time, each warmed: the policy on that scan, static at the scan's best,
    SGLang's EMA on its default tiers, each at 3, 8 and 1 req/s; then the policy again at 3 and 8
    (a drift check: the servers never ran side by side). Three device calls (``bg.sh r14m 560
    --hard-stop 1640``, ``bg.sh r14m 570``, ``bg.sh r14m 560``)."""
    served = scan_served(out, "moep", V.MOEP, "3,4,5,6,7", "1,4,8", bs=8, min_cycles=1000, shape="moe",
                         timeout=560)
    if served is None:
        return {}
    tr, d, best = served
    pol = V.kv(C.group("policy-moe", "moep", "draft", [best], [1, 8]), "moe")
    pol["launch"]["policy"] = str(d / "scan.json")
    again = copy.deepcopy(pol)
    again["name"] = "policy-moe-again"
    gs = [pol, V.kv(C.group(f"static{best}-moe", "moep", "draft", [best], [1, 8]), "moe"),
          V.kv(C.group("ema-default-moe", "moep", "draft", [7], [1, 8], extra=["--speculative-adaptive"]), "moe"),
          again]
    one_at_a_time(gs, tr, out, R14M["rates"], {again["name"]: R14M["again"]}, R14M["deadline"], "r14m")
    return {}


def one_at_a_time(gs: list[dict[str, Any]], tr: Path, out: Path, rates: list[float],
                  other: dict[str, list[float]], deadline: float, tag: str) -> None:
    """Each MoE group's server alone (an H100 holds one 57 GB MoE server): started, warmed, at
    ``rates`` (``other[name]`` where given), scraped, stopped. None starts within 240 s of the
    deadline or the hard stop (a start and its warm pass take ~150-240 s)."""
    deadline = S.by(deadline)
    for g in gs:
        if time.monotonic() - C.T0 > deadline - 240:
            C.log(f"deadline: {g['name']} not started")
            continue
        now, names = start_warm([g], out, 31100, tr, first_alone=True, rate=8, n=32)
        rounds(names, tr, out, other.get(g["name"], rates), deadline, flip=False, shape="moe")
        V.scrape_all(names, out, tag)
        S.checkpoint()
        for sv in now.values():
            sv.stop(grace=3)


R14A = {"rates": [8, 8, 2, 2, 8, 8], "deadline": 840}


def plan_r14a(out: Path) -> dict[str, Any]:
    """Issue 33's 8B row at 8 and 2 req/s with repeats (round 11 ran one run a server there; round
    13 showed one run cannot tell a configuration from a slow-prefill stretch): static 5, static 4
    (round 11's best on goodput at 8 req/s), the policy on round 4's table and SGLang's EMA on its
    default tiers, warmed, each at 8, 8, 2, 2, 8, 8 req/s, the order reversed every round; read
    with ``compare --repeats``. Two device calls (``bg.sh r14a 560 --hard-stop 900``, then
    ``bg.sh r14a 400``). Needs an H200: on an H100 (round 14) each 8B server took ~21 GB and the
    third and fourth died out of memory at start, so only static 5 and static 4 ran (``r14b`` is
    the other half, two servers)."""
    return alternated_8b(out, ("static5", "static4", "policy", "ema-default"), R14A, "r14a")


R14B = {"rates": [8, 8, 2, 2, 8, 8], "deadline": 520}


def plan_r14b(out: Path) -> dict[str, Any]:
    """r14a's missing half in ONE call on an H100 (r14a's four 8B servers did not fit its 80 GB:
    two died out of memory at start): static 5 (r14a's best static at 8 and 2 req/s) and the
    policy on round 4's table, warmed (~250 s on a fresh machine), then 8, 8, 2, 2, 8, 8 req/s,
    the order reversed every round (~34 s a round). Every round is checkpointed, so a smaller
    ``--hard-stop`` keeps the rounds that finished.
    ``run.sh python3 tools/gpu/churn_campaign.py --plan r14b --out $OUT --hard-stop 560``."""
    return alternated_8b(out, ("static5", "policy"), R14B, "r14b")


R15 = {"moe_rates": [3, 8, 1, 8], "ema_rates": [3, 8, 1], "b_rates": [8, 8, 2, 2, 8, 8],
       "moe_deadline": 800, "ema_deadline": 1060, "deadline": 1500}


def plan_r15(out: Path) -> dict[str, Any]:
    """Issue 33's open rows in ONE background run on an H200 (``bg.sh r15 560 --hard-stop 1560``,
    then ``bg.sh r15 570`` and ``bg.sh r15 N`` within the warm window; every run checkpointed):
    the MoE policy on round 11's calibrated table beside static 7 at 3, 8, 1, 8 req/s; static 7
    stopped and SGLang's EMA on its default tiers started beside the same policy server, at 3, 8, 1;
    then the 8B shape: static 5 and the policy at 8, 8, 2, 2, 8, 8 (round 14's ``r14b``)."""
    now = moe_then_ema(out, "r15")
    return {**now, **serve_8b(out, ("static5", "policy"), R15["b_rates"], R15["deadline"], "r15")}


def partner_beside(now: dict[str, Any], pol: tuple[str, Any], g: dict[str, Any], out: Path, port: int,
                   trm: Path, rates: list[float], by: float, first: int) -> list[tuple[str, Any]]:
    """The MoE policy server's partner swapped: every other server stopped, ``g`` started beside
    it, warmed and run at ``rates`` (order flipped). Not started within 200 s of ``by`` (a MoE
    start, warm pass and three rates take ~240 s). Returns the pair that ran (the policy alone if
    the partner did not)."""
    for key in [key for key in now if not key.startswith(pol[0])]:
        now.pop(key).stop(grace=3)
    if pol[1] is None or not pol[1].is_running() or time.monotonic() - C.T0 > by - 200:
        C.log(f"deadline: {g['name']} not started")
        return [pol]
    got, gname = start_warm([g], out, port, trm, first_alone=False, rate=8, n=32)
    now.update(got)
    rounds([pol, *gname], trm, out, rates, by, flip=True, shape="moe", first=first)
    return [pol, *gname]


def moe_then_ema(out: Path, tag: str) -> dict[str, Any]:
    """The MoE policy beside static 7 at R15's rates; static 7 stopped and SGLang's EMA on its
    default tiers started beside the same policy server; then the MoE stopped and the 8B built."""
    now, names, trm = moe_calibrated(out, R15["moe_rates"], R15["moe_deadline"])
    V.scrape_all(names[1:], out, tag)
    ema_default = moe_cal_groups(out)[2]
    pair = partner_beside(now, names[0], ema_default, out, 31120, trm, R15["ema_rates"],
                          S.by(R15["ema_deadline"]), len(R15["moe_rates"]))
    next_shape(pair, now, out, tag, "moep", "8bp", V.P08P)
    return now


def plan_r15h(out: Path) -> dict[str, Any]:
    """r15 on an H100 (80 GB: two 8B servers, or ONE 57 GB MoE server, at a time), one background
    run (``bg.sh r15h 560 --hard-stop 1560``, then ``bg.sh r15h 570`` and ``bg.sh r15h N``): the 8B
    pair first (static 5 and the policy at 8, 8, 2, 2, 8, 8 req/s), then the MoE one server at a
    time, each warmed, at 3, 8 and 1 req/s: the policy on round 11's calibrated table (the H200's
    costs), static 7, SGLang's EMA on its default tiers, then the policy again at 3 and 8 (a drift
    check: the servers never ran side by side)."""
    fresh_work()
    S.build({"8bp": V.P08P}, out)
    started = serve_8b(out, ("static5", "policy"), R15["b_rates"], R15["deadline"] - 600, "r15h")
    tr = next_shape([], started, out, "r15h", "8bp", "moep", V.MOEP)
    moe_sequential(tr, out, "r15h")
    return started


def moe_sequential(tr: Path, out: Path, tag: str) -> None:
    """The MoE one server at a time, each warmed, at 3, 8 and 1 req/s: SGLang's EMA on round 8's
    scan tiers first (the one MoE row round 18 did not reach), the policy on round 11's calibrated
    table, static 7, the EMA on its default tiers, then the policy again at 3 and 8 (a drift check:
    the servers never ran side by side). Round 18 (H100, hard stop 850 s) ran policy, static 7
    and the default EMA, in that order; round 19 (hard stop 930 s) the first three here."""
    pol, static7, ema_default, ema_scan = moe_cal_groups(out)
    again = copy.deepcopy(pol)
    again["name"] = "policy-cal-moe-again"
    order = [ema_scan, pol, static7, ema_default, again]
    one_at_a_time(order, tr, out, [3, 8, 1], {again["name"]: [3, 8]}, R15["deadline"], tag)


def plan_r15m(out: Path) -> dict[str, Any]:
    """r15h's MoE half alone, for an H100 session with ~19 minutes of device time (2026-12-06:
    eleven refused tries first): ``bg.sh r15m 560 --hard-stop 1150``, then ``bg.sh r15m N``."""
    fresh_work()
    S.build({"moep": V.MOEP}, out)
    moe_sequential(V.traffic("moep", out, 400), out, "r15m")
    return {}


def plan_r16(out: Path) -> dict[str, Any]:
    """Issue 33's MoE row in the least device time (2026-12-07: ~12 minutes left after eight
    refused tries): the policy on round 11's calibrated table beside static 7 on an H200 (the
    pair needs >80 GB), warmed, at 8, 3 and 1 req/s (8 first: near saturation is where the
    policy's table leaves 7 steps; ~70 s for the pair there, ~35 s at 3 and 1), scraped after
    each rate so a hard stop keeps the switch counters.
    ``bg.sh r16 575 --hard-stop 470`` with ``needs_h200``."""
    now, names, trm = moe_calibrated(out, [], 0)
    for i, rate in enumerate([8, 3, 1]):
        rounds(names, trm, out, [rate], S.by(10_000), flip=i % 2 == 1, shape="moe", first=i)
        V.scrape_all(names, out, f"r16-{rate}")
        S.checkpoint()
    return now


R16B = {"rates": [16, 8, 2, 16, 8, 2], "deadline": 560}


def plan_r17(out: Path) -> dict[str, Any]:
    """r15 with its 8B phase swapped for r16b's (the 8B static-5 row is met, rounds 13-15; the 8B
    comparison with SGLang's EMA is not): the MoE policy beside static 7 at 3, 8, 1, 8 req/s, then
    SGLang's EMA on its default tiers beside the same policy server at 3, 8, 1, then the 8B policy
    beside SGLang's EMA at 16, 8, 2, 16, 8, 2 for whatever time is left (``bg.sh r17 560
    --hard-stop 1560`` on an H200, then ``bg.sh r17 570`` within the warm window)."""
    now = moe_then_ema(out, "r17")
    return {**now, **serve_8b(out, ("policy", "ema-default"), R16B["rates"], R15["deadline"], "r17")}


R18 = {"rates": [8, 3, 1], "deadlines": [560, 880, 1200]}


def plan_r18(out: Path) -> dict[str, Any]:
    """Issue 33's MoE row side by side on an H200 (the pair needs >80 GB; round 18 ran it one
    server at a time on an H100, ``r15m``): the policy on round 11's calibrated table, warmed,
    beside each partner in turn (static 7, SGLang's EMA on round 8's scan tiers, the EMA on its
    default tiers: the one-at-a-time rounds 18-19 measured both EMAs), each partner started,
    warmed, at 8, 3, 1 req/s (the order flipped each rate), scraped and stopped. A partner starts
    only while ~200 s remain before its deadline.
    ``bg.sh r18 580 --hard-stop 1280`` with ``needs_h200``, then ``bg.sh r18 580`` and
    ``bg.sh r18 N`` within the warm window (~1150 s of device time in all)."""
    rates, dls = R18["rates"], R18["deadlines"]
    now, names, trm = moe_calibrated(out, rates, S.by(dls[0]))
    V.scrape_all(names, out, "r18-static7")
    S.checkpoint()
    _, _, ema_default, ema_scan = moe_cal_groups(out)
    for k, (g, dl) in enumerate(zip((ema_scan, ema_default), dls[1:], strict=True), start=1):
        pair = partner_beside(now, names[0], g, out, 31100 + 20 * k, trm, rates, S.by(dl), k * len(rates))
        if len(pair) == 2:
            V.scrape_all(pair, out, f"r18-{g['name']}")
            S.checkpoint()
    return now


def plan_r16b(out: Path) -> dict[str, Any]:
    """The 8B policy (round 4's table: one state, 5 steps) beside SGLang's EMA on its default tiers,
    warmed, at 16, 8, 2, 16, 8, 2 req/s, the order reversed every round, for ~6 minutes of device
    time on any one card (2026-12-07: refused tries left too little for r16's MoE pair). Round
    11 compared the two in one run a rate only (at 16 req/s: throughput +3 %, goodput 0.62 vs
    0.65). ``bg.sh r16b 575 --hard-stop 380``."""
    return alternated_8b(out, ("policy", "ema-default"), R16B, "r16b")


def plan_r12(out: Path) -> dict[str, Any]:
    """Round 11's open rows, one background run (``bg.sh r12``). MoE first: the policy on the table
    ``calibrate`` moved to round 11's traffic (scan-moe-served.json: round 8's scan + round 11's
    policy, static-3 and static-7 probes; states {4, 6, 7}) beside static 7 (round 11's best
    static count at every rate), warmed, rates 3, 8, 1, 3, 8 with the order reversed each time.
    Then the 8B: static 5 and the policy (one state [5]) warmed; the /generate twin alternated
    (ours, bench_serving, ours, bench_serving at 8 req/s: round 11's +5.5 % ITL gap came with a
    server drift); the two servers ABAB at 16 req/s (round 11's slow-join stretches)."""
    now, names, _ = moe_calibrated(out, R12["moe_rates"], R12["moe_deadline"])
    tr = next_shape(names, now, out, "r12", "moep", "8bp", V.P08P)
    gs = [g for g in groups(out) if g["name"] in ("static5", "policy")]
    started, names = start_warm(gs, out, 31000, tr, first_alone=False)
    s5 = dict(names).get("static5")
    if s5 is not None and s5.is_running():
        pair_runs = ("ours-generate", "bench_serving-generate")
        for k in range(2):
            twin(s5, C.WORK / "8bp" / "target", tr, out / f"twin{k}", r=8, only=pair_runs)
    rounds(names, tr, out, [16, 16, 16, 16], R12["ab_deadline"], flip=False)
    V.scrape_all(names, out, "r12")
    return {**now, **started}


S.PLANS.update({"r10a": plan_r10a, "r10b": plan_r10b, "r10": plan_r10, "r11": plan_r11, "r12": plan_r12,
                "r12m": plan_r12m, "r12s": plan_r12s, "r13h": plan_r13h,
                "r13a": plan_r13a, "r13t": plan_r13t,
                "r14m": plan_r14m, "r14a": plan_r14a, "r14b": plan_r14b, "r15": plan_r15, "r15h": plan_r15h,
                "r15m": plan_r15m, "r16": plan_r16, "r16b": plan_r16b, "r17": plan_r17, "r18": plan_r18})

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    raise SystemExit(S.main())
