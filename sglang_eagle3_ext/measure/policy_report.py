"""What the throughput policy chose, over the windows of a profile (workbench side).

Input: the ``control.policy`` part of eagle3_prof/3 records (policy.PolicyDecider.window_control:
per batch size and step count the cycles it chose, the exploration cycles among them, and the mean
per-stream tok/s it expected of them) and the records' ``by_key`` steady-cycle figures (what
those cycles delivered). ``merge`` sums the windows; ``rows`` puts expected next to realised per
(batch size, steps); ``table`` renders them for ``profile``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def merge(controls: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Sum the ``policy`` parts of the windows' ``control``; None when no window has one."""
    cycles: dict[str, dict[str, int]] = {}
    explore: dict[str, dict[str, int]] = {}
    exp_sum: dict[str, dict[str, float]] = {}
    switches, last = 0, None
    for c in controls:
        p = c.get("policy") if isinstance(c, Mapping) else None
        if not isinstance(p, Mapping):
            continue
        last = p
        switches += int(p.get("switches") or 0)
        chosen = p.get("chosen") or {}
        for bs, by in chosen.items():
            for s, n in by.items():
                row = cycles.setdefault(str(bs), {})
                row[str(s)] = row.get(str(s), 0) + int(n)
                e = (p.get("expected_per_stream_tok_s") or {}).get(bs, {}).get(s)
                if e is not None:
                    er = exp_sum.setdefault(str(bs), {})
                    er[str(s)] = er.get(str(s), 0.0) + float(e) * int(n)
        for bs, by in (p.get("explore") or {}).items():
            for s, n in by.items():
                row = explore.setdefault(str(bs), {})
                row[str(s)] = row.get(str(s), 0) + int(n)
    if last is None:
        return None
    expected = {bs: {s: round(v / cycles[bs][s], 2) for s, v in by.items() if cycles[bs].get(s)}
                for bs, by in exp_sum.items()}
    return {"cycles": _sorted(cycles), "explore": _sorted(explore), "expected_per_stream_tok_s": _sorted(expected),
            "switches": switches, "rates": last.get("rates"), "tiers": last.get("tiers"),
            "source": last.get("source")}


def _sorted(d: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    def num(k: str) -> tuple[int, str]:
        return (int(k), k) if k.lstrip("-").isdigit() else (1 << 30, k)
    return {bs: dict(sorted(v.items(), key=lambda kv: num(kv[0]))) for bs, v in sorted(d.items(), key=lambda kv: num(kv[0]))}


def _state(s: Any) -> int | str:
    """A chosen state's key as the records write it: "5" -> 5 (a chain), "5x4x21" stays (a tree)."""
    return int(s) if str(s).isdigit() else str(s)


def realised(by_key: Mapping[str, Mapping[str, Any]]) -> dict[tuple[int, int | str], dict[str, Any]]:
    """(bs, state) -> steady cycles and per-stream tok/s, summed over the keys of that pair
    (graph and eager cycles of one pair merge, cycle-weighted); a tree's key is its label."""
    out: dict[tuple[int, int | str], dict[str, Any]] = {}
    for k in by_key.values():
        bs, steps, n, v = k.get("bs"), k.get("steps"), int(k.get("cycles") or 0), k.get("per_stream_tok_s")
        if bs is None or steps is None or not n or v is None:
            continue
        topk = k.get("topk") or 1
        state: int | str = int(steps) if topk <= 1 else f"{steps}x{topk}x{k.get('draft_tokens')}"
        e = out.setdefault((int(bs), state), {"cycles": 0, "sum": 0.0})
        e["cycles"] += n
        e["sum"] += float(v) * n
    return {key: {"cycles": e["cycles"], "per_stream_tok_s": round(e["sum"] / e["cycles"], 2)}
            for key, e in out.items()}


def rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per (batch size, steps) the policy chose, expected next to realised."""
    pol = (summary.get("control") or {}).get("policy")
    if not pol:
        return []
    real = realised(summary.get("by_key") or {})
    out = []
    for bs, by in pol["cycles"].items():
        total = sum(by.values()) or 1
        for s, n in by.items():
            exp = (pol["expected_per_stream_tok_s"].get(bs) or {}).get(s)
            r = real.get((int(bs), _state(s)))
            rv = r["per_stream_tok_s"] if r else None
            out.append({"bs": int(bs), "steps": _state(s), "cycles": n, "share": round(n / total, 4),
                        "explore": int((pol["explore"].get(bs) or {}).get(s, 0)), "expected_per_stream_tok_s": exp,
                        "realised_per_stream_tok_s": rv, "realised_cycles": r["cycles"] if r else 0,
                        "realised_vs_expected_pct": round((rv / exp - 1) * 100, 1) if (rv and exp) else None})
    return out


# Below this cycle-weighted realised-vs-expected gap the scan's cycle costs are not this traffic's
# (round 11: -15 to -39 % on both H200 shapes under open-loop churn; within +-5 % on closed-loop
# traffic like the scan's own, rounds 7-8).
CALIBRATE_BELOW_PCT = -10.0


def calibration_hint(summary: Mapping[str, Any]) -> str | None:
    """A note when the policy's cycles delivered clearly less than its table promised: the scan's
    costs are too low for this traffic, and `calibrate` moves them by this very file's probes."""
    rs = [r for r in rows(summary) if r["realised_vs_expected_pct"] is not None and r["realised_cycles"]]
    n = sum(r["realised_cycles"] for r in rs)
    if n < 100:
        return None
    gap = sum(r["realised_vs_expected_pct"] * r["realised_cycles"] for r in rs) / n
    if gap > CALIBRATE_BELOW_PCT:
        return None
    src = (summary.get("control") or {}).get("policy", {}).get("source") or "SCAN"
    return (f"policy: its cycles delivered {-gap:.1f} % less per stream than its table expected (cycle-weighted "
            f"over {n} steady cycles): the scan's cycle costs are below this traffic's (longer contexts cost every cycle "
            f"more); `sgl-eagle3 calibrate {src} {summary.get('file', 'PROF.jsonl')} --out FILE` moves them "
            "(docs/guide/adaptive.md)")
