"""PNG plots of a sweep: tok/s per config with the baseline line; stacked per-phase ms per config;
the concurrency ladder. The scan grid lives in plot_scan.py, open-loop latency in plot_serving.py.

matplotlib is an optional dependency (``pip install 'sglang-eagle3-ext[plot]'``), imported only here
and only when a plot is drawn, with the Agg backend (no display needed). Every plot writes to a
path or to a binary file object (the report inlines the bytes). Labels never sit on the data:
legends go outside the axes, bar annotations inside the bars.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from ..runtime.errors import UserError
from ..runtime.probes.window import LABELS, PHASES

PHASE_LABELS = {p: LABELS[p].lower() for p in PHASES}  # legend: the block's labels, lower case
BASELINE_COLOR = "#9e9e9e"
SPEC_COLOR = "#1f77b4"
Target = str | Path | IO[bytes]


def missing_reason() -> str | None:
    """Why no plot can be drawn here (one line), or None when matplotlib imports."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed: pip install 'sglang-eagle3-ext[plot]'"
    return None


def _plt() -> Any:
    why = missing_reason()
    if why:
        raise UserError(f"plots need matplotlib ({why}); results and tables are written without it")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(plt: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    """plt.subplots with the constrained layout: it makes room for outside legends and tick labels."""
    return plt.subplots(*args, layout="constrained", **kw)


def save(plt: Any, fig: Any, path: Target, mkdir: bool = False, fmt: str = "png") -> Any:
    """Write the figure (a path, or a binary file object for inline use) and close it."""
    if isinstance(path, (str, Path)):
        p = Path(path)
        if mkdir:
            p.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, dpi=120, format=fmt)
        plt.close(fig)
        return p
    fig.savefig(path, dpi=120, format=fmt)
    plt.close(fig)
    return path


def legend_outside(ax: Any, fontsize: int = 8, **kw: Any) -> Any:
    """A legend to the right of the axes, where it cannot cover bars, lines or labels."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=fontsize,
                     frameon=False, **kw)


def legend_below(fig: Any, axes: Any, fontsize: int = 8) -> None:
    """One legend for all panels, below them (the labels of the first panel that has any)."""
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            ncol = max(1, min(len(labels), 4))
            fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=fontsize, frameon=False)
            return


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
    plt = _plt()
    avg = [c["bench"]["summary"]["decode_tok_s"]["avg"] or 0 for c in ok]
    peak = [c["bench"]["summary"]["decode_tok_s"].get("peak") for c in ok]
    fig, ax = figure(plt, figsize=(max(6.5, 0.9 * len(ok) + 3.5), 4.8))
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
    plt = _plt()
    fig, ax = figure(plt, figsize=(max(6.5, 0.9 * len(rows) + 3.5), 4.8))
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


def plot_ladders(docs: list[dict[str, Any]], path: Target) -> Any:
    """Two panels against concurrency (log2 axis): per-stream decode tok/s and total tok/s; the
    baseline ladder (a no-spec config) grey and dashed; one legend below both panels."""
    plt = _plt()
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
    fig.suptitle("concurrency ladder")
    return save(plt, fig, path, mkdir=isinstance(path, (str, Path)))


def plot_serving(docs: list[dict[str, Any]], path: Target) -> Any:
    """Open-loop results: latency and goodput against the request rate (plot_serving.py)."""
    from .plot_serving import plot_serving as draw

    return draw(docs, path)
