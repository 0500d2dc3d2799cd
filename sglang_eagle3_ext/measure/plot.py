"""PNG plots of a sweep: tok/s per config with the baseline line; stacked per-phase ms per config;
the concurrency ladder. The scan grid lives in plot_scan.py, open-loop latency in plot_serving.py.

matplotlib is optional and imported only when a plot is drawn (plot_base.py). Labels never sit
on the data: legends go outside the axes, bar annotations inside the bars.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..runtime.probes.window import LABELS, PHASES
from .plot_base import Target, figure, legend_below, legend_outside, pyplot, save

PHASE_LABELS = {p: LABELS[p].lower() for p in PHASES}  # legend: the block's labels, lower case
BASELINE_COLOR = "#9e9e9e"
SPEC_COLOR = "#1f77b4"


def _ok(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in doc.get("configs", []) if c.get("status") == "ok" and c.get("bench")]


def _names_axis(ax: Any, names: list[str]) -> None:
    ax.set_xticks(list(range(len(names))))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)


def plot_tok_s(doc: dict[str, Any], path: Target) -> Any:
    """Bars: decode tok/s avg per config (tick = peak); dashed line per no-spec baseline, named in
    the legend; the accept length written inside each bar (never where the peak tick is)."""
    ok = _ok(doc)
    if not ok:
        return None
    plt = pyplot()
    avg = [c["bench"]["summary"]["decode_tok_s"]["avg"] or 0 for c in ok]
    peak = [c["bench"]["summary"]["decode_tok_s"].get("peak") for c in ok]
    fig, ax = figure(plt, figsize=(min(24.0, max(6.5, 0.9 * len(ok) + 3.5)), 4.8))
    xs = list(range(len(ok)))
    ax.bar(xs, avg, color=[BASELINE_COLOR if c.get("baseline") else SPEC_COLOR for c in ok])
    px = [x for x, p in zip(xs, peak, strict=True) if p]
    ax.scatter(px, [p for p in peak if p], marker="_", s=300, color="black", label="peak", zorder=3)
    for i, c in enumerate(ok):
        al = c["bench"]["summary"].get("accept_length")
        if al and avg[i]:
            ax.annotate(f"AL\n{al:.2f}", (i, avg[i]), ha="center", va="top", fontsize=7, color="white",
                        xytext=(0, -4), textcoords="offset points")
    for c, v in zip(ok, avg, strict=True):
        if c.get("baseline"):
            ax.axhline(v, linestyle="--", color="#555555", linewidth=1, label=f"{c['name']}: {v:.1f}")
    _names_axis(ax, [c["name"] for c in ok])
    ax.set_ylabel("decode tok/s per stream\n(bar = avg, tick = peak)")
    ax.set_title(f"{doc.get('name', 'sweep')}: decode tok/s (AL = accept length incl. bonus)", fontsize=10)
    ax.set_ylim(0, max([*avg, *(p or 0 for p in peak)]) * 1.08 or 1)
    legend_outside(ax)
    return save(plt, fig, path)


def plot_phases(doc: dict[str, Any], path: Target) -> Any:
    """Stacked bars: mean ms per cycle of draft / verify / re-extend / other, from the probes."""
    rows = []
    for c in _ok(doc):
        ph = (c.get("profile") or {}).get("phases") or {}
        if any((ph.get(p) or {}).get("mean_ms") is not None for p in PHASES):
            rows.append((c, {p: (ph.get(p) or {}).get("mean_ms") or 0.0 for p in PHASES}))
    if not rows:
        return None
    plt = pyplot()
    fig, ax = figure(plt, figsize=(min(24.0, max(6.5, 0.9 * len(rows) + 3.5)), 4.8))
    xs = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for p, color in zip(PHASES, ("#ff7f0e", "#1f77b4", "#2ca02c", "#9e9e9e"), strict=True):
        vals = [r[1][p] for r in rows]
        ax.bar(xs, vals, bottom=bottom, label=PHASE_LABELS[p], color=color)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    mode = sorted({str((r[0].get("profile") or {}).get("mode")) for r in rows})
    _names_axis(ax, [r[0]["name"] for r in rows])
    ax.set_ylabel("ms per decode cycle")
    ax.set_title(f"{doc.get('name', 'sweep')}: cycle phases (timing mode {', '.join(mode)})", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()  # top of the stack first, as the bars read
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              fontsize=8, frameon=False)
    return save(plt, fig, path)


def plots(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    made = [plot_tok_s(doc, out / "tok_s.png"), plot_phases(doc, out / "phases.png")]
    return [p for p in made if p is not None]


def _level_n(lv: dict[str, Any]) -> Any:
    return lv.get("concurrency", (lv.get("summary") or {}).get("concurrency"))


def plot_ladders(docs: list[dict[str, Any]], path: Target, title: str | None = None) -> Any:
    """Two panels against concurrency (log2 axis): per-stream decode tok/s and total tok/s; the
    baseline ladder (a no-spec config) grey and dashed; one legend below both panels."""
    plt = pyplot()
    fig, (a1, a2) = figure(plt, 1, 2, figsize=(11, 4.8))
    levels: set[int] = set()
    for d in docs:
        lv = sorted((x for x in d["levels"] if _level_n(x)), key=_level_n)
        xs = [_level_n(x) for x in lv]
        levels.update(xs)
        style = {"color": BASELINE_COLOR, "linestyle": "--"} if d.get("baseline") else {}
        for ax, key in ((a1, "per_stream_tok_s"), (a2, "throughput_tok_s")):
            ax.plot(xs, [x["summary"].get(key) for x in lv], marker="o", label=d.get("label"), **style)
    for ax, what in ((a1, "decode tok/s per stream"), (a2, "total tok/s (all streams)")):
        ax.set_xscale("log", base=2)
        if levels:
            ax.set_xticks(sorted(levels))
            ax.set_xticklabels([str(n) for n in sorted(levels)])
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    legend_below(fig, (a1, a2))
    fig.suptitle(title or "concurrency ladder")
    return save(plt, fig, path, mkdir=isinstance(path, (str, Path)))


def plot_serving(docs: list[dict[str, Any]], path: Target) -> Any:
    """Open-loop results: latency and goodput against the request rate (plot_serving.py)."""
    from .plot_serving import plot_serving as draw

    return draw(docs, path)


def bench_as_sweep(docs: list[dict[str, Any]], baseline: int) -> dict[str, Any]:
    """Bench documents as the configs of a sweep document (what plot_tok_s draws)."""
    return {"name": "bench results", "configs": [
        {"name": str(d.get("label") or f"file {i + 1}"), "status": "ok", "bench": d, "baseline": i == baseline}
        for i, d in enumerate(docs)]}


def plot_results(kind: str, docs: list[dict[str, Any]], path: Target, baseline: int = 0) -> Any:
    """`compare --plot`: open-loop results (latency and goodput against the rate), ladders (tok/s
    against concurrency) or bench results (tok/s bars, ``baseline`` the baseline's index)."""
    if kind == "serving":
        return plot_serving(docs, path)
    if kind == "ladder":
        return plot_ladders(docs, path)
    return plot_tok_s(bench_as_sweep(docs, baseline), path)
