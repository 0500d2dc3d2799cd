"""Turn one window of resolved cycle timings and accept counts into a record and a text block.

Pure functions over plain numbers: no timers, no torch. The record is schema ``eagle3_prof/1``
(docs/architecture.md); the block is the seeds' EAGLE3_PROF layout plus the timing mode and
"(incl. bonus)" on the accept length.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

SCHEMA = "eagle3_prof/1"
PHASES = ("draft", "verify", "extend", "other")
CYCLE = "cycle"
LABELS = {
    "draft": "Draft steps",
    "verify": "Target verify",
    "extend": "Draft re-extend",
    "other": "Other overhead",
}


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
) -> dict[str, Any]:
    """One JSONL record. ``per_cycle[phase]`` holds one ms value per cycle (0 when absent)."""
    cycles = len(per_cycle[CYCLE])
    requests = sum(hist.values())
    accepted = sum(n * c for n, c in hist.items())
    phases = {name: phase_stats(per_cycle[name]) for name in (*PHASES, CYCLE)}
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
    return "\n".join(lines)
