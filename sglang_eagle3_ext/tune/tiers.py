"""Speculation under load: per-batch-size figures, a cost model over tokens in flight, a tier verdict.

Inputs of one steps x concurrency sweep (docs/guide/sweep.md):
- **measured**: per config (steps; 0 = no speculation) and concurrency level, the client's
  per-stream decode tok/s and total tok/s (bench ladder);
- **probes**: per profiled config, the steady cycles per batch size (``by_batch`` of the
  ``eagle3_prof/2`` window records, RECORDS.md): phases, cycle, accept length per batch size.

Cost model per batch size b (why: verify is one target forward over every token in flight, so
its cost follows b x (steps + 1), not steps alone; measured on the 8B shape, per-stream gain fell
x3.07 -> x1.28 from 1 to 64 streams):

    verify_ms(b, k)  = v0 + v1 x b x (k + 1)          one fit over all (config, batch size) points
    draft_ms(b, k)   = k x (d0 + d1 x b)              draft per step, fitted over b
    rest_ms(b)       = extend + other at b            mean over configs that have b
    cycle_ms(b, k)   = draft + verify + rest
    per-stream(b, k) = accept_len(k, b) x 1000 / cycle_ms(b, k)

accept_len(k, b) is the probe's steady accept length of the k-step run at b when there is one,
else (k below a profiled K) ``analysis.accept_len_from_rates`` on the K-step run's per-position
acceptance (greedy chain drafts do not depend on the steps after them). No speculation at b is
never predicted from probes (the no-spec server has no EAGLE worker to probe): it is the measured
baseline ladder, or ``1000 / verify_ms(b, 0)`` (a target forward over b tokens) marked ``rough``.

So one profiled run per step count, each over the concurrency ladder, predicts every (k, b) the
model covers, including batch sizes between the ladder's levels (probe batch sizes) and step
counts below the largest profiled one.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from ..runtime.probes.window import ALL_PHASES
from ..runtime.safeparse import LOG_LIMIT, Unreadable, json_loads, read_text

PHASES = ALL_PHASES  # draft, verify, extend, other, cycle (probes/window.py)


# ------------------------------------------------------------------ probe records


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Window records of a probe JSONL (lines that are not valid records are skipped: a NaN or a
    word where a count belongs must not reach the fits; ``profile`` names such lines)."""
    from ..documents.prof_records import _check_values

    out = []
    p = Path(path)
    if not p.exists():
        return out
    try:  # the probes' bounded read (a regular file of at most LOG_LIMIT; never a FIFO's hang)
        text = read_text(p, what="a probe file", limit=LOG_LIMIT, errors="replace")
    except Unreadable as exc:
        raise UserError(str(exc), exit_code=2) from None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json_loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        try:  # the nested values the fits read (by_batch, spec, per_position), checked as `profile` does
            _check_values({**rec, "phases": rec.get("phases") or {}}, str(p))
        except UserError:
            continue
        out.append(rec)
    return out


def by_batch(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Steady figures per batch size, aggregated over windows (accounting.by_batch_summary)."""
    from ..measure import accounting

    return accounting.by_batch_summary(records)


# ------------------------------------------------------------------ fits


def _fit(points: list[tuple[float, float]]) -> dict[str, float] | None:
    """Least squares y = a + b x; None below two distinct x."""
    if len(points) < 2 or len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - b * mx
    rms = (sum((y - a - b * x) ** 2 for x, y in points) / n) ** 0.5
    return {"a": a, "b": b, "rms_ms": rms, "n": n}


def _ph(entry: dict[str, Any], name: str) -> float | None:
    return ((entry.get("phases") or {}).get(name) or {}).get("mean_ms")


# ------------------------------------------------------------------ the analysis


def _configs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in doc.get("configs", []) if c.get("status") == "ok" and c.get("bench")
            and (c.get("baseline") or c.get("topk") in (None, 1))]


def measured_cells(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (steps, concurrency) the client measured; the fastest config per cell."""
    cells: dict[tuple[int, int], dict[str, Any]] = {}
    for c in _configs(doc):
        steps = 0 if c.get("baseline") else int(c["steps"])
        levels = (c.get("ladder") or {}).get("levels") or [
            {"concurrency": c["bench"]["params"].get("concurrency", 1),
             "summary": {"per_stream_tok_s": c["bench"]["summary"]["decode_tok_s"]["avg"],
                         "throughput_tok_s": c["bench"]["summary"]["throughput_tok_s"]["avg"],
                         "accept_length": c["bench"]["summary"].get("accept_length")}}]
        for lv in levels:
            s = lv["summary"]
            if s.get("per_stream_tok_s") is None:
                continue
            key = (steps, int(lv["concurrency"]))
            row = {"steps": steps, "batch_size": key[1], "config": c["name"],
                   "per_stream_tok_s": s["per_stream_tok_s"], "throughput_tok_s": s.get("throughput_tok_s"),
                   "accept_length": s.get("accept_length")}
            if key not in cells or row["per_stream_tok_s"] > cells[key]["per_stream_tok_s"]:
                cells[key] = row
    return [cells[k] for k in sorted(cells, key=lambda k: (k[1], k[0]))]


def analyse(doc: dict[str, Any], out_dir: str | Path | None = None) -> dict[str, Any] | None:
    """The per-tier section of a sweep's analysis; None for a single-concurrency sweep without
    probe batch figures (nothing per tier to say)."""
    notes: list[str] = []
    meas = measured_cells(doc)
    levels = sorted({r["batch_size"] for r in meas})
    probe: list[dict[str, Any]] = []
    rates_of: dict[int, list[float | None]] = {}
    for c in _configs(doc):
        if c.get("baseline"):
            continue
        k = int(c["steps"])
        path = Path(out_dir) / "configs" / c["slug"] / "prof.jsonl" if out_dir else None
        recs = read_records(path) if path else []
        bb = by_batch(recs)
        if not bb and path and path.exists():
            notes.append(f"{c['name']}: probe records without by_batch (eagle3_prof/1): no per-batch figures")
        for bs, e in bb.items():
            probe.append({"steps": k, "batch_size": bs, "cycles": e.get("cycles"),
                          "accept_length": e.get("accept_len"), "cycle_ms": _ph(e, "cycle"),
                          "draft_ms": _ph(e, "draft"), "verify_ms": _ph(e, "verify"),
                          "extend_ms": _ph(e, "extend"), "other_ms": _ph(e, "other"),
                          "per_stream_tok_s": e.get("per_stream_tok_s"),
                          "throughput_tok_s": e.get("throughput_tok_s"),
                          "tokens_in_flight": bs * (k + 1)})
        rates = (c.get("profile") or {}).get("per_position") or next(
            (r["per_position"] for r in reversed(recs) if r.get("per_position")), None)
        if rates:
            rates_of[k] = list(rates)
    if len(levels) < 2 and not probe:
        return None

    # cost model over tokens in flight
    vfit = _fit([(float(p["tokens_in_flight"]), p["verify_ms"]) for p in probe if p["verify_ms"] is not None])
    dfit = _fit([(float(p["batch_size"]), p["draft_ms"] / p["steps"]) for p in probe
                 if p["draft_ms"] is not None and p["steps"]])
    rest: dict[int, list[float]] = {}
    for p in probe:
        if p["extend_ms"] is not None and p["other_ms"] is not None:
            rest.setdefault(p["batch_size"], []).append(p["extend_ms"] + p["other_ms"])
    model = None
    if vfit and dfit:
        model = {"verify_ms": f"{vfit['a']:.3f} + {vfit['b']:.5f} x batch x (steps+1)",
                 "draft_ms_per_step": f"{dfit['a']:.3f} + {dfit['b']:.5f} x batch",
                 "verify_fit": vfit, "draft_fit": dfit}
    else:
        notes.append("cost model needs probe verify/draft times at >= 2 tokens-in-flight values "
                     "(profile the configs over a concurrency ladder)")

    # predictions at every (k, b) the model covers
    pred: list[dict[str, Any]] = []
    pal = {(p["steps"], p["batch_size"]): p["accept_length"] for p in probe}
    ks = sorted({p["steps"] for p in probe} | {k for K in rates_of for k in range(1, K + 1)})
    bss = sorted(set(levels) | {p["batch_size"] for p in probe})
    if model:
        for b in bss:
            r = statistics.fmean(rest[b]) if b in rest else (
                statistics.fmean([x for v in rest.values() for x in v]) if rest else 0.0)
            for k in ks:
                al, how = pal.get((k, b)), "probe accept length at this batch size"
                if al is None:
                    big = max((K for K in rates_of if K >= k), default=None)
                    if big is None:
                        continue
                    from ..measure.analysis import accept_len_from_rates

                    al, how = accept_len_from_rates(rates_of[big], k), f"per-position acceptance of the {big}-step run"
                cyc = k * (dfit["a"] + dfit["b"] * b) + vfit["a"] + vfit["b"] * b * (k + 1) + r
                if cyc > 0:
                    pred.append({"steps": k, "batch_size": b, "accept_length": al, "cycle_ms": cyc,
                                 "per_stream_tok_s": al * 1000.0 / cyc, "how": f"cost model; {how}"})
            v0 = vfit["a"] + vfit["b"] * b
            if v0 > 0:
                pred.append({"steps": 0, "batch_size": b, "accept_length": 1.0, "cycle_ms": v0,
                             "per_stream_tok_s": 1000.0 / v0,
                             "how": "rough: one target forward over b tokens (verify fit at steps 0)"})

    # verdict per tier: measured first, predicted where nothing was measured
    m = {(r["steps"], r["batch_size"]): r["per_stream_tok_s"] for r in meas}
    pm = {(r["steps"], r["batch_size"]): r["per_stream_tok_s"] for r in pred}
    rec = []
    stops = None
    for b in bss:
        cell = {k: v for (k, bb), v in m.items() if bb == b}
        source = "measured"
        if not cell:
            cell, source = {k: v for (k, bb), v in pm.items() if bb == b}, "predicted"
        if not cell:
            continue
        best = max(cell, key=lambda k: (cell[k], -k))
        base = cell.get(0)
        if base is None and (0, b) in pm:
            base = pm[(0, b)]
        spec_best = max((v for k, v in cell.items() if k > 0), default=None)
        pays = None if base is None or spec_best is None else spec_best > base
        rec.append({"batch_size": b, "best_steps": best, "per_stream_tok_s": cell[best], "source": source,
                    "no_spec_tok_s": base, "best_spec_tok_s": spec_best, "speculation_pays": pays,
                    "gain_pct": (spec_best / base - 1) * 100 if base and spec_best else None})
        if pays is False and stops is None and source == "measured":
            stops = b
    meas_levels = [r for r in rec if r["source"] == "measured"]
    if stops is not None:
        sentence = (f"Speculation stops paying at concurrency {stops}: no-spec is faster per stream from there "
                    f"on the measured ladder.")
    elif meas_levels and all(r["speculation_pays"] for r in meas_levels if r["speculation_pays"] is not None):
        sentence = f"Speculation pays at every measured concurrency (up to {meas_levels[-1]['batch_size']})."
    else:
        sentence = "No no-spec baseline per level: cannot say where speculation stops paying."
    best_by = ", ".join(f"{r['batch_size']}: {r['best_steps']}" for r in rec)
    sentence += f" Best steps per batch size ({'measured' if meas_levels else 'predicted'}; 0 = no-spec): {best_by}."
    return {"levels": levels, "measured": meas, "probe": probe, "cost_model": model, "predicted": pred,
            "recommendation": rec, "stops_paying_at": stops, "sentence": sentence, "notes": notes}


def require_levels(values: Any, where: str) -> list[int]:
    """A concurrency list from YAML: distinct positive integers."""
    vals = values if isinstance(values, list) else [values]
    if not vals or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in vals) \
            or len(set(vals)) != len(vals):
        raise UserError(f"{where}: concurrency must be a positive integer or a list of distinct ones", 2)
    return list(vals)
