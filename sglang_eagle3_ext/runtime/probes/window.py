"""Turn one window of resolved cycle timings and accept counts into a record and a text block.

Pure functions over plain numbers: no timers, no torch. The record is schema ``eagle3_prof/3``
(docs/reference/architecture.md; /2 = /1 plus the steady / boundary / by_batch split of issue 15; /3 = /2
plus ``by_key`` and ``control``, every cycle tagged with what ran it, issue 22); the block is the
seeds' EAGLE3_PROF layout plus the timing mode, "(incl. bonus)" on the accept length, three lines
saying which cycles are steady decode and what the boundary cycles cost, and one saying which
step counts ran when more than one did.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

SCHEMA = "eagle3_prof/3"
# what readers accept; /1 has no steady split, /2 no per-key split (by_key, control)
SCHEMAS = ("eagle3_prof/1", "eagle3_prof/2", SCHEMA)

# Boundary reasons of a cycle, as bits (the hot path ORs them into one int per cycle).
JOIN, LEAVE, EXTEND, BATCH, IDLE, SWITCH = 1, 2, 4, 8, 16, 32
REASONS = {"join": JOIN, "leave": LEAVE, "extend": EXTEND, "batch_change": BATCH, "idle": IDLE,
           "switch": SWITCH}

# A cycle's tag (a list the hot path fills in place; accept counts arrive up to a cycle late):
# steps, topk, draft tokens, batch size, graph (True / False / None), hold block (-1: none),
# then the matched accept counts: requests, accepted drafts, the per-request correct drafts, and
# whether the batch size is the forward side's own (tag_cycle: exact) rather than read back from
# the accept counts (the source patch: a size change is seen when the counts arrive).
T_STEPS, T_TOPK, T_DT, T_BS, T_GRAPH, T_BLOCK, T_REQ, T_ACC, T_LIST, T_EXACT = range(10)
# Phase names and labels: the one definition (stdlib only, so the probes inside SGLang, the
# readers, the CLI, the plot and the /metrics publisher all import it from here).
TIMED = ("draft", "verify", "extend")  # what phase_begin/phase_end bracket (patch anchors, hooks)
PHASES = (*TIMED, "other")  # other = cycle minus the timed phases
CYCLE = "cycle"
ALL_PHASES = (*PHASES, CYCLE)  # the keys of a record's "phases"
LABELS = {  # the EAGLE3_PROF block's labels (documents/prof_blocks.py parses them back)
    "draft": "Draft steps",
    "verify": "Target verify",
    "extend": "Draft re-extend",
    "other": "Other overhead",
}
CYCLE_LABEL = "TOTAL cycle"
LABEL_TO_PHASE = {label: name for name, label in LABELS.items()}


def percentile(sorted_vals: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of an already sorted, non-empty list."""
    n = len(sorted_vals)
    if n == 1:
        return float(sorted_vals[0])
    pos = (n - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * frac)


def phase_stats(values: Sequence[float]) -> dict[str, float]:
    s = sorted(values)
    return {
        "mean_ms": round(sum(s) / len(s), 4),
        "p50_ms": round(percentile(s, 50), 4),
        "p90_ms": round(percentile(s, 90), 4),
    }


def per_position_rates(hist: Mapping[int, int], steps: int) -> list[float | None]:
    """Conditional acceptance per draft position 1..steps.

    A request with n accepted drafts accepted positions 1..n and was rejected at n+1 (when
    n < steps), so position i was *reached* by every request with n >= i-1 and *accepted* by
    every request with n >= i. Rate = accepted / reached = P(accept i | accepted 1..i-1);
    None where no request reached the position.
    """
    rates: list[float | None] = []
    for i in range(1, steps + 1):
        reached = sum(c for n, c in hist.items() if n >= i - 1)
        accepted = sum(c for n, c in hist.items() if n >= i)
        rates.append(round(accepted / reached, 6) if reached else None)
    return rates


def classify(why: Sequence[int], nreq: Sequence[int], prev_bs: int | None,
             exact: Sequence[int] | None = None) -> tuple[list[int | None], list[int], int | None]:
    """Batch size and boundary bits per cycle, from what the hot path recorded.

    ``why[i]``: bits set live (EXTEND: a non-decode forward ran inside cycle i's "other"; JOIN:
    cycle i is the first decode after one; IDLE: cycle i ended in, or follows, an idle gap).

    ``exact``: each cycle's own batch size from the forward side (the plugin's tag). Then a size
    change alone is no boundary: a cycle at a new batch size is a cycle of the new key (a request
    that joined ran a prefill first, which marked EXTEND / JOIN live; one that left ran nothing
    else). Otherwise (the source patch) ``nreq[i]``, the requests counted by record_accept during
    cycle i, is its size (0 = no count arrived, the size is carried from the cycle before), and a
    change between cycles i-1 and i marks both BATCH plus JOIN (grew) or LEAVE (shrank): counts
    that arrive a cycle late (overlap scheduler) show a change one cycle late, so marking both
    sides covers the cycle that really changed. ``prev_bs`` is the last size of the previous
    window (its cycles are already written, so only this side is marked there). Returns (sizes,
    bits, last size).
    """
    bits = list(why)
    if exact is not None:
        sizes = list(exact)
        return sizes, bits, (sizes[-1] if sizes else prev_bs)
    sizes = []
    bs = prev_bs
    for i, n in enumerate(nreq):
        new = n if n else bs
        if new is not None and bs is not None and new != bs:
            b = BATCH | (JOIN if new > bs else LEAVE)
            bits[i] |= b
            if i:
                bits[i - 1] |= b
        bs = new
        sizes.append(bs)
    return sizes, bits, bs


def exact_sizes(tags: Sequence[Sequence[Any]]) -> list[int] | None:
    """The cycles' batch sizes when the forward side tagged every one (else None)."""
    if not tags or not all(len(t) > T_EXACT and t[T_EXACT] and isinstance(t[T_BS], int) for t in tags):
        return None
    return [t[T_BS] for t in tags]


def classify_window(why: Sequence[int], nreq: Sequence[int], nacc: Sequence[int],
                    tags: Sequence[Sequence[Any]], prev_bs: int | None, prev_steps: Any
                    ) -> tuple[list[int | None], list[int], list[int], list[int], int | None]:
    """One window's classification, as the profiler (and the scan stand-in) do it: (sizes, bits,
    requests and accepted drafts per cycle, last size).

    With exact sizes (the plugin's tags) the counts per cycle are the ones matched to the cycle
    that produced them (the tag's, see ``Profiler._match``), so a cycle's phases and its counts
    are the same cycle's even when the batch changes every cycle under the overlap scheduler; a
    cycle whose counts have not arrived yet (the window's last, read at once) adds its phases
    but no counts. Without them, the counts that arrived during each cycle, with both sides of a
    size change marked (``classify``). SWITCH marks the first cycle at a new state (steps, topk,
    draft tokens; ``prev_steps``: the last window's last state, switch_bits)."""
    ex = exact_sizes(tags)
    if ex is not None:
        nreq = [t[T_REQ] for t in tags]
        nacc = [t[T_ACC] for t in tags]
    sizes, bits, last = classify(why, nreq, prev_bs, ex)
    sw = switch_bits(tags, prev_steps)
    bits = [b | x for b, x in zip(bits, sw, strict=True)]
    return sizes, bits, list(nreq), list(nacc), last


def _group(per_cycle: Mapping[str, Sequence[float]], idx: Sequence[int]) -> dict[str, dict[str, float]]:
    return {name: phase_stats([per_cycle[name][i] for i in idx]) for name in ALL_PHASES}


def _rate(tokens: int, requests: int, cycle_mean: float, cycle_sum: float) -> tuple[float | None, ...]:
    al = tokens / requests if requests else None
    per_stream = round(al * 1000.0 / cycle_mean, 2) if (al and cycle_mean > 0) else None
    thr = round(tokens * 1000.0 / cycle_sum, 2) if (requests and cycle_sum > 0) else None
    return (round(al, 4) if al is not None else None), per_stream, thr


def split_record(per_cycle: Mapping[str, Sequence[float]], sizes: Sequence[int | None],
                 bits: Sequence[int], nreq: Sequence[int], nacc: Sequence[int],
                 joins: int = 0) -> dict[str, Any]:
    """The ``steady`` / ``boundary`` / ``by_batch`` fields of a window record.

    Steady = cycles with no boundary bit. Accept counts are summed per cycle they arrived in.
    ``joins``: non-decode forwards seen in the window (each admits one or more requests); the
    boundary cost per request divides by it (by the number of size increases when it is 0).
    """
    cyc = per_cycle[CYCLE]
    steady = [i for i, b in enumerate(bits) if not b]
    bound = [i for i, b in enumerate(bits) if b]
    req = sum(nreq[i] for i in steady)
    acc = sum(nacc[i] for i in steady)
    # steady cycles that are the first at a new batch size (exact sizes: such a cycle is a cycle
    # of the new key, not a boundary; counted so a reader sees how much of steady is churn)
    moved = sum(1 for i in steady if i and sizes[i] is not None and sizes[i - 1] is not None
                and sizes[i] != sizes[i - 1])
    st: dict[str, Any] = {"cycles": len(steady), "requests": req, "accepted_drafts": acc,
                          "tokens": acc + req, "accept_len": None, "phases": None, "eff_tok_s": None,
                          "at_batch_change": moved}
    ref: dict[str, float] | None = None
    if steady:
        st["phases"] = _group(per_cycle, steady)
        al, per_stream, _ = _rate(acc + req, req, st["phases"][CYCLE]["mean_ms"], 0.0)
        st["accept_len"], st["eff_tok_s"] = al, per_stream
        ref = {name: st["phases"][name]["p50_ms"] for name in ALL_PHASES}
    reasons = {name: sum(1 for i in bound if bits[i] & bit) for name, bit in REASONS.items()}
    ups = sum(1 for i in range(1, len(sizes)) if sizes[i] is not None and sizes[i - 1] is not None
              and sizes[i] > sizes[i - 1])  # type: ignore[operator]
    events = joins or ups
    bd: dict[str, Any] = {"cycles": len(bound), "reasons": reasons,
                          "phases": _group(per_cycle, bound) if bound else None,
                          "extra_ms": None, "extra_by_phase": None, "joins": events,
                          "extra_ms_per_join": None}
    if ref is not None:
        bd["extra_ms"] = round(sum(max(0.0, cyc[i] - ref[CYCLE]) for i in bound), 4)
        bd["extra_by_phase"] = {name: round(sum(max(0.0, per_cycle[name][i] - ref[name]) for i in bound), 4)
                                for name in PHASES}
        if events:
            bd["extra_ms_per_join"] = round(bd["extra_ms"] / events, 4)
    by: dict[str, Any] = {}
    for size in sorted({sizes[i] for i in steady if sizes[i] is not None}):  # type: ignore[type-var]
        idx = [i for i in steady if sizes[i] == size]
        r = sum(nreq[i] for i in idx)
        t = r + sum(nacc[i] for i in idx)
        ph = _group(per_cycle, idx)
        al, per_stream, thr = _rate(t, r, ph[CYCLE]["mean_ms"], sum(cyc[i] for i in idx))
        by[str(size)] = {"cycles": len(idx), "requests": r, "tokens": t, "accept_len": al, "phases": ph,
                         "per_stream_tok_s": per_stream, "throughput_tok_s": thr}
    return {"steady": st, "boundary": bd, "by_batch": by}


def build_record(
    *,
    window: int,
    per_cycle: Mapping[str, Sequence[float]],
    hist: Mapping[int, int],
    mode: str,
    spec: Mapping[str, Any],
    route: str | None,
    sglang_version: str | None,
    rank: int,
    tp_size: int,
    idle_cycles: int = 0,
    host_cycle_ms: Sequence[float] | None = None,
    notes: Sequence[str] = (),
    split: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One JSONL record. ``per_cycle[phase]`` holds one ms value per cycle (0 when absent)."""
    cycles = len(per_cycle[CYCLE])
    requests = sum(hist.values())
    accepted = sum(n * c for n, c in hist.items())
    phases = {name: phase_stats(per_cycle[name]) for name in ALL_PHASES}
    cycle_ms = phases[CYCLE]["mean_ms"]
    accept_len = accepted / requests + 1.0 if requests else None
    steps = spec.get("steps")
    notes = list(notes)
    if steps is None and hist:
        steps = max(hist)
        notes.append(f"speculative steps unknown: per_position assumes steps = {steps} (longest accepted run)")
    rec: dict[str, Any] = {
        "schema": SCHEMA,
        "window": window,
        "cycles": cycles,
        "requests": requests,
        "accepted_drafts": accepted,
        "tokens": accepted + requests,
        "accept_len": round(accept_len, 4) if accept_len is not None else None,
        "accept_len_def": "tokens per request per verify, incl. the bonus token",
        "accept_hist": {str(n): hist[n] for n in sorted(hist)},
        "per_position": per_position_rates(hist, steps) if (steps and hist) else [],
        "per_position_def": "conditional: P(accept position i | accepted 1..i-1)",
        "phases": phases,
        "eff_tok_s": round(accept_len * 1000.0 / cycle_ms, 2) if (accept_len and cycle_ms > 0) else None,
        "throughput_tok_s": round((accepted + requests) * 1000.0 / sum(per_cycle[CYCLE]), 2)
        if (requests and sum(per_cycle[CYCLE]) > 0) else None,
        "mode": mode,
        "route": route,
        "sglang_version": sglang_version,
        "spec": {k: spec.get(k) for k in ("steps", "topk", "draft_tokens")},
        "rank": rank,
        "tp_size": tp_size,
        "idle_cycles": idle_cycles,
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if split is not None:
        rec.update(split)
    if host_cycle_ms:
        rec["host_cycle_ms"] = phase_stats(host_cycle_ms)
    if notes:
        rec["notes"] = notes
    return rec


def _fmt_opt(v: Any) -> str:
    return "?" if v is None else str(v)


def format_block(rec: Mapping[str, Any]) -> str:
    """The seeds' EAGLE3_PROF block, with the mode and the accept-length definition added."""
    ph = rec["phases"]
    total = ph[CYCLE]["mean_ms"]
    head = (
        f"EAGLE3_PROF ({rec['cycles']} cycles, {rec['tokens']} tok incl. bonus, "
        f"{rec['requests']} verifies) window {rec['window']}, mode {rec['mode']}, rank {rec['rank']}"
    )
    lines = [head]
    for name in PHASES:
        ms = ph[name]["mean_ms"]
        pct = 100.0 * ms / total if total > 0 else 0.0
        lines.append(f"  {LABELS[name] + ':':<17}{ms:>7.2f} ms/cyc  ({pct:5.1f}%)")
    lines.append(f"  {'TOTAL:':<17}{total:>7.2f} ms/cyc")
    al = rec.get("accept_len")
    lines.append(f"  Accept len:      {'n/a' if al is None else f'{al:.2f}'} (incl. bonus)")
    tps = rec.get("eff_tok_s")
    lines.append(f"  Eff tok/s:       {'n/a' if tps is None else f'{tps:.1f}'}")
    pos = rec.get("per_position") or []
    if pos:
        lines.append("  Accept by pos:   " + " ".join("n/a" if r is None else f"{r:.3f}" for r in pos)
                     + " (conditional)")
    lines.append(f"  Timing mode:     {rec['mode']}")
    sp = rec.get("spec") or {}
    lines.append(
        f"  Config:          steps {_fmt_opt(sp.get('steps'))}, topk {_fmt_opt(sp.get('topk'))}, "
        f"draft tokens {_fmt_opt(sp.get('draft_tokens'))}; SGLang {_fmt_opt(rec.get('sglang_version'))}; "
        f"route {_fmt_opt(rec.get('route'))}"
    )
    lines.extend(_split_lines(rec))
    lines.extend(_control_lines(rec))
    return "\n".join(lines)


def _control_lines(rec: Mapping[str, Any]) -> list[str]:
    """/3: one line saying which step counts ran at which batch size, when more than one ran or a
    decider held them (the phase table above mixes them; `profile` splits them per key)."""
    ctl = rec.get("control")
    if not ctl:
        return []
    ch = ctl.get("choices") or {}
    if not ctl.get("decider") and all(len(v) <= 1 for v in ch.values()):
        return []
    ran = "; ".join(f"bs {bs}: " + ", ".join(f"{k} x{n}" for k, n in v.items()) for bs, v in ch.items())
    who = f" ({ctl['decider']} decider, block {_fmt_opt(ctl.get('block'))})" if ctl.get("decider") else ""
    return [f"  Steps ran:       {ran}{who}"]


def _split_lines(rec: Mapping[str, Any]) -> list[str]:
    """The steady / boundary lines (v2 records): the table above is all cycles of the window."""
    st, bd = rec.get("steady"), rec.get("boundary")
    if not st or not bd:
        return []
    why = ", ".join(f"{k} {v}" for k, v in bd["reasons"].items() if v) or "none"
    lines = [f"  Cycles:          {rec['cycles']} = {st['cycles']} steady + {bd['cycles']} boundary ({why})"]
    if st["phases"]:
        ph = st["phases"]
        al = st["accept_len"]
        tps = st["eff_tok_s"]
        lines.append(
            f"  Steady:          {ph[CYCLE]['mean_ms']:.2f} ms/cyc (p50 {ph[CYCLE]['p50_ms']:.2f}; draft "
            f"{ph['draft']['mean_ms']:.2f}, verify {ph['verify']['mean_ms']:.2f}, extend "
            f"{ph['extend']['mean_ms']:.2f}, other {ph['other']['mean_ms']:.2f}), accept len "
            f"{'n/a' if al is None else f'{al:.2f}'}, eff tok/s {'n/a' if tps is None else f'{tps:.1f}'}"
        )
    else:
        lines.append("  Steady:          none (every cycle of this window is next to a boundary)")
    if bd["extra_ms"] is not None:
        per = bd.get("extra_ms_per_join")
        lines.append(f"  Boundary cost:   +{bd['extra_ms']:.2f} ms over steady p50, {bd.get('joins') or 0} joins"
                     + ("" if per is None else f", {per:.2f} ms/join"))
    return lines


# ------------------------------------------------------------------------------------------------
# eagle3_prof/3: every cycle tagged with the configuration that ran it (window.T_* fields)

def _opt(v: Any) -> str:
    return "?" if v is None else str(v)


def key_of(tag: Sequence[Any]) -> str:
    """``s{steps}.k{topk}.d{draft_tokens}.b{bs}.{g|e|u}`` (? = unknown)."""
    g = tag[T_GRAPH]
    return (f"s{_opt(tag[T_STEPS])}.k{_opt(tag[T_TOPK])}.d{_opt(tag[T_DT])}.b{_opt(tag[T_BS])}."
            f"{'u' if g is None else ('g' if g else 'e')}")


def switch_bits(tags: Sequence[Sequence[Any]], prev_steps: Any) -> list[int]:
    """SWITCH on the first cycle at a new state (the switch itself runs at its start). A state is
    (steps, topk, draft tokens): chain 5 -> tree 5x4x21 is a switch, though the steps stay.
    ``prev_steps``: the previous window's last state (that tuple), or its step count (steps only)."""
    out = []
    prev = prev_steps
    for t in tags:
        s = t[T_STEPS]
        if s is None:
            out.append(0)
            continue
        cur = (s, t[T_TOPK], t[T_DT])
        changed = prev is not None and (cur != tuple(prev) if isinstance(prev, (tuple, list)) else s != prev)
        out.append(SWITCH if changed else 0)
        prev = cur
    return out


def key_cycles(bits: Sequence[int], tags: Sequence[Sequence[Any]]) -> dict[str, list[int]]:
    """Per configuration key: [every cycle tagged with it, its steady cycles with matched counts]
    (the ones ``by_key`` is made of). Every key that ran is here, also one with no steady cycle:
    its steady share is what says how far its figures can be trusted."""
    out: dict[str, list[int]] = {}
    for i, t in enumerate(tags):
        c = out.setdefault(key_of(t), [0, 0])
        c[0] += 1
        if not bits[i] and t[T_REQ]:
            c[1] += 1
    return dict(sorted(out.items()))


def by_key(per_cycle: Mapping[str, Sequence[float]], bits: Sequence[int],
           tags: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """Per configuration key: the steady cycles whose accept counts arrived (matched to the cycle
    that produced them), with ``parts`` per hold block so readers can merge windows, and
    ``all_cycles``: every cycle of the key in the window, steady or not."""
    every = key_cycles(bits, tags)
    cyc = per_cycle[CYCLE]
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(tags):
        if not bits[i] and t[T_REQ]:
            groups.setdefault(key_of(t), []).append(i)
    out: dict[str, Any] = {}
    for key in sorted(groups):
        idx = groups[key]
        t0 = tags[idx[0]]
        hist: dict[int, int] = {}
        for i in idx:
            for n in tags[i][T_LIST] or ():
                hist[n] = hist.get(n, 0) + 1
        req = sum(tags[i][T_REQ] for i in idx)
        acc = sum(tags[i][T_ACC] for i in idx)
        ph = _group(per_cycle, idx)
        al, per_stream, thr = _rate(acc + req, req, ph[CYCLE]["mean_ms"], sum(cyc[i] for i in idx))
        steps = t0[T_STEPS]
        if steps is None and hist:
            steps = max(hist)
        parts: dict[int, list[Any]] = {}
        for i in idx:
            b = tags[i][T_BLOCK]
            p = parts.setdefault(b, [b, 0, 0.0, 0, 0])
            p[1] += 1
            p[2] += cyc[i]
            p[3] += tags[i][T_REQ] + tags[i][T_ACC]
            p[4] += tags[i][T_REQ]
        out[key] = {
            "steps": t0[T_STEPS], "topk": t0[T_TOPK], "draft_tokens": t0[T_DT], "bs": t0[T_BS],
            "graph": t0[T_GRAPH], "cycles": len(idx), "all_cycles": every[key][0], "requests": req,
            "accepted_drafts": acc,
            "tokens": acc + req, "accept_len": al, "accept_hist": {str(n): hist[n] for n in sorted(hist)},
            "per_position": per_position_rates(hist, steps) if (steps and hist) else [],
            "phases": ph, "per_stream_tok_s": per_stream, "throughput_tok_s": thr,
            "parts": [[p[0], p[1], round(p[2], 4), p[3], p[4]] for _, p in sorted(parts.items())],
        }
    return out


def choices(tags: Sequence[Sequence[Any]]) -> dict[str, dict[str, int]]:
    """Decode cycles per batch size per step count in this window (every cycle, steady or not):
    what SGLang's own adaptive mode, or a decider, ran where."""
    out: dict[str, dict[str, int]] = {}
    for t in tags:
        by = out.setdefault(_opt(t[T_BS]), {})
        topk = t[T_TOPK]  # a tree is its label STEPSxTOPKxTOKENS, never its step count (specstate.py)
        k = f"{t[T_STEPS]}x{topk}x{_opt(t[T_DT])}" if isinstance(topk, int) and topk > 1 else _opt(t[T_STEPS])
        by[k] = by.get(k, 0) + 1
    return {bs: dict(sorted(v.items())) for bs, v in sorted(out.items(), key=lambda kv: (len(kv[0]), kv[0]))}
