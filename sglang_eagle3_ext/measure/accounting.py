"""Window records summed over a run: steady / boundary / per batch size / per configuration key, and what ran."""

from __future__ import annotations

import math
import statistics
from typing import Any

from ..documents.prof_records import ProfileRun, warmup_windows
from ..runtime.probes.window import (
    CYCLE,
    PHASES,
    REASONS,
    per_position_rates,
)


def _wavg(pairs: list[tuple[float, float]]) -> float | None:
    tw = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / tw if tw else None


def _wmedian(pairs: list[tuple[float, float]]) -> float | None:
    """Weighted median of (value, weight): the value where the cumulative weight reaches half."""
    pairs = sorted(p for p in pairs if p[0] is not None and p[1] > 0)
    total = sum(w for _, w in pairs)
    if not total:
        return None
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= total / 2:
            return v
    return pairs[-1][0]


def merge_phases(parts: list[tuple[dict[str, Any] | None, float]]) -> dict[str, dict[str, float | None]] | None:
    """Phase stats over windows, weighted by cycles: mean = weighted mean of window means;
    p50 / p90 = cycle-weighted median of the window p50s / p90s (per-window percentiles cannot be
    merged exactly; this is the documented approximation)."""
    parts = [(ph, w) for ph, w in parts if ph and w]
    if not parts:
        return None
    out: dict[str, dict[str, float | None]] = {}
    for p in (*PHASES, CYCLE):
        row: dict[str, float | None] = {}
        for k, fn in (("mean_ms", _wavg), ("p50_ms", _wmedian), ("p90_ms", _wmedian)):
            v = fn([(ph[p][k], w) for ph, w in parts if ph.get(p, {}).get(k) is not None])
            row[k] = round(v, 4) if v is not None else None
        out[p] = row
    return out


def _counts(parts: list[dict[str, Any]]) -> tuple[int | None, int | None, float | None]:
    """(requests, tokens, accept_len) summed over parts; accept_len weighted when counts are missing."""
    if parts and all(p.get("requests") is not None and p.get("tokens") is not None for p in parts):
        req = sum(p["requests"] for p in parts)
        tok = sum(p["tokens"] for p in parts)
        return req, tok, (round(tok / req, 4) if req else None)
    al = _wavg([(p["accept_len"], float(p.get("cycles") or 0)) for p in parts if p.get("accept_len") is not None])
    return None, None, (round(al, 4) if al is not None else None)


def steady_summary(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The steady-decode figures of a list of window records (RECORDS.md shape), or None when
    any record has no split (``eagle3_prof/1``, legacy blocks): then only all-cycle figures exist."""
    if not records or any(not isinstance(r.get("steady"), dict) for r in records):
        return None
    parts = [r["steady"] for r in records]
    cycles = sum(int(p.get("cycles") or 0) for p in parts)
    req, tok, al = _counts(parts)
    phases = merge_phases([(p.get("phases"), float(p.get("cycles") or 0)) for p in parts])
    cyc = phases[CYCLE]["mean_ms"] if phases else None
    acc = sum(p["accepted_drafts"] for p in parts) if all(p.get("accepted_drafts") is not None for p in parts) else None
    return {"cycles": cycles, "requests": req, "accepted_drafts": acc, "tokens": tok, "accept_len": al,
            "phases": phases,
            "eff_tok_s": round(al * 1000.0 / cyc, 2) if (al and cyc) else None}


def boundary_summary(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Boundary cycles over windows: counts and reasons summed, phases merged, extra ms summed."""
    if not records or any(not isinstance(r.get("boundary"), dict) for r in records):
        return None
    parts = [r["boundary"] for r in records]
    reasons = {k: sum(int((p.get("reasons") or {}).get(k) or 0) for p in parts) for k in REASONS}
    extra = [p.get("extra_ms") for p in parts if p.get("extra_ms") is not None]
    by_phase: dict[str, float] | None = None
    if any(p.get("extra_by_phase") for p in parts):
        by_phase = {ph: round(sum((p.get("extra_by_phase") or {}).get(ph, 0.0) for p in parts), 4) for ph in PHASES}
    joins = sum(int(p.get("joins") or 0) for p in parts)
    extra_ms = round(sum(extra), 4) if extra else None
    return {"cycles": sum(int(p.get("cycles") or 0) for p in parts), "reasons": reasons,
            "phases": merge_phases([(p.get("phases"), float(p.get("cycles") or 0)) for p in parts]),
            "extra_ms": extra_ms, "extra_by_phase": by_phase, "joins": joins,
            "extra_ms_per_join": round(extra_ms / joins, 4) if (extra_ms is not None and joins) else None}


def by_batch_summary(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Steady cycles per batch size over windows ({} for records without the split)."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        for k, v in (r.get("by_batch") or {}).items():
            groups.setdefault(int(k), []).append(v)
    out: dict[int, dict[str, Any]] = {}
    for bs in sorted(groups):
        parts = groups[bs]
        cycles = sum(int(p.get("cycles") or 0) for p in parts)
        req, tok, al = _counts(parts)
        phases = merge_phases([(p.get("phases"), float(p.get("cycles") or 0)) for p in parts])
        cyc = phases[CYCLE]["mean_ms"] if phases else None
        busy = sum(float(p.get("cycles") or 0) * p["phases"][CYCLE]["mean_ms"] for p in parts if p.get("phases"))
        out[bs] = {"cycles": cycles, "requests": req, "tokens": tok, "accept_len": al, "phases": phases,
                   "per_stream_tok_s": round(al * 1000.0 / cyc, 2) if (al and cyc) else None,
                   "throughput_tok_s": round(tok * 1000.0 / busy, 2) if (tok and busy) else None}
    return out


def by_key_summary(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Steady cycles per configuration key over windows (/3 ``by_key``; {} for older records).

    Counts and accept histograms are summed, phases merged (``merge_phases``), ``parts`` merged by
    block id (a hold block that spans two windows becomes one part) and sorted by block id, so a
    reader can put an interval over blocks (``block_intervals``). ``all_cycles`` / ``steady_share``:
    every cycle of the key and the steady share (``key_shares``; None for records before them)."""
    shares = key_shares(records)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        for k, v in (r.get("by_key") or {}).items():
            if isinstance(v, dict):
                groups.setdefault(k, []).append(v)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(groups, key=_key_order):
        cells = groups[key]
        head = cells[0]
        cycles = sum(int(c.get("cycles") or 0) for c in cells)
        req = sum(int(c.get("requests") or 0) for c in cells)
        acc = sum(int(c.get("accepted_drafts") or 0) for c in cells)
        hist: dict[int, int] = {}
        for c in cells:
            for n, cnt in (c.get("accept_hist") or {}).items():
                hist[int(n)] = hist.get(int(n), 0) + int(cnt)
        phases = merge_phases([(c.get("phases"), float(c.get("cycles") or 0)) for c in cells])
        cyc = phases[CYCLE]["mean_ms"] if phases else None
        parts: dict[int, list[Any]] = {}
        for c in cells:
            for b, n, ms, tok, rq in c.get("parts") or ():
                p = parts.setdefault(int(b), [int(b), 0, 0.0, 0, 0])
                p[1] += int(n)
                p[2] += float(ms)
                p[3] += int(tok)
                p[4] += int(rq)
        busy = sum(p[2] for p in parts.values())
        tok = acc + req
        al = tok / req if req else None
        steps = head.get("steps")
        share = shares.get(key) or {}
        out[key] = {
            "steps": steps, "topk": head.get("topk"), "draft_tokens": head.get("draft_tokens"),
            "bs": head.get("bs"), "graph": head.get("graph"), "windows": len(cells), "cycles": cycles,
            "all_cycles": share.get("all"), "steady_share": share.get("share"),
            "requests": req, "accepted_drafts": acc, "tokens": tok,
            "accept_len": round(al, 4) if al is not None else None,
            "accept_hist": {str(n): hist[n] for n in sorted(hist)},
            "per_position": per_position_rates(hist, steps or max(hist)) if (hist and steps != 0) else [],
            "phases": phases,
            "per_stream_tok_s": round(al * 1000.0 / cyc, 2) if (al and cyc) else None,
            "throughput_tok_s": round(tok * 1000.0 / busy, 2) if (tok and busy) else None,
            "parts": [[p[0], p[1], round(p[2], 4), p[3], p[4]] for _, p in sorted(parts.items())],
        }
    return out


# Below this many steady cycles (or hold blocks) a key's figures are printed but flagged: a
# per-stream figure of 30 cycles at one stream is +-5 % or more of acceptance noise on its own.
FEW_CYCLES = 30
FEW_BLOCKS = 3


def key_shares(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every key that ran, with its steady share over the windows: {key: {all, steady, share}}
    from the records' ``key_cycles`` (every key tagged, with or without a steady cycle). Records
    written before it count no key; a malformed entry is one line (exit 2)."""
    from ..runtime.errors import UserError

    out: dict[str, dict[str, Any]] = {}
    for r in records:
        kc = r.get("key_cycles")
        if kc is None:
            continue
        if not isinstance(kc, dict):
            raise UserError(f"probe record window {r.get('window')}: key_cycles must be an object", exit_code=2)
        for k, v in kc.items():
            if not (isinstance(v, list) and len(v) == 2 and all(type(x) is int and 0 <= x < 1 << 53 for x in v)
                    and v[1] <= v[0]):
                raise UserError(f"probe record window {r.get('window')}: key_cycles.{k} must be "
                                f"[cycles, steady cycles <= cycles], got {v!r:.60}", exit_code=2)
            c = out.setdefault(str(k), {"all": 0, "steady": 0})
            c["all"] += v[0]
            c["steady"] += v[1]
    for c in out.values():
        c["share"] = round(c["steady"] / c["all"], 4) if c["all"] else None
    return dict(sorted(out.items(), key=lambda kv: _key_order(kv[0])))


def trust_note(v: dict[str, Any]) -> str | None:
    """Why a key's figures need care, or None: few steady cycles, few hold blocks (the interval
    needs blocks), or a small steady share (most of its cycles were next to a boundary)."""
    why = []
    n, share = int(v.get("cycles") or 0), v.get("steady_share")
    if n < FEW_CYCLES:
        why.append(f"few steady cycles ({n})")
    blocks = len(v.get("parts") or [])
    if blocks and blocks < FEW_BLOCKS and any(p[0] >= 0 for p in v.get("parts") or []):
        why.append(f"{blocks} hold block(s)")
    if share is not None and share < 0.5:
        why.append(f"steady share {share:.0%} of {v.get('all_cycles')}")
    return "; ".join(why) or None


def _key_order(key: str) -> tuple[Any, ...]:
    """by_key keys in (bs, steps, ...) order; unknown parts (?) last."""
    fields = dict((f[0], f[1:]) for f in key.split(".") if f)
    def num(v: str | None) -> float:
        return float(v) if v and v.lstrip("-").isdigit() else float("inf")
    return (num(fields.get("b")), num(fields.get("s")), num(fields.get("k")), num(fields.get("d")), key)


def part_rates(parts: list[list[Any]]) -> list[dict[str, float | None]]:
    """Per part (hold block): cycles, cycle ms and per-stream tok/s of that block alone."""
    out = []
    for b, n, ms, tok, req in parts:
        cyc = ms / n if n else None
        al = tok / req if req else None
        out.append({"block": b, "cycles": n, "cycle_ms": round(cyc, 4) if cyc else None,
                    "per_stream_tok_s": round(al * 1000.0 / cyc, 2) if (al and cyc) else None})
    return out


_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """Student-t 97.5 % quantile (two-sided 95 %) for ``df`` >= 1 degrees of freedom."""
    return _T975[df - 1] if df - 1 < len(_T975) else 1.96


def _ratio_figures(n: float, ms: float, tok: float, req: float) -> dict[str, float | None]:
    al = tok / req if req else None
    cyc = ms / n if n else None
    return {"cycle_ms": cyc, "accept_len": al,
            "per_stream_tok_s": al * 1000.0 / cyc if (al and cyc) else None}


def block_intervals(parts: list[list[Any]]) -> dict[str, Any]:
    """95 % intervals of a key's pooled figures over its hold blocks (``parts``: [block, cycles,
    ms, tokens, requests]): the delete-one-block jackknife of each ratio (accept len = tokens /
    requests, cycle ms = ms / cycles, per-stream tok/s = their quotient), centred on the pooled
    figure, Student-t with blocks - 1 degrees of freedom. Each block weighs by its cycles, as in
    the pooled figure the table prints (blocks differ in length); None below 2 blocks."""
    parts = [p for p in parts if p[1] and p[4]]
    n = len(parts)
    out: dict[str, Any] = {"per_stream_tok_s": None, "accept_len": None, "cycle_ms": None, "blocks": n}
    if n < 2:
        return out
    tot = [sum(float(p[i]) for p in parts) for i in (1, 2, 3, 4)]
    whole = _ratio_figures(*tot)
    drop = [_ratio_figures(*(tot[j] - float(p[j + 1]) for j in range(4))) for p in parts]
    t = t975(n - 1)
    for k, v in whole.items():
        vals = [d[k] for d in drop]
        if v is None or any(x is None for x in vals):
            continue
        m = statistics.fmean(vals)
        se = math.sqrt((n - 1) / n * sum((x - m) ** 2 for x in vals))
        nd = 4 if k == "accept_len" else 3
        out[k] = [round(v - t * se, nd), round(v + t * se, nd)]
    return out


def window_intervals(records: list[dict[str, Any]], bs: int | None) -> dict[str, Any]:
    """95 % intervals of a span's figures over its windows (``block_intervals`` with windows as
    the blocks): accept length over every verify of each window, and per-stream tok/s over the
    steady cycles at batch size ``bs`` (the by_batch entry, when ``bs`` is given). What the
    figure of a few windows is worth: on one repeated text the windows' edges cut requests at
    stretches of their own choosing (docs/guide/profiling.md)."""
    every, at = [], []
    for r in records:
        w = r.get("window")
        ms = (r.get("phases") or {}).get(CYCLE, {}).get("mean_ms")
        if r.get("requests") and r.get("accepted_drafts") is not None and r.get("cycles") and ms is not None:
            every.append([w, r["cycles"], r["cycles"] * ms, r["requests"] + r["accepted_drafts"], r["requests"]])
        b = (r.get("by_batch") or {}).get(str(bs)) if bs is not None else None
        bms = ((b or {}).get("phases") or {}).get(CYCLE, {}).get("mean_ms")
        if b and b.get("cycles") and b.get("requests") and b.get("tokens") is not None and bms is not None:
            at.append([w, b["cycles"], b["cycles"] * bms, b["tokens"], b["requests"]])
    return {"accept_len": block_intervals(every)["accept_len"],
            "per_stream_tok_s": block_intervals(at)["per_stream_tok_s"] if at else None,
            "windows": len(every), "basis": "95 % t-interval over the windows (jackknife of the pooled figure)"}


def control_summary(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The /3 ``control`` over windows: the decider(s), candidates and decode cycles per batch size
    per step count summed (what SGLang's own adaptive mode, or a held schedule, ran where); None
    when no record carries it."""
    ctl = [r["control"] for r in records if isinstance(r.get("control"), dict)]
    if not ctl:
        return None
    choices: dict[str, dict[str, int]] = {}
    for c in ctl:
        for bs, by in (c.get("choices") or {}).items():
            row = choices.setdefault(str(bs), {})
            for steps, n in by.items():
                row[str(steps)] = row.get(str(steps), 0) + int(n)
    deciders = sorted({str(c.get("decider")) for c in ctl if c.get("decider")})
    cands = next((c.get("candidates") for c in reversed(ctl) if c.get("candidates")), None)
    return {"decider": "+".join(deciders) or None, "candidates": cands,
            "choices": {bs: dict(sorted(v.items(), key=lambda kv: _key_order("s" + kv[0])))
                        for bs, v in sorted(choices.items(), key=lambda kv: _key_order("b" + kv[0]))},
            "unmatched_accepts": sum(int(c.get("unmatched_accepts") or 0) for c in ctl),
            "policy": _policy_merge(ctl)}


def _policy_merge(ctl: list[dict[str, Any]]) -> dict[str, Any] | None:
    from .policy_report import merge  # the throughput policy's part of control (issue 25)

    return merge(ctl)


def summarize(run: ProfileRun, *, all_windows: bool = False) -> dict[str, Any]:
    """One record-shaped summary of all windows in a run (cycle-weighted means).

    Per-window percentiles cannot be merged, so the summary keeps means only; accept length is
    recomputed from the summed counts when every window has them.

    Window 1 of a process holds its first decode cycles: SGLang's own start-up warm-up request and
    the probes' lazy set-up. On the H200 (docs/results.md) that window's mean cycle was 10x
    the steady state and moved a 22-window mean by 40 %, so it is left out when later windows
    exist, unless ``all_windows``; the summary says so.
    """
    recs = run.records
    notes = list(run.notes)
    starts = warmup_windows(recs) if not all_windows and run.kind == "jsonl" else []
    if len(starts) == 1:
        notes.append(f"window 1 ({recs[starts[0]].get('cycles')} cycles, process warm-up) left out; "
                     "--all-windows keeps it")
    elif starts:  # a restarted server appended to the file: each process's warm-up window
        notes.append(f"window 1 of each of {len(starts)} server processes in this file "
                     f"({sum(int(recs[i].get('cycles') or 0) for i in starts)} cycles, process warm-up) "
                     "left out; --all-windows keeps them")
    recs = [r for i, r in enumerate(recs) if i not in set(starts)]
    w = [float(r.get("cycles") or 1) for r in recs]
    phases = {}
    for p in (*PHASES, CYCLE):
        vals = [(r["phases"][p]["mean_ms"], wi) for r, wi in zip(recs, w, strict=True)
                if r["phases"].get(p, {}).get("mean_ms") is not None]
        phases[p] = {"mean_ms": round(v, 4) if (v := _wavg(vals)) is not None else None}
    counts = all(r.get("requests") and r.get("accepted_drafts") is not None for r in recs)
    if counts:
        req = sum(r["requests"] for r in recs)
        acc = sum(r["accepted_drafts"] for r in recs)
        accept_len: float | None = acc / req + 1.0
    else:
        req = acc = None
        vals = [(r["accept_len"], wi) for r, wi in zip(recs, w, strict=True) if r.get("accept_len") is not None]
        accept_len = _wavg(vals)
    spec: dict[str, Any] = {"steps": None, "topk": None, "draft_tokens": None}
    for r in recs:
        for k, v in (r.get("spec") or {}).items():
            if v is not None:
                spec[k] = v
    per_position: list[float | None] = []
    if all(r.get("accept_hist") for r in recs) and recs:
        hist: dict[int, int] = {}
        for r in recs:
            for n, c in r["accept_hist"].items():
                hist[int(n)] = hist.get(int(n), 0) + int(c)
        steps = spec["steps"] or max(hist)
        per_position = per_position_rates(hist, steps)
    else:
        pos_recs = [(r["per_position"], wi) for r, wi in zip(recs, w, strict=True) if r.get("per_position")]
        if pos_recs:
            n = max(len(p) for p, _ in pos_recs)
            for i in range(n):
                vals = [(p[i], wi) for p, wi in pos_recs if i < len(p) and p[i] is not None]
                v = _wavg(vals)
                per_position.append(round(v, 4) if v is not None else None)
    cycle_ms = phases[CYCLE]["mean_ms"]
    cycles = [r.get("cycles") for r in recs]
    # the profiler's own measured read cost (records that carry it): host ms per window spent
    # waiting for the GPU and reading the timers, over the cycles it covered
    probe_us = None
    if recs and all(r.get("probe_read_ms") is not None and r.get("cycles") for r in recs):
        spent = sum(r["probe_read_ms"] + (r.get("probe_wait_ms") or 0.0) for r in recs)
        probe_us = round(1000.0 * spent / sum(r["cycles"] for r in recs), 2)
    modes = sorted({str(r.get("mode")) for r in recs})
    ranks = sorted({r["rank"] for r in recs if isinstance(r.get("rank"), int)})
    steady = steady_summary(recs)
    all_cycles = {"cycles": sum(c for c in cycles if c) if all(cycles) else None, "phases": phases,
                  "accept_len": round(accept_len, 4) if accept_len is not None else None,
                  "eff_tok_s": round(accept_len * 1000.0 / cycle_ms, 2) if (accept_len and cycle_ms) else None}
    basis = "all"
    if steady is not None and steady["phases"] and steady["cycles"]:
        basis = "steady"
        phases = {p: dict(v) for p, v in steady["phases"].items()}
        cycle_ms = phases[CYCLE]["mean_ms"]
        if steady["accept_len"] is not None:
            accept_len = steady["accept_len"]
    elif recs:
        why = ("no steady cycle (every cycle was next to a request boundary)" if steady is not None
               else "records without the steady/boundary split (eagle3_prof/1 or older blocks)")
        notes.append(f"{why}: phases, eff tok/s and break-even use all cycles, including request starts")
    return {
        "file": run.path,
        "kind": run.kind,
        "windows": len(recs),
        "cycles": sum(c for c in cycles if c) if all(cycles) else None,
        "requests": req,
        "accepted_drafts": acc,
        "accept_len": round(accept_len, 4) if accept_len is not None else None,
        "per_position": per_position,
        "phases": phases,
        "eff_tok_s": round(accept_len * 1000.0 / cycle_ms, 2) if (accept_len and cycle_ms) else None,
        "mode": "+".join(modes),
        "spec": spec,
        "sglang_version": next((r.get("sglang_version") for r in reversed(recs) if r.get("sglang_version")), None),
        "route": next((r.get("route") for r in reversed(recs) if r.get("route")), None),
        "legacy": any("legacy" in r for r in recs),
        "probe_read_us_per_cycle": probe_us,
        "rank": ranks[0] if len(ranks) == 1 else None,
        "basis": basis,  # what phases / accept_len / eff_tok_s above are made of
        "all_cycles": all_cycles,
        "steady": steady,
        "boundary": boundary_summary(recs),
        "by_batch": {str(k): v for k, v in by_batch_summary(recs).items()},
        "by_key": by_key_summary(recs),
        "key_cycles": key_shares(recs),
        "control": control_summary(recs),
        "notes": notes,
    }
