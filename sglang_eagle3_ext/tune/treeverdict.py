"""Chain or tree, per load: the verdict of a sweep over topk x draft tokens x steps (docs/guide/sweep.md).

Trees cannot switch inside one server, so every (steps, topk, draft tokens) is its own config,
each benched over the concurrency ladder. Per concurrency level (= batch size) this compares the
fastest chain (topk 1) with the fastest tree (topk > 1) on the client's per-stream tok/s, and says
why with the probes' steady figures at that batch size when they exist:

    per-stream tok/s = accept length x 1000 / cycle ms
    tree / chain     = (accept ratio) / (cycle ratio)

so the gain (or loss) is exactly the accepted tokens the extra draft tokens buy, divided by what
the extra verify (and draft) work costs per cycle. Without probes the client's accept length is
used and the cycle ratio is derived from it (marked).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _levels(c: dict[str, Any]) -> list[dict[str, Any]]:
    lad = (c.get("ladder") or {}).get("levels")
    if lad:
        return lad
    b = c.get("bench") or {}
    s = b.get("summary") or {}
    if not s:
        return []
    return [{"concurrency": (b.get("params") or {}).get("concurrency", 1),
             "summary": {"per_stream_tok_s": (s.get("decode_tok_s") or {}).get("avg"),
                         "throughput_tok_s": (s.get("throughput_tok_s") or {}).get("avg"),
                         "accept_length": s.get("accept_length")}}]


def _probe(out_dir: Path | None, c: dict[str, Any]) -> dict[int, dict[str, Any]]:
    if out_dir is None:
        return {}
    from .tiers import by_batch, read_records

    return by_batch(read_records(Path(out_dir) / "configs" / c["slug"] / "prof.jsonl"))


def cells(doc: dict[str, Any], out_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """One row per (speculative config, concurrency level) the client measured."""
    rows = []
    for c in doc.get("configs", []):
        if c.get("status") != "ok" or c.get("baseline") or c.get("steps") is None:
            continue
        topk = int(c.get("topk") or 1)
        steps = int(c["steps"])
        dt = int(c.get("draft_tokens") or steps + 1)
        pb = _probe(Path(out_dir) if out_dir else None, c)
        for lv in _levels(c):
            s = lv.get("summary") or {}
            if s.get("per_stream_tok_s") is None:
                continue
            bs = int(lv["concurrency"])
            e = pb.get(bs) or {}
            ph = e.get("phases") or {}
            rows.append({"config": c["name"], "steps": steps, "topk": topk, "draft_tokens": dt,
                         "batch_size": bs, "per_stream_tok_s": float(s["per_stream_tok_s"]),
                         "accept_len": e.get("accept_len") or s.get("accept_length"),
                         "accept_source": "probes" if e.get("accept_len") else "client",
                         "cycle_ms": (ph.get("cycle") or {}).get("mean_ms"),
                         "verify_ms": (ph.get("verify") or {}).get("mean_ms"),
                         "draft_ms": (ph.get("draft") or {}).get("mean_ms")})
    return rows


def _label(r: dict[str, Any]) -> str:
    if r["topk"] == 1:
        return f"chain s{r['steps']}"
    return f"tree s{r['steps']} k{r['topk']} d{r['draft_tokens']}"


def verdict(doc: dict[str, Any], out_dir: str | Path | None = None) -> dict[str, Any] | None:
    """{"levels": [{batch_size, winner, chain, tree, gain_pct, accept_ratio, cycle_ratio, why}],
    "summary": str} or None when the sweep has no tree or no chain."""
    rows = cells(doc, out_dir)
    chains = [r for r in rows if r["topk"] == 1]
    treesr = [r for r in rows if r["topk"] > 1]
    if not chains or not treesr:
        return None
    out = []
    for bs in sorted({r["batch_size"] for r in rows}):
        c = max((r for r in chains if r["batch_size"] == bs), key=lambda r: r["per_stream_tok_s"], default=None)
        t = max((r for r in treesr if r["batch_size"] == bs), key=lambda r: r["per_stream_tok_s"], default=None)
        if c is None or t is None:
            continue
        gain = t["per_stream_tok_s"] / c["per_stream_tok_s"] - 1.0
        ar = (t["accept_len"] / c["accept_len"]) if t["accept_len"] and c["accept_len"] else None
        if t["cycle_ms"] and c["cycle_ms"]:
            cr, cyc_src = t["cycle_ms"] / c["cycle_ms"], "probes"
        elif ar is not None:  # per-stream = accept x 1000 / cycle: the cycle ratio it implies
            cr, cyc_src = ar / (1.0 + gain), "implied by the client's tok/s"
        else:
            cr, cyc_src = None, None
        winner = t if gain > 0 else c
        why = []
        if ar is not None:
            why.append(f"the tree accepts x{ar:.2f} tokens per verify ({t['accept_len']:.2f} vs "
                       f"{c['accept_len']:.2f}, {t['accept_source']})")
        if cr is not None:
            extra = t["draft_tokens"] - c["draft_tokens"]
            part = f"its cycle costs x{cr:.2f}"
            if t["verify_ms"] and c["verify_ms"]:
                part += (f" (verify {t['verify_ms']:.2f} vs {c['verify_ms']:.2f} ms for {extra:+d} "
                         f"draft tokens per request, {bs * extra:+d} in flight)")
            part += f" ({cyc_src})"
            why.append(part)
        out.append({"batch_size": bs, "winner": _label(winner), "chain": _label(c), "tree": _label(t),
                    "chain_tok_s": round(c["per_stream_tok_s"], 2),
                    "tree_tok_s": round(t["per_stream_tok_s"], 2),
                    "gain_pct": round(100 * gain, 2),
                    "accept_ratio": round(ar, 4) if ar is not None else None,
                    "cycle_ratio": round(cr, 4) if cr is not None else None,
                    "why": "; ".join(why)})
    if not out:
        return None
    tree_wins = [v["batch_size"] for v in out if v["gain_pct"] > 0]
    if not tree_wins:
        summary = "chains win at every load measured"
    elif len(tree_wins) == len(out):
        summary = "trees win at every load measured"
    else:
        summary = ("trees win at " + ", ".join(map(str, tree_wins)) + " streams, chains at "
                   + ", ".join(str(v["batch_size"]) for v in out if v["gain_pct"] <= 0)
                   + " (the crossover)")
    return {"levels": out, "summary": summary}


def lines(v: dict[str, Any]) -> list[str]:
    """The text `sweep --report` prints."""
    out = ["Chain or tree, per batch size (fastest chain vs fastest tree, client per-stream tok/s):"]
    for r in v["levels"]:
        loser = r["chain"] if r["winner"] == r["tree"] else r["tree"]
        sign = "+" if r["gain_pct"] > 0 else ""
        tie = " (within 1 %: a tie)" if abs(r["gain_pct"]) < 1.0 else ""
        out.append(f"  {r['batch_size']:>3} streams: {r['winner']} wins over {loser} "
                   f"(tree {r['tree_tok_s']:.1f} vs chain {r['chain_tok_s']:.1f} tok/s, tree {sign}{r['gain_pct']:.1f} %{tie})"
                   + (f": {r['why']}" if r["why"] else ""))
    out.append(f"  -> {v['summary']}")
    return out
