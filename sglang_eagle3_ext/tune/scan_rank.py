"""A ranking that is decided: per batch size, is the scan's best state separated from the runner-up?

Every scan cell (one state at one batch size) carries a 95 % interval of its per-stream tok/s over
its hold blocks (scan_cells.cell). Per tier the best and the runner-up are compared:

- **decided**: the best's interval lies wholly above the runner-up's (non-overlapping 95 %
  intervals), or the tier has one state only;
- **tie at the precision**: both intervals are narrower than +-``precision`` % of their figure and
  still overlap: measuring longer would separate a difference too small to matter; not decided,
  and said so;
- **not decided**: otherwise (the scan keeps measuring until one of the above or its time limit).

Chains and trees are states alike: chain ``5`` and tree ``5x4x21`` are ranked against each other
(state labels, runtime/specstate.py). Beside the ranking, one verdict line per tier: the best tree
against the best chain ("tree 5x4x21 +16 % over chain 5 at batch 1").
"""

from __future__ import annotations

from typing import Any

from .scan_cells import state_key

DEFAULT_PRECISION_PCT = 2.0


def _rate(c: dict[str, Any]) -> float | None:
    from ..documents.scan_doc import cell_rate

    return cell_rate(c)


def _iv(c: dict[str, Any]) -> list[float] | None:
    iv = (c.get("interval") or {}).get("per_stream_tok_s")
    return list(iv) if iv else None


def _fig(c: dict[str, Any]) -> str:
    iv = _iv(c)
    r = _rate(c) or 0.0
    return f"{state_key(c)} ({r:.1f}" + (f" [{iv[0]:.1f}, {iv[1]:.1f}])" if iv else ", no interval)")


def _half_pct(c: dict[str, Any]) -> float | None:
    iv, r = _iv(c), _rate(c)
    if not iv or not r:
        return None
    return (iv[1] - iv[0]) / 2.0 / r * 100.0


def rank_tier(cells: list[dict[str, Any]], precision_pct: float = DEFAULT_PRECISION_PCT) -> dict[str, Any] | None:
    """One batch size's cells -> {best, runner_up, decided, tie, line}; None without a rated cell."""
    rated = sorted((c for c in cells if _rate(c)), key=lambda c: (-(_rate(c) or 0.0), c["steps"], str(state_key(c))))
    if not rated:
        return None
    best = rated[0]
    out: dict[str, Any] = {"best": str(state_key(best)), "best_tok_s": round(_rate(best) or 0.0, 2),
                           "best_interval": _iv(best), "runner_up": None, "runner_up_tok_s": None,
                           "runner_up_interval": None, "decided": True, "tie": False}
    if len(rated) == 1:
        out["line"] = f"decided: {_fig(best)} (the only state measured here)"
        return out
    ru = rated[1]
    out.update(runner_up=str(state_key(ru)), runner_up_tok_s=round(_rate(ru) or 0.0, 2), runner_up_interval=_iv(ru))
    bi, ri = _iv(best), _iv(ru)
    if bi and ri and bi[0] > ri[1]:
        out["line"] = f"decided: {_fig(best)} over {_fig(ru)}"
        return out
    out["decided"] = False
    hb, hr = _half_pct(best), _half_pct(ru)
    if hb is not None and hr is not None and max(hb, hr) <= precision_pct:
        out["tie"] = True
        out["line"] = (f"not decided: {_fig(best)} vs {_fig(ru)}: a tie at the precision (both within "
                       f"+-{precision_pct:g} %)")
    else:
        why = "" if (bi and ri) else " (a state has fewer than 2 hold blocks: no interval)"
        out["line"] = f"not decided: {_fig(best)} vs {_fig(ru)}{why}"
    return out


def settled(r: dict[str, Any] | None) -> bool:
    """Measuring longer would not change what the scan can say: decided, or a tie at the precision."""
    return r is None or bool(r["decided"] or r["tie"])


def ranking(cells: list[dict[str, Any]], precision_pct: float = DEFAULT_PRECISION_PCT) -> dict[str, dict[str, Any]]:
    """{batch size: rank_tier} over the main cells given."""
    by: dict[int, list[dict[str, Any]]] = {}
    for c in cells:
        by.setdefault(int(c["bs"]), []).append(c)
    out = {}
    for bs, cs in sorted(by.items()):
        r = rank_tier(cs, precision_pct)
        if r is not None:
            out[str(bs)] = r
    return out


def verdict_lines(cells: list[dict[str, Any]]) -> list[str]:
    """Per batch size with a chain and a tree: the best tree against the best chain, in words
    (tune/treeverdict.py's sweep wording: which wins, by how much)."""
    by: dict[int, list[dict[str, Any]]] = {}
    for c in cells:
        if _rate(c):
            by.setdefault(int(c["bs"]), []).append(c)
    lines = []
    for bs, cs in sorted(by.items()):
        chains = [c for c in cs if not isinstance(state_key(c), str)]
        trees = [c for c in cs if isinstance(state_key(c), str)]
        if not chains or not trees:
            continue
        c = max(chains, key=lambda x: (_rate(x) or 0.0, -x["steps"]))
        t = max(trees, key=lambda x: (_rate(x) or 0.0, -x["steps"]))
        rc, rt = _rate(c) or 0.0, _rate(t) or 0.0
        if rt > rc:
            gain, win, lose = rt / rc - 1.0, f"tree {state_key(t)}", f"chain {state_key(c)}"
        else:
            gain, win, lose = rc / rt - 1.0, f"chain {state_key(c)}", f"tree {state_key(t)}"
        tie = " (within 1 %: a tie)" if gain < 0.01 else ""
        lines.append(f"{win} {gain * 100:+.0f} % over {lose} at batch {bs} ({max(rt, rc):.1f} vs "
                     f"{min(rt, rc):.1f} tok/s per stream){tie}")
    return lines


def undecided_runner_ups(rank: dict[str, dict[str, Any]]) -> dict[int, int | str]:
    """{batch size: runner-up key} of every tier whose order is not decided (ties included): the
    adaptive config keeps them beside the best."""
    out: dict[int, int | str] = {}
    for bs, r in rank.items():
        if not r["decided"] and r["runner_up"] is not None:
            k = r["runner_up"]
            out[int(bs)] = int(k) if k.isdigit() else k
    return out
