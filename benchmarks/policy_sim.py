"""The throughput policy (sglang_eagle3_ext/runtime/policy.py) against SGLang's EMA rule and every static
step count, in a small deterministic simulation (CPU, no SGLang, no timing of this machine).

The simulated server: a decode cycle at (steps, batch size) costs the scan table's cycle ms
(policy.ScanTable.cycle_ms: CUDA-graph padding and interpolation; steps the table lacks, e.g. the
7 of SGLang's default tiers, extrapolated linearly in steps) times a +-2 % deterministic jitter;
each request of the cycle accepts a prefix of its drafts, drawn from the workload's true
per-position rates with ONE uniform per request and cycle, shared by every arm (common random
numbers: the arms differ only by what they chose). Verify results reach the decider one cycle late
(the overlap scheduler) with the step count of the cycle that produced them.

Arms: the policy (one tier listing the table's candidates, started at the largest, as
`launch --policy` does); SGLang's EMA rule (re-implemented from 0.5.16
speculative/adaptive_spec_params.py AdaptiveStepSlot + AdaptiveSpeculativeParams routing,
checked against that source by tests/test_policy.py) with the release's default tiers and with
the tiers `adaptive write` would choose from the same table (within 5 %); every static step count.

Tables: ``h200-8b-p08`` = tests/data/policy/scan-h200-8b-p08.json, the committed H200 round-3
probe records of docs/data/h200-2026-12-01/8b-p08 as a scan table (make_scan_from_sweep; its step 0
cells are derived, see there); ``synthetic`` = a made-up cost shape (cycle ms growing with
tokens in flight) whose best step count falls with load (5 / 3 / 2 at 1 / 32 / 64 streams),
to show switching. Figures are simulated tok/s, not measurements.

Run: python benchmarks/policy_sim.py [--table h200-8b-p08|synthetic|FILE] [--tokens N] [--json]
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglang_eagle3_ext.runtime import policy  # noqa: E402
from sglang_eagle3_ext.runtime.errors import UserError  # noqa: E402
from sglang_eagle3_ext.tiny.construct import chain_verify  # noqa: E402

H200_SCAN = REPO / "tests" / "data" / "policy" / "scan-h200-8b-p08.json"
H200_SWEEP = REPO / "docs" / "data" / "h200-2026-12-01" / "8b-p08" / "p08"

# 0.5.16 speculative/adaptive_spec_params.py DEFAULT_ADAPTIVE_CONFIG (candidate steps; the
# hysteresis values of its tiers are kept too, they change when the EMA moves).
SGLANG_0516_DEFAULTS: dict[int, dict[str, Any]] = {
    1: {"candidate_steps": [1, 3, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25},
    8: {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    32: {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    64: {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
}


# ------------------------------------------------------------------ SGLang's EMA rule (0.5.16)

class EmaSlot:
    """0.5.16 adaptive_spec_params.py AdaptiveStepSlot (update / _recompute_params), same numbers."""

    def __init__(self, initial_steps: int, cfg: dict[str, Any]) -> None:
        self.candidate_steps = sorted(set(cfg["candidate_steps"]))
        self.ema_alpha = cfg.get("ema_alpha", 0.2)
        self.update_interval = cfg.get("update_interval", 5)
        self.warmup_batches = cfg.get("warmup_batches", 10)
        self.down_hysteresis = cfg.get("down_hysteresis", -0.25)
        self.up_hysteresis = cfg.get("up_hysteresis", 0.0)
        self.ceiling_coeff = cfg.get("ceiling_coeff", 0)
        if initial_steps in self.candidate_steps:
            self.current_steps = initial_steps
        else:
            self.current_steps = self.candidate_steps[len(self.candidate_steps) // 2]
        self.ema_accept_len = float(self.current_steps - 1)
        self._batch_count = 0

    def update(self, correct: Sequence[int]) -> bool:
        if not correct:
            return False
        if self.current_steps > 0:
            avg = sum(correct) / len(correct)
            self.ema_accept_len = (1 - self.ema_alpha) * self.ema_accept_len + self.ema_alpha * avg
        self._batch_count += 1
        if self._batch_count <= self.warmup_batches:
            return False
        if (self._batch_count - self.warmup_batches) % self.update_interval != 0:
            return False
        return self._recompute()

    def _recompute(self) -> bool:
        old = self.current_steps
        idx = self.candidate_steps.index(old)
        old_idx = idx
        if old == 0:  # probe the smallest positive step after a zero-step interval
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            return self._apply(old, target)
        while idx > 0:
            prev = self.candidate_steps[idx - 1]
            drop = (0.5 if prev == 0 else prev - 0.5) + self.down_hysteresis
            if self.ema_accept_len <= drop:
                idx -= 1
            else:
                break
        if not idx < old_idx:
            while idx < len(self.candidate_steps) - 1:
                if self.ema_accept_len > self.candidate_steps[idx] - 0.5 + self.up_hysteresis:
                    idx += 1
                else:
                    break
        target = self.candidate_steps[idx]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and self.candidate_steps[idx] > ceiling:
                    idx -= 1
                target = self.candidate_steps[idx]
        return self._apply(old, target)

    def _apply(self, old: int, target: int) -> bool:
        if target != old:
            self.current_steps = target
            return True
        return False


class EmaParams:
    """0.5.16 AdaptiveSpeculativeParams: pad to a CUDA-graph size, then the tier with the largest
    key <= it (the smallest below all keys)."""

    def __init__(self, initial_steps: int, tiers: dict[int, dict[str, Any]],
                 graph_bs: Sequence[int] | None) -> None:
        self.bs_list = sorted(tiers)
        self.slots = {bs: EmaSlot(initial_steps, tiers[bs]) for bs in self.bs_list}
        self.graph_bs = sorted(graph_bs) if graph_bs else None

    @property
    def candidate_steps(self) -> list[int]:
        return sorted({s for p in self.slots.values() for s in p.candidate_steps})

    def route(self, bs: int) -> EmaSlot:
        q = policy.pad_batch(bs, self.graph_bs)
        i = bisect.bisect_right(self.bs_list, q) - 1
        return self.slots[self.bs_list[max(0, i)]]


# ------------------------------------------------------------------ the arms


class Arm:
    name = ""
    built: list[int] = []

    def choose(self, bs: int, current: int) -> int:
        raise NotImplementedError

    def observe(self, correct: list[int], bs: int, steps: int) -> None:
        pass


class StaticArm(Arm):
    def __init__(self, steps: int) -> None:
        self.name, self.steps, self.built = f"static {steps}", steps, [steps]

    def choose(self, bs: int, current: int) -> int:
        return self.steps


class EmaArm(Arm):
    """The controller's two calls as 0.5.16 adaptive_runtime_state.AdaptiveController makes them."""

    def __init__(self, name: str, tiers: dict[int, dict[str, Any]], graph_bs: Sequence[int] | None) -> None:
        union = sorted({s for t in tiers.values() for s in t["candidate_steps"]})
        self.name, self.built = name, union
        self.params = EmaParams(max(union), tiers, graph_bs)  # started at the largest (launch's rule)
        self.worker_steps = max(union)

    def choose(self, bs: int, current: int) -> int:
        self.worker_steps = self.params.route(bs).current_steps
        return self.worker_steps

    def observe(self, correct: list[int], bs: int, steps: int) -> None:
        slot = self.params.route(bs)
        if slot.update(correct):
            self.worker_steps = slot.current_steps


class PolicyArm(Arm):
    def __init__(self, table: policy.ScanTable, **knobs: Any) -> None:
        self.name = "policy"
        self.decider = policy.PolicyDecider(table, **knobs)
        self.built = table.candidates

    def choose(self, bs: int, current: int) -> int:
        return self.decider.choose(bs, current, self.built)

    def observe(self, correct: list[int], bs: int, steps: int) -> None:
        self.decider.observe(correct, bs, steps)


# ------------------------------------------------------------------ the simulated server


@dataclass
class Walk:
    """Acceptance from the tiny construction's own maps instead of rates: exact greedy decoding
    (tiny/construct.py simulate_request). A request starts at f(its prompt's last token), runs
    ``max_tokens``, and the next prompt's request takes its slot; prompts are taken in order from
    ``lasts`` from the phase's start, as `bench` takes them (its prompt index restarts per level)."""
    f: list[int]
    g: list[int]
    lasts: list[int]
    max_tokens: int = 256


class WalkState:
    def __init__(self, walk: Walk) -> None:
        self.w, self.slots, self.next = walk, [], 0  # slots: [token, tokens done]

    def _new(self) -> list[int]:
        x = self.w.f[self.w.lasts[self.next % len(self.w.lasts)]]  # the prefill's token
        self.next += 1
        return [x, 1]

    def step(self, bs: int, steps: int) -> list[int]:
        """One verify of ``bs`` requests at ``steps``: their accepted drafts."""
        while len(self.slots) < bs:
            self.slots.append(self._new())
        del self.slots[bs:]
        out = []
        for i, (x, done) in enumerate(self.slots):
            c, t = chain_verify(self.w.f, self.w.g, x, steps)
            out.append(c)
            self.slots[i] = self._new() if done + c + 1 >= self.w.max_tokens else [t, done + c + 1]
        return out


@dataclass
class Phase:
    batch_size: int
    tokens_per_stream: int          # the phase ends when batch_size x this many tokens are out
    rates: Sequence[float]          # true conditional per-position acceptance
    name: str = ""
    walk: Walk | None = None        # or: acceptance from the construction's maps


@dataclass
class Result:
    cycles: int = 0
    tokens: int = 0
    ms: float = 0.0
    stream_cycles: int = 0          # sum of batch sizes (request-cycles)
    steps: dict[int, int] = field(default_factory=dict)
    phases: dict[str, list[float]] = field(default_factory=dict)  # name -> [tokens, ms]

    @property
    def tok_s(self) -> float:
        return self.tokens * 1000.0 / self.ms if self.ms else 0.0

    @property
    def per_stream_tok_s(self) -> float:
        # tokens per request-cycle / ms per cycle = the mean stream's rate
        return self.tok_s * self.cycles / self.stream_cycles if self.stream_cycles else 0.0


def world_cost(table: policy.ScanTable) -> Callable[[int, int], float]:
    """cycle ms at (steps, bs): the table's, steps it lacks extrapolated linearly in steps."""
    top = table.candidates

    def cost(steps: int, bs: int) -> float:
        ms = table.cycle_ms(steps, bs)
        if ms is not None:
            return ms
        if len(top) < 2:  # one measured step count: a flat cost is all the table says
            ms = table.cycle_ms(top[-1], bs)
            assert ms is not None
            return ms
        pos = [s for s in top if s > 0]
        a, b = (pos[-2], pos[-1]) if len(pos) >= 2 else (top[-2], top[-1])  # a --steps 0,1 scan: 0 and 1
        ma, mb = table.cycle_ms(a, bs), table.cycle_ms(b, bs)
        assert ma is not None and mb is not None
        return mb + max(0.0, (mb - ma) / (b - a)) * (steps - b)
    return cost


def accepted(u: float, rates: Sequence[float], steps: int) -> int:
    """Leading drafts accepted by a request with uniform ``u``: the largest c <= steps with
    u < prod_{j<=c} rates_j (monotone in u, so every arm sees the same request)."""
    c, run = 0, 1.0
    while c < steps:
        run *= rates[c] if c < len(rates) else rates[-1]
        if u >= run:
            break
        c += 1
    return c


def simulate(arm: Arm, phases: Sequence[Phase], cost: Callable[[int, int], float],
             seed: int = 1, ramp: int = 4) -> Result:
    """Run the phases in turn: fixed work per phase (a closed-loop client: a faster arm finishes
    sooner), the batch moving toward each phase's size by at most ``ramp`` requests a cycle."""
    rng = random.Random(seed)
    res = Result()
    pending: tuple[list[int], int, int] | None = None
    current = max(arm.built)
    bs = phases[0].batch_size
    for n, phase in enumerate(phases):
        name = phase.name or f"bs{phase.batch_size}#{n}"
        ph = res.phases.setdefault(name, [0.0, 0.0])
        target = phase.batch_size * phase.tokens_per_stream
        done = 0
        walk = WalkState(phase.walk) if phase.walk is not None else None
        while done < target:
            if bs != phase.batch_size:
                bs += max(-ramp, min(ramp, phase.batch_size - bs))
            us = [rng.random() for _ in range(bs)]
            jitter = 1.0 + 0.02 * (2.0 * rng.random() - 1.0)
            if pending is not None:                   # overlap: last cycle's verify result now
                arm.observe(*pending)
            steps = arm.choose(bs, current)
            assert steps in arm.built, (arm.name, steps)
            current = steps
            correct = (walk.step(bs, steps) if walk is not None
                       else [accepted(u, phase.rates, steps) for u in us])
            toks = bs + sum(correct)
            ms = cost(steps, bs) * jitter
            done += toks
            res.cycles += 1
            res.tokens += toks
            res.ms += ms
            res.stream_cycles += bs
            res.steps[steps] = res.steps.get(steps, 0) + 1
            ph[0] += toks
            ph[1] += ms
            pending = (correct, bs, steps)
    return res


# ------------------------------------------------------------------ tables


def synthetic_doc() -> dict[str, Any]:
    """A made-up scan (not measured): ms = base + per-step draft + per-token verify, all growing
    with batch size; conditional acceptance 0.7 at every position."""
    cells = []
    for bs in (1, 8, 32, 64, 128):
        for s in range(0, 6):
            ms = 5.0 + 0.05 * bs + s * (0.4 + 0.01 * bs) + 0.02 * bs * (s + 1)
            al = policy.expected_tokens([0.7] * s, s)
            cells.append({"steps": s, "topk": 1, "draft_tokens": s + 1, "bs": bs, "cycles": 400,
                          "cycle_ms": round(ms, 4), "accept_len": round(al, 4),
                          "per_position": [0.7] * s, "graph": True, "level": bs})
    return {"schema": policy.SCHEMA, "sglang_version": "synthetic", "candidates": list(range(6)),
            "levels": [1, 8, 32, 64, 128], "cells": cells, "interrupted": False}


def make_scan_from_sweep(sweep: Path = H200_SWEEP) -> dict[str, Any]:
    """A scan table (eagle3_scan/1, the fields the policy reads plus a few) from a sweep's probe
    records: per (steps, batch size) the steady cycles' cycle-weighted mean cycle ms and accept
    length, per_position the windows' mean at that step count. Step 0 = SGLang's 0-step state:
    the sweep did not run it, so its cells are DERIVED from the no-spec baseline's client tok/s
    and the step-0 penalty measured in issue 22 (-11 % at 1 stream, -34 % at 16; -22 % assumed
    at 8 and -34 % at 32)."""
    results = json.loads((sweep / "results.json").read_text())
    cells: list[dict[str, Any]] = []
    for c in results["configs"]:
        if c.get("baseline") or c.get("status") != "ok":
            continue
        steps = int(c["steps"])
        agg: dict[int, list[float]] = {}
        pp: list[list[float]] = []
        for line in (sweep / "configs" / c["name"].replace(" ", "-") / "prof.jsonl").read_text().splitlines():
            r = json.loads(line)
            for bs, e in (r.get("by_batch") or {}).items():
                a = agg.setdefault(int(bs), [0, 0.0, 0, 0])
                a[0] += e["cycles"]
                a[1] += e["phases"]["cycle"]["mean_ms"] * e["cycles"]
                a[2] += e["tokens"]
                a[3] += e["requests"]
            if r.get("per_position") and len(r["per_position"]) == steps:
                pp.append(r["per_position"])
        per_pos = [round(sum(x) / len(x), 4) for x in zip(*pp, strict=True)] if pp else None
        for bs, (n, ms, toks, reqs) in sorted(agg.items()):
            if n < 100:
                continue  # batch sizes passed through on the way (joins): too few cycles
            cells.append({"steps": steps, "topk": 1, "draft_tokens": steps + 1, "bs": bs,
                          "cycles": int(n), "cycle_ms": round(ms / n, 4),
                          "accept_len": round(toks / reqs, 4), "per_position": per_pos,
                          "graph": True, "level": bs})
    penalty = {1: 0.11, 8: 0.22, 32: 0.34}
    for c in results["configs"]:
        if c.get("baseline") and c.get("ladder"):
            for lv in c["ladder"]["levels"]:
                bs = int(lv["concurrency"])
                tok_s = lv["summary"]["per_stream_tok_s"] * (1 - penalty.get(bs, 0.34))
                cells.append({"steps": 0, "topk": 1, "draft_tokens": 1, "bs": bs, "cycles": 100,
                              "cycle_ms": round(1000.0 / tok_s, 4), "accept_len": 1.0,
                              "per_position": [], "graph": True, "level": bs,
                              "derived": "no-spec client tok/s x (1 - step-0 penalty of issue 22)"})
    return {"schema": policy.SCHEMA, "sglang_version": "0.5.16", "model": "llama3-8b shape",
            "draft": "partial draft P 0.8", "candidates": sorted({c["steps"] for c in cells}),
            "levels": [1, 8, 32], "interrupted": False, "cells": cells,
            "source": f"{sweep.relative_to(REPO)} probe records (make_scan_from_sweep)"}


def table_named(name: str) -> tuple[policy.ScanTable, dict[str, Any]]:
    if name == "synthetic":
        doc = synthetic_doc()
    elif name == "h200-8b-p08":
        doc = json.loads(H200_SCAN.read_text())
    else:  # the scan reader every command uses (bounded, typed): one line for any bad file
        from sglang_eagle3_ext.documents import scan_doc

        doc = scan_doc.load(name)
    return policy.table_from_doc(doc, source=name), doc


def written_tiers(table: policy.ScanTable, levels: Sequence[int]) -> dict[int, dict[str, Any]]:
    """What `adaptive write` chooses from this table (per level: within 5 % of the best)."""
    from sglang_eagle3_ext.tune import adaptive

    per_stream = {bs: {s: v * 1000.0 for s in table.candidates
                       if (v := table.table_rate(s, bs)) is not None} for bs in levels}
    return {c.batch_size: {"candidate_steps": c.candidates} for c in adaptive.choose(per_stream)}


# ------------------------------------------------------------------ the report


def workloads(table_rates: Sequence[float], tokens: int) -> dict[str, list[Phase]]:
    """Steady loads, a transition run (phases of low and high concurrency in one run, in the
    manner of SGLang's benchmark/bench_adaptive_speculative.py) and a drop in acceptance."""
    low = [min(r, 0.3) for r in table_rates]
    half = tokens // 2
    return {
        "steady 1": [Phase(1, tokens, table_rates)],
        "steady 8": [Phase(8, tokens, table_rates)],
        "steady 32": [Phase(32, tokens, table_rates)],
        "steady 64": [Phase(64, tokens, table_rates)],
        "transition": [Phase(1, half, table_rates, "1"), Phase(32, half, table_rates, "32"),
                       Phase(8, half, table_rates, "8"), Phase(64, half, table_rates, "64"),
                       Phase(1, half, table_rates, "1 again")],
        "acceptance drop at 8": [Phase(8, half, table_rates, "as scanned"),
                                 Phase(8, half, low, "rates <= 0.3")],
    }


def run(table_name: str, tokens: int, seed: int = 1) -> dict[str, Any]:
    table, doc = table_named(table_name)
    levels = sorted({int(c["bs"]) for c in doc["cells"]})
    cost = world_cost(table)
    graph_bs = table.graph_bs
    out: dict[str, Any] = {"table": table_name, "tokens_per_stream": tokens, "seed": seed, "workloads": {}}
    for wname, phases in workloads(table.prior, tokens).items():
        arms: list[Arm] = [PolicyArm(table),
                           EmaArm("EMA, SGLang 0.5.16 default tiers", SGLANG_0516_DEFAULTS, graph_bs),
                           EmaArm("EMA, adaptive-write tiers", written_tiers(table, levels), graph_bs)]
        arms += [StaticArm(s) for s in table.candidates]
        rows = {}
        for arm in arms:
            r = simulate(arm, phases, cost, seed)
            # per stream only where one load ran (a mixed run has no one stream rate)
            ps = round(r.per_stream_tok_s, 1) if len(phases) == 1 else None
            rows[arm.name] = {"tok_s": round(r.tok_s, 1), "per_stream_tok_s": ps,
                              "steps": dict(sorted(r.steps.items())),
                              "phases": {k: round(v[0] * 1000.0 / v[1], 1) for k, v in r.phases.items()}}
            if isinstance(arm, PolicyArm):
                rows[arm.name]["control"] = arm.decider.summary()
        statics = {k: v for k, v in rows.items() if k.startswith("static")}
        best = max(statics, key=lambda k: statics[k]["tok_s"])
        pol = rows["policy"]["tok_s"]
        out["workloads"][wname] = {
            "arms": rows, "best_static": best,
            "policy_vs_best_static_pct": round((pol / rows[best]["tok_s"] - 1) * 100, 2),
            "policy_vs_defaults_pct": round((pol / rows["EMA, SGLang 0.5.16 default tiers"]["tok_s"] - 1) * 100, 2),
            "policy_vs_written_pct": round((pol / rows["EMA, adaptive-write tiers"]["tok_s"] - 1) * 100, 2),
        }
    return out


MOE_R7 = REPO / "docs" / "data" / "h200-2026-12-02-r7" / "moe4" / "scan-moe" / "scan.json"
# H200 round 7 (docs/results.md): per-stream decode medians at 1 and 8 streams, whole 1 -> 8 run
H200_R7 = {"policy": (281.5, 190.9, 959), "static 3": (250.7, 197.8, 940), "static 6": (269.5, 182.5, 911),
           "EMA, SGLang 0.5.16 default tiers": (259.9, 195.6, 943), "EMA, adaptive-write tiers": (250.4, 187.7, 874)}
MOE_R8 = REPO / "docs" / "data" / "h200-2026-12-02-r8" / "moe5" / "scan-moe" / "scan.json"
# H200 round 8 on the paths build: per level the mean over the 3 run indices (each a fixed set of
# prompts) of the median over rounds; whole run the same (benchmarks/transition.py --paired)
H200_R8 = {"policy": (249.0, 157.9, 786.4), "static 3": (231.0, 158.0, 762.4), "static 7": (249.7, 156.9, 755.4),
           "EMA, SGLang 0.5.16 default tiers": (235.5, 158.1, 764.5), "EMA, adaptive-write tiers": (234.9, 158.0, 765.9)}
MEASURED = {MOE_R7: ("one", H200_R7), MOE_R8: ("tiny", H200_R8)}


def run_walks(tokens_per_level: int = 1024, seed: int = 1, paths: int = 32, scan: Path = MOE_R7) -> dict[str, Any]:
    """Round 7's MoE comparison replayed on the construction's own maps (`tiny --shape moe
    --acceptance 0.8`, seed 0) with the round-7 scan's cycle ms: the 1 -> 8 ladder (4 requests of
    256 tokens per stream and level, as warm-up + 3 runs), once with every request on the one
    chat path (what the H200 ran) and once cycling through the `tiny --paths N` prompts. ``scan``:
    whose cycle ms (round 8's, measured on the paths traffic: its H200 figures go beside that case)."""
    import tempfile

    from sglang_eagle3_ext.tiny import construct, tokenizer
    from sglang_eagle3_ext.tiny import paths as tpaths

    table, doc = table_named(str(scan))
    cost = world_cost(table)
    f, g, _ = construct.partial_maps(0.8, 0, 32000)
    with tempfile.TemporaryDirectory() as tmp:  # the words a paths build picks
        tokenizer.build_tokenizer(Path(tmp), template=tokenizer.TAIL_TEMPLATE)
        words = tpaths.path_words(Path(tmp), f, paths)
    cases = {"one chat path (what the H200 ran)": [198], f"tiny --paths {paths} prompts": [i for _, i in words]}
    out: dict[str, Any] = {"table": str(scan.resolve().relative_to(REPO)) if scan.resolve().is_relative_to(REPO)
                           else str(scan), "seed": seed, "cases": {}}
    for cname, lasts in cases.items():
        phases = [Phase(1, tokens_per_level, [], "1", Walk(f, g, lasts)),
                  Phase(8, tokens_per_level, [], "8", Walk(f, g, lasts))]
        arms: list[Arm] = [PolicyArm(table),
                           EmaArm("EMA, SGLang 0.5.16 default tiers", SGLANG_0516_DEFAULTS, table.graph_bs),
                           EmaArm("EMA, adaptive-write tiers", written_tiers(table, [1, 8]), table.graph_bs)]
        arms += [StaticArm(s) for s in table.candidates]
        rows = {}
        for arm in arms:
            r = simulate(arm, phases, cost, seed)
            rows[arm.name] = {"tok_s": round(r.tok_s, 1), "steps": dict(sorted(r.steps.items())),
                              "per_stream": {k: round(v[0] * 1000.0 / v[1] / int(k), 1) for k, v in r.phases.items()}}
        statics = {k: v for k, v in rows.items() if k.startswith("static")}
        out["cases"][cname] = {"arms": rows, "best_static": max(statics, key=lambda k: statics[k]["tok_s"]),
                               "best_static_at": {lv: max(statics, key=lambda k: statics[k]["per_stream"][lv])
                                                  for lv in ("1", "8")}}
    return out


def render_walks(res: dict[str, Any]) -> str:
    lines = [f"{res['table']}: the 1 -> 8 ladder on the MoE construction's maps, simulated (not measurements); "
             "per-stream tok/s at 1 / 8 streams, whole run tok/s (decode only: no prefill, no gaps)"]
    for cname, c in res["cases"].items():
        base = c["arms"]["static 3"]["tok_s"]
        lines.append(f"\n{cname}: best static over the run {c['best_static']}; best at 1 stream "
                     f"{c['best_static_at']['1']}, at 8 {c['best_static_at']['8']}")
        for name, r in c["arms"].items():
            steps = " ".join(f"{s}:{n}" for s, n in r["steps"].items())
            case, fig = MEASURED.get(REPO / res["table"], ("", {}))
            h = fig.get(name) if case and cname.startswith(case) else None
            meas = f"   H200: {h[0]:.1f} / {h[1]:.1f}, whole {h[2]:.0f} ({100 * (h[2] / fig['static 3'][2] - 1):+.1f} %)" if h else ""
            lines.append(f"  {name:<34} {r['per_stream']['1']:>6.1f} / {r['per_stream']['8']:>6.1f}   "
                         f"whole {r['tok_s']:>7.1f} ({100 * (r['tok_s'] / base - 1):+5.1f} % vs static 3)"
                         f"  cycles by steps {steps}{meas}")
    return "\n".join(lines)


def render(res: dict[str, Any]) -> str:
    lines = [f"table {res['table']}: simulated tok/s over all streams (steady loads: "
             f"{res['tokens_per_stream']} tokens per stream; transition phases half that; seed {res['seed']}); "
             f"not measurements"]
    for wname, w in res["workloads"].items():
        lines.append(f"\n{wname}: policy {w['policy_vs_best_static_pct']:+.2f} % vs best static "
                     f"({w['best_static']}), {w['policy_vs_defaults_pct']:+.2f} % vs EMA defaults, "
                     f"{w['policy_vs_written_pct']:+.2f} % vs EMA adaptive-write tiers")
        for name, r in w["arms"].items():
            steps = " ".join(f"{s}:{n}" for s, n in r["steps"].items())
            ph = "" if len(r["phases"]) < 2 else "  tok/s by phase " + " / ".join(f"{v:.0f}" for v in r["phases"].values())
            ps = f"{r['per_stream_tok_s']:>7.1f} per stream" if r["per_stream_tok_s"] is not None else " " * 18
            lines.append(f"  {name:<34} {r['tok_s']:>9.1f} tok/s  {ps}  cycles by steps {steps}{ph}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--table", default="all", help="h200-8b-p08, synthetic, a scan.json, or all")
    ap.add_argument("--tokens", type=int, default=4000, help="tokens per stream of a steady load")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--walks", nargs="?", const=str(MOE_R7), default=None, metavar="SCAN",
                    help="the H200 MoE 1 -> 8 ladder on the construction's maps, one path vs tiny --paths 32, "
                         f"on SCAN's cycle ms (default round 7's; round 8's: {MOE_R8.relative_to(REPO)})")
    ap.add_argument("--write-h200-scan", action="store_true",
                    help=f"rebuild {H200_SCAN.relative_to(REPO)} from the committed sweep and exit")
    a = ap.parse_args(argv)
    if not 1 <= a.tokens <= 10**7:
        print(f"policy_sim: --tokens {a.tokens}: tokens per stream must be 1..10000000", file=sys.stderr)
        return 2
    if a.write_h200_scan:
        H200_SCAN.parent.mkdir(parents=True, exist_ok=True)
        H200_SCAN.write_text(json.dumps(make_scan_from_sweep(), indent=1) + "\n")
        print(f"wrote {H200_SCAN}")
        return 0
    try:
        if a.walks:
            res = run_walks(seed=a.seed, scan=Path(a.walks))
            print(json.dumps(res, indent=1) if a.json else render_walks(res))
            return 0
        names = ["h200-8b-p08", "synthetic"] if a.table == "all" else [a.table]
        results = [run(n, a.tokens, a.seed) for n in names]
    except (ValueError, KeyError, TypeError, UserError) as exc:
        print(f"policy_sim: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(results, indent=1))
    else:
        print("\n\n".join(render(r) for r in results))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
