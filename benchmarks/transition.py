"""Whole-run figures of a transition workload from `bench --concurrency` ladders (issue 25's GPU
comparison: one server, phases of low and high concurrency in one run).

A ladder with levels in the order of the phases (e.g. ``--concurrency 1,32,8,64``) runs on one
server, level after level (all runs of a level, then the next), so the server sees the load
change at each level; run ``r`` of the transition = run ``r`` of every level. Its figure = all completion tokens / all wall time of those runs; the interval is a 95 %
t-interval over the runs (``--runs`` of the bench). Per level, the ladder's own per-stream and
total tok/s are printed beside it. Several files (one per server: policy, SGLang's default tiers,
`adaptive write` tiers, each static step count) are compared in one table.

With ``--paired BASE``, the files are grouped by server (their folder's name: rounds
``transition-r*.json`` of one server pool) and compared run by run. This holds for traffic whose
run ``r`` sends the same prompts to every server (``bench --prompts`` on a ``tiny --paths`` build,
temperature 0): per level and for the whole run, each server's median over rounds per run index,
and its ratio to BASE's, run index by run index (mean and range). On the H200 (round 8) a static
or policy server repeats a run index within 0.5 % round after round, while one index differs from
another by up to 27 %.

Run: python benchmarks/transition.py LADDER.json [LADDER.json ...] [--json] [--paired BASE]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_eagle3_ext.documents import bench_doc  # noqa: E402
from sglang_eagle3_ext.runtime.errors import UserError  # noqa: E402

# two-sided 95 % Student t quantiles for n - 1 degrees of freedom (n = runs)
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def whole_run(doc: dict[str, Any]) -> dict[str, Any]:
    levels = doc.get("levels") or []
    if not levels:
        raise ValueError("no levels: not a ladder (bench --concurrency A,B,...)")
    runs: dict[int, list[float]] = {}
    for lv in levels:
        for r in (lv.get("bench") or {}).get("runs") or []:
            if r.get("completion_tokens") is None or not r.get("wall_s"):
                continue
            acc = runs.setdefault(int(r["index"]), [0.0, 0.0, 0])
            acc[0] += float(r["completion_tokens"])
            acc[1] += float(r["wall_s"])
            acc[2] += 1
    full = [t / w for t, w, n in runs.values() if n == len(levels) and w > 0]
    if not full:
        raise ValueError("no run index present at every level")
    if not any(full):
        raise ValueError("no completion token in any run (did every request fail? see the ladder's errors)")
    mean = statistics.fmean(full)
    half = (_T95.get(len(full) - 1, 1.96) * statistics.stdev(full) / math.sqrt(len(full))) if len(full) > 1 else None
    return {"order": [lv["concurrency"] for lv in levels], "runs": len(full), "tok_s": round(mean, 1),
            "interval": [round(mean - half, 1), round(mean + half, 1)] if half is not None else None,
            "levels": {str(lv["concurrency"]): {"per_stream_tok_s": lv["summary"].get("per_stream_tok_s"),
                                                "throughput_tok_s": lv["summary"].get("throughput_tok_s")}
                       for lv in levels}}


def by_run(doc: dict[str, Any]) -> dict[str, dict[int, float]]:
    """Per level (and ``whole``): run index -> per-stream decode tok/s (whole: tokens / wall)."""
    out: dict[str, dict[int, float]] = {}
    tot: dict[int, list[float]] = {}
    for lv in doc.get("levels") or []:
        for r in (lv.get("bench") or {}).get("runs") or []:
            if r.get("decode_tok_s") is not None:
                out.setdefault(str(lv["concurrency"]), {})[int(r["index"])] = float(r["decode_tok_s"])
            if r.get("completion_tokens") is not None and r.get("wall_s"):
                acc = tot.setdefault(int(r["index"]), [0.0, 0.0])
                acc[0] += float(r["completion_tokens"])
                acc[1] += float(r["wall_s"])
    out["whole"] = {i: t / w for i, (t, w) in tot.items()}
    return out


def paired(files: dict[str, list[dict[str, Any]]], base: str) -> dict[str, Any]:
    """Server -> its rounds' ladders; per level: each server's median per run index over rounds
    and its run-by-run ratio to ``base``."""
    med: dict[str, dict[str, dict[int, float]]] = {}
    for name, docs in files.items():
        pooled: dict[str, dict[int, list[float]]] = {}
        for d in docs:
            for lvl, runs in by_run(d).items():
                for i, v in runs.items():
                    pooled.setdefault(lvl, {}).setdefault(i, []).append(v)
        med[name] = {lvl: {i: statistics.median(v) for i, v in sorted(runs.items())} for lvl, runs in pooled.items()}
    if base not in med:
        raise ValueError(f"--paired {base}: no such server among {sorted(med)}")
    out: dict[str, Any] = {}
    for name, levels in med.items():
        row = out[name] = {"rounds": len(files[name]), "levels": {}}
        for lvl, runs in levels.items():
            ref = med[base].get(lvl, {})
            ratios = [runs[i] / ref[i] - 1 for i in runs if ref.get(i)]
            row["levels"][lvl] = {"by_run": {i: round(v, 1) for i, v in runs.items()},
                                  "vs_base_pct": round(100 * statistics.fmean(ratios), 2) if ratios else None,
                                  "range_pct": [round(100 * min(ratios), 2), round(100 * max(ratios), 2)]
                                  if ratios else None}
    return out


def print_paired(got: dict[str, Any], base: str) -> None:
    print(f"paired by run index (median over each server's rounds); vs {base}: mean of the run-by-run "
          "ratios [range]")
    levels = list(next(iter(got.values()))["levels"])
    for lvl in levels:
        what = "whole run, tokens / wall" if lvl == "whole" else f"{lvl} stream(s), per-stream decode"
        print(f"  {what}:")
        for name, row in got.items():
            cell = row["levels"].get(lvl)
            if cell is None:
                continue
            runs = "  ".join(f"{v:8.1f}" for v in cell["by_run"].values())
            vs = "" if name == base or cell["vs_base_pct"] is None else \
                f"  {cell['vs_base_pct']:+.2f} % [{cell['range_pct'][0]:+.2f}, {cell['range_pct'][1]:+.2f}]"
            print(f"    {name:14s} ({row['rounds']} rounds) {runs}{vs}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("ladders", nargs="+", type=Path)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--paired", metavar="BASE", help="compare servers (the files' folder names) run by run against BASE")
    a = ap.parse_args(argv)
    docs: list[tuple[Path, dict[str, Any]]] = []
    for p in a.ladders:
        try:  # the one ladder reader (bounded, typed): a bad file is one line naming it and the field
            docs.append((p, bench_doc.load_ladder(p)))
        except UserError as exc:
            print(f"transition: {exc}", file=sys.stderr)
            return 2
        if not any(r.get("completion_tokens") for lv in docs[-1][1]["levels"]
                   for r in (lv.get("bench") or {}).get("runs") or []):
            print(f"transition: {p}: no completion token in any run (did every request fail? see its errors)",
                  file=sys.stderr)
            return 2
    if a.paired:
        groups: dict[str, list[dict[str, Any]]] = {}
        for p, doc in docs:
            groups.setdefault(p.resolve().parent.name, []).append(doc)
        try:
            got = paired(groups, a.paired)
        except (ValueError, KeyError, TypeError) as exc:
            print(f"transition: {exc}", file=sys.stderr)
            return 2
        if a.json:
            print(json.dumps(got, indent=1))
        else:
            print_paired(got, a.paired)
        return 0
    out = {}
    for p, doc in docs:
        try:
            out[str(p)] = whole_run(doc)
        except (ValueError, KeyError, TypeError) as exc:
            print(f"{p}: {exc}", file=sys.stderr)
            return 2
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    best = max(v["tok_s"] for v in out.values())
    for p, v in out.items():
        iv = f"[{v['interval'][0]}, {v['interval'][1]}]" if v["interval"] else "(one run)"
        lv = " / ".join(f"{k}: {x['throughput_tok_s']:.0f}" for k, x in v["levels"].items()
                        if x["throughput_tok_s"] is not None)
        print(f"{p}: {v['tok_s']:.1f} tok/s whole run {iv} over {v['runs']} runs "
              f"({(v['tok_s'] / best - 1) * 100:+.2f} % vs the best file); per level total tok/s {lv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
