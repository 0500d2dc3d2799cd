"""PNG plots of a sweep: tok/s per config with the baseline line; stacked per-phase ms per config.

matplotlib is an optional dependency (``pip install 'sglang-eagle3-ext[plot]'``), imported only here
and only when a plot is drawn, with the Agg backend (no display needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from ..runtime.probes.window import LABELS, PHASES

PHASE_LABELS = {p: LABELS[p].lower() for p in PHASES}  # legend: the block's labels, lower case


def _plt() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise UserError("plots need matplotlib: pip install 'sglang-eagle3-ext[plot]' "
                        "(results and tables are written without it)") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: str | Path, mkdir: bool = False) -> Path:
    fig.tight_layout()
    p = Path(path)
    if mkdir:
        p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p


def _panels(axes: Any, xlabel: str, ylabels: tuple[str, ...], legend_size: int) -> None:
    for ax, what in zip(axes, ylabels, strict=True):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(what)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=legend_size)


def _ok(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in doc.get("configs", []) if c.get("status") == "ok" and c.get("bench")]


def plot_tok_s(doc: dict[str, Any], path: str | Path) -> Path | None:
    """Bars: decode tok/s avg per config (tick = peak); dashed line per no-spec baseline."""
    ok = _ok(doc)
    if not ok:
        return None
    plt = _plt()
    names = [c["name"] for c in ok]
    avg = [c["bench"]["summary"]["decode_tok_s"]["avg"] or 0 for c in ok]
    peak = [c["bench"]["summary"]["decode_tok_s"]["peak"] or 0 for c in ok]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(ok) + 2), 4.5))
    colors = ["#9e9e9e" if c["baseline"] else "#1f77b4" for c in ok]
    xs = range(len(ok))
    ax.bar(xs, avg, color=colors)
    ax.scatter(xs, peak, marker="_", s=300, color="black", label="peak", zorder=3)
    for i, c in enumerate(ok):
        al = c["bench"]["summary"].get("accept_length")
        if al:
            ax.annotate(f"AL {al:.2f}", (i, avg[i]), ha="center", va="bottom", fontsize=7,
                        xytext=(0, 2), textcoords="offset points")
    for c, v in zip(ok, avg, strict=True):
        if c["baseline"]:
            ax.axhline(v, linestyle="--", color="#555555", linewidth=1)
            ax.annotate(f"{c['name']} {v:.1f}", (len(ok) - 0.5, v), ha="right", va="bottom", fontsize=7)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("decode tok/s per stream (avg; tick = peak)")
    ax.set_title(f"{doc.get('name', 'sweep')}: decode tok/s (AL = accept length incl. bonus)")
    ax.legend(loc="lower right", fontsize=8)
    return _save(plt, fig, path)


def plot_phases(doc: dict[str, Any], path: str | Path) -> Path | None:
    """Stacked bars: mean ms per cycle of draft / verify / re-extend / other, from the probes."""
    rows = []
    for c in _ok(doc):
        ph = (c.get("profile") or {}).get("phases") or {}
        if any((ph.get(p) or {}).get("mean_ms") is not None for p in PHASES):
            rows.append((c, {p: (ph.get(p) or {}).get("mean_ms") or 0.0 for p in PHASES}))
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) + 2), 4.5))
    xs = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for p, color in zip(PHASES, ("#ff7f0e", "#1f77b4", "#2ca02c", "#9e9e9e"), strict=True):
        vals = [r[1][p] for r in rows]
        ax.bar(xs, vals, bottom=bottom, label=PHASE_LABELS[p], color=color)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    mode = sorted({str((r[0].get("profile") or {}).get("mode")) for r in rows})
    ax.set_xticks(xs)
    ax.set_xticklabels([r[0]["name"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms per decode cycle")
    ax.set_title(f"{doc.get('name', 'sweep')}: cycle phases (timing mode {', '.join(mode)})")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def plots(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    made = [plot_tok_s(doc, out / "tok_s.png"), plot_phases(doc, out / "phases.png")]
    return [p for p in made if p is not None]


def plot_ladders(docs: list[dict[str, Any]], path: str | Path) -> Path:
    """Two panels against concurrency (log2 axis): per-stream decode tok/s and total tok/s."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for d in docs:
        lv = [x["summary"] for x in d["levels"]]
        xs = [s["concurrency"] for s in lv]
        a1.plot(xs, [s["per_stream_tok_s"] for s in lv], marker="o", label=d.get("label"))
        a2.plot(xs, [s["throughput_tok_s"] for s in lv], marker="o", label=d.get("label"))
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
    _panels((a1, a2), "concurrency (requests in flight)",
            ("decode tok/s per stream", "total tok/s (all streams)"), 8)
    fig.suptitle("concurrency ladder")
    return _save(plt, fig, path, mkdir=True)


def plot_serving(docs: list[dict[str, Any]], path: str | Path) -> Path:
    """Open-loop results: TTFT, ITL and E2E latency (p50 solid, p99 dashed) against the request
    throughput reached, one line per file; rate ``inf`` at its own throughput."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for d in docs:
        ss = sorted((e["summary"] for e in d["rates"] if e["summary"].get("completed")),
                    key=lambda s: s["request_throughput"])
        xs = [s["request_throughput"] for s in ss]
        for ax, key in zip(axes, ("ttft_ms", "itl_ms", "e2e_latency_ms"), strict=True):
            line = ax.plot(xs, [(s[key] or {}).get("p50") for s in ss], marker="o",
                           label=f"{d.get('label')} p50")[0]
            ax.plot(xs, [(s[key] or {}).get("p99") for s in ss], marker="x", linestyle="--",
                    color=line.get_color(), label=f"{d.get('label')} p99")
    _panels(axes, "request throughput (req/s)",
            ("TTFT ms", "ITL ms (per token)", "end-to-end latency ms"), 7)
    fig.suptitle("open loop: latency against load")
    return _save(plt, fig, path, mkdir=True)
