"""A scan's cycle costs moved to the traffic a server really serves (`sgl-eagle3 calibrate`).

A scan measures each (step count, batch size) on its own requests: short prompts and answers of
``--max-tokens``. Served traffic holds longer contexts, and verify's attention over them adds to
every cycle a cost that hardly depends on the step count (H200 round 11, MoE shape: +4.5 ms at
3 steps and +3.9 ms at 7 steps on a batch of 8; +0.76 / +0.70 ms at one stream). A cost the
same for every step count favours more steps (fewer cycles per token), so the scan's ranking can
flip: 3 and 7 steps tied in the scan at batch 8, 7 was 8 % faster per stream in the traffic.

The rule, per CUDA-graph batch size ``b`` where the probes hold steady cycles of some step counts:

    offset(b)      = cycle-weighted mean over those keys of (measured ms - scan ms at (s, b))
    calibrated(s, b) = measured ms of (s, b) where it has >= min_cycles steady cycles,
                       else scan ms at (s, b) + offset(b)

A row resting on the scan's line between two of its cells ("offset-interpolated") is as good as
that line: the scan never ran that step count at that batch size. A batch size the scan measured
and the probes did not see keeps the scan's figures ("uncalibrated"): no offset is guessed there.

Scan ms at (s, b) is the policy's own reading of the table (runtime/policy.ScanTable: padded,
interpolated). Acceptance stays the scan's (the policy counts it online anyway). The result is a
scan document (``eagle3_scan/1``) with one main cell per (candidate, calibrated batch size), so
`launch --policy` reads it as any scan, and its ``calibration`` block says what moved.
"""

from __future__ import annotations

import copy
from typing import Any

from ..runtime.errors import UserError
from ..runtime.policy import MIN_CELL_CYCLES, ScanTable, expected_tokens, pad_batch, table_from_doc

DEFAULT_MIN_CYCLES = 30  # steady cycles of a key before its own measured mean replaces the table
# A batch size whose measured cycles differ from the scan's by more than this share of the scan's
# figure is refused: that is another model, release or GPU, not the same one on longer contexts.
MAX_SHIFT = 0.5


def measured_keys(by_key: dict[str, dict[str, Any]], graph_bs: list[int] | None
                  ) -> dict[tuple[int, int], tuple[float, int]]:
    """{(steps, padded bs): (mean steady cycle ms, steady cycles)} from the probes' keys
    (``accounting.by_key_summary``); chains only (topk 1), CUDA-graph keys only (an eager key
    runs another kernel path than the table's cells)."""
    acc: dict[tuple[int, int], list[float]] = {}
    for v in by_key.values():
        steps, bs, n = v.get("steps"), v.get("bs"), v.get("cycles") or 0
        ms = ((v.get("phases") or {}).get("cycle") or {}).get("mean_ms")
        if not isinstance(steps, int) or not isinstance(bs, int) or v.get("topk") not in (1, None):
            continue
        if v.get("graph") is False or not ms or n <= 0:
            continue
        e = acc.setdefault((steps, pad_batch(bs, graph_bs)), [0.0, 0])
        e[0] += ms * n
        e[1] += n
    return {k: (s / n, int(n)) for k, (s, n) in acc.items()}


def offsets(table: ScanTable, meas: dict[tuple[int, int], tuple[float, int]]
            ) -> dict[int, dict[str, Any]]:
    """{padded bs: {offset_ms, cycles, keys}}: the cycle-weighted mean gap between what ran and
    what the table says, over the step counts the table has."""
    out: dict[int, dict[str, Any]] = {}
    for (steps, b), (ms, n) in sorted(meas.items()):
        ref = table.cycle_ms(steps, b)
        if ref is None:
            continue
        o = out.setdefault(b, {"sum": 0.0, "cycles": 0, "keys": []})
        o["sum"] += (ms - ref) * n
        o["cycles"] += n
        o["keys"].append({"steps": steps, "measured_ms": round(ms, 4), "scan_ms": round(ref, 4), "cycles": n})
    return {b: {"offset_ms": round(o["sum"] / o["cycles"], 4), "cycles": o["cycles"], "keys": o["keys"]}
            for b, o in out.items() if o["cycles"] > 0}


def calibrate(doc: dict[str, Any], by_key: dict[str, dict[str, Any]], *, sources: list[str],
              min_cycles: int = DEFAULT_MIN_CYCLES) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the calibrated scan document, one row per (batch size, step count) for the report)."""
    try:
        table = table_from_doc(doc)
    except ValueError as exc:
        raise UserError(str(exc), exit_code=2) from exc
    meas = measured_keys(by_key, table.graph_bs)
    top = max((b for pts in table.points.values() for b, _ in pts), default=0)
    beyond = sorted({b for _, b in meas if b > top})
    offs = {b: o for b, o in offsets(table, meas).items() if b <= top}
    for b, o in offs.items():
        worst = max(o["keys"], key=lambda k: abs(k["measured_ms"] - k["scan_ms"]) / k["scan_ms"])
        if abs(worst["measured_ms"] - worst["scan_ms"]) > MAX_SHIFT * worst["scan_ms"]:
            raise UserError(
                f"batch size {b}, {worst['steps']} steps: the probes measured {worst['measured_ms']:.2f} ms a cycle, "
                f"the scan {worst['scan_ms']:.2f} ms (more than {MAX_SHIFT:.0%} apart): are the probes from the "
                "scan's model, SGLang release and GPU?", exit_code=2)
    if not offs:
        raise UserError("the probe files hold no steady cycle of a step count the scan measured "
                        f"(scan candidates {table.candidates}; probes: "
                        f"{sorted({s for s, _ in meas}) or 'none'}): nothing to calibrate from", exit_code=2)
    scan_points = {(steps, b) for steps, pts in table.points.items() for b, _ in pts}
    sizes = sorted(set(offs) | {b for _, b in scan_points})
    cells, rows = [], []
    for b in sizes:
        for steps in table.candidates:
            scan_ms = table.cycle_ms(steps, b)
            if scan_ms is None or (b not in offs and (steps, b) not in scan_points):
                continue
            own = meas.get((steps, b))
            off = offs[b]["offset_ms"] if b in offs else 0.0
            if own is not None and own[1] >= min_cycles:
                ms, basis = own[0], "measured"
            elif b not in offs:
                ms, basis = scan_ms, "uncalibrated"
            else:  # the scan's own cell, or its line between cells (weaker: round 11, 7 steps at batch 4)
                ms = scan_ms + off
                basis = "offset" if (steps, b) in scan_points else "offset-interpolated"
            al = 1.0 if steps == 0 else table.accept_len.get(steps)
            if al is None:
                al = min(float(steps + 1), expected_tokens(table.prior, steps))
            rate = al * 1000.0 / ms
            cells.append({"steps": steps, "topk": 1, "draft_tokens": steps + 1, "bs": b, "level": b, "graph": True,
                          "cycles": offs[b]["cycles"] if b in offs else MIN_CELL_CYCLES, "cycle_ms": round(ms, 4),
                          "accept_len": round(al, 4), "per_position": [round(p, 4) for p in table.prior[:steps]],
                          "per_stream_tok_s": round(rate, 2), "throughput_tok_s": round(rate * b, 2),
                          "calibrated": basis, "scan_cycle_ms": round(scan_ms, 4)})
            rows.append({"bs": b, "steps": steps, "scan_ms": scan_ms, "ms": ms, "basis": basis,
                         "scan_rate": al * 1000.0 / scan_ms, "rate": rate, "offset_ms": off,
                         "cycles": (own or (0.0, 0))[1]})
    from ..runtime.policy import is_main
    from ..runtime.policy_trees import is_tree_cell

    # trees (scan --trees): kept at the scan's own costs, so a policy over chains and trees still has them
    trees = [{**copy.deepcopy(c), "calibrated": "tree: the scan's own cost"} for c in doc.get("cells") or []
             if isinstance(c, dict) and is_tree_cell(c) and is_main(c)]
    new = {k: copy.deepcopy(v) for k, v in doc.items() if k not in ("best", "adaptive", "client", "baseline")}
    new.update(cells=cells + trees, levels=sizes, levels_done=sizes)
    new["notes"] = [*(doc.get("notes") or []),
                    f"calibrated by sgl-eagle3 calibrate from {', '.join(sources)}: cycle ms per (steps, batch "
                    "size) moved by the probes' steady cycles of the served traffic (tune/calibrate.py)"
                    + (f"; trees {sorted({c.get('state') or c['steps'] for c in trees}, key=str)} keep the scan's own "
                       "costs (not calibrated)" if trees else "")]
    new["calibration"] = {"sources": sources, "min_cycles": min_cycles, "beyond_scan": beyond,
                          "offsets": {str(b): o for b, o in offs.items()},
                          "rule": "measured mean where a key has min_cycles steady cycles; else the scan's ms + "
                                  "the batch size's cycle-weighted mean offset of the measured keys"}
    return new, rows


def best_by_bs(rows: list[dict[str, Any]], field: str) -> dict[int, int]:
    """{bs: the step count with the highest per-stream rate in ``field``} (ties: fewer steps)."""
    best: dict[int, tuple[float, int]] = {}
    for r in rows:
        cur = best.get(r["bs"])
        if cur is None or r[field] > cur[0] + 1e-9:
            best[r["bs"]] = (r[field], r["steps"])
    return {b: s for b, (_, s) in sorted(best.items())}



def distinct_records(runs: list[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The window records of probe files (``prof_records.ProfileRun``), each server's cycles once.

    A file given twice, a copy of one, or a record repeated is counted once; so is a TP rank's
    stream beside its rank 0 (``<out>.rank<N>`` or a renamed copy: the same windows, written at
    the same time, with the same counts): the ranks measure the same cycles, and summed they would
    double every count and cross ``--min-cycles`` on half the evidence. Returns (records, notes)."""
    import json

    def window_id(r: dict[str, Any]) -> str:  # what every rank of one server writes alike
        return json.dumps([r.get(k) for k in ("time", "window", "cycles", "requests", "accept_hist", "spec")],
                          sort_keys=True)

    def rank(r: dict[str, Any]) -> int:
        return r["rank"] if isinstance(r.get("rank"), int) else 0

    first_rank: dict[str, int] = {}
    for run in runs:
        for rec in run.records:
            wid = window_id(rec)
            first_rank[wid] = min(first_rank.get(wid, rank(rec)), rank(rec))
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    for run in runs:
        dup = 0
        for rec in run.records:
            full = json.dumps(rec, sort_keys=True)
            if full in seen or rank(rec) != first_rank[window_id(rec)]:
                dup += 1
                continue
            seen.add(full)
            out.append(rec)
        if dup:
            what = "every window" if dup == len(run.records) else f"{dup} of {len(run.records)} windows"
            notes.append(f"{run.path}: {what} already read (the same file again, a copy, or another TP rank "
                         "of the same server); counted once")
    return out, notes
