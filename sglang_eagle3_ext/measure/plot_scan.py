"""The scan grid as a picture: per-stream tok/s of every state (step count, or tree) x batch
size, coloured by its share of that batch size's best, the best per batch size (tier) boxed;
the plain server's row on top when the scan benched one.

A state's label is the cell's own ``state`` text when it carries one (any label), else ``N steps``
for a chain and ``STEPSxTOPKxTOKENS`` (``5x4x21``, runtime/specstate.py's spelling) for a tree.
"""

from __future__ import annotations

import re
from typing import Any

from .plot_base import Target, figure, pyplot, save

PLAIN = "plain (no spec)"
_TREE = re.compile(r"^(\d+)x(\d+)x(\d+)$")


def _chain(steps: int) -> str:
    return "step 0 (SGLang)" if steps == 0 else f"{steps} step{'s' if steps > 1 else ''}"


def state_label(cell: dict[str, Any]) -> str:
    """A row's label: the cell's own ``state`` / ``key`` when it names one (a tree's
    ``STEPSxTOPKxTOKENS``, the spelling of runtime/specstate.py, or any other text; digits name a
    chain), else from its steps, topk and draft tokens."""
    for name in ("state", "key"):
        v = cell.get(name)
        if isinstance(v, str) and v.strip():
            return _chain(int(v)) if v.strip().isdigit() else v.strip()
    steps, topk = cell["steps"], cell.get("topk") or 1
    if topk > 1:
        return f"{steps}x{topk}x{cell.get('draft_tokens') or '?'}"
    return _chain(steps)


def state_order(cell: dict[str, Any]) -> tuple[Any, ...]:
    """Chains first, fewer steps first; then trees by steps, topk, draft tokens (a label that
    spells a tree counts as one even when the cell lacks topk)."""
    lab = state_label(cell)
    m = _TREE.match(lab)
    if m:
        steps, topk, tokens = map(int, m.groups())
    else:
        steps, topk, tokens = cell["steps"], cell.get("topk") or 1, cell.get("draft_tokens") or 0
    return (topk > 1, steps, topk, tokens, lab)


def grid(doc: dict[str, Any]) -> dict[str, Any]:
    """What the picture shows, without matplotlib: ``states`` (labels, chains then trees, fewer
    steps first), ``sizes`` (batch sizes), ``rate`` {(state, bs): per-stream tok/s}, ``best``
    {bs: state} (ties: fewer steps, then a chain, as the scan's best per tier), ``plain`` {bs: tok/s}."""
    from ..documents.scan_doc import cell_rate, main_cells

    cells = sorted((c for c in main_cells(doc) if cell_rate(c)), key=state_order)
    states: list[str] = []
    rank: dict[str, tuple[int, bool]] = {}  # ties: fewer steps, then a chain (scan_doc.best_static's rule)
    rate: dict[tuple[str, int], float] = {}
    for c in cells:
        lab = state_label(c)
        if lab not in states:
            states.append(lab)
            order = state_order(c)
            rank[lab] = (-order[1], not order[0])
        rate.setdefault((lab, c["bs"]), float(cell_rate(c) or 0.0))
    sizes = sorted({bs for _, bs in rate})
    best = {}
    for bs in sizes:
        here = [(rate[(s, bs)], *rank[s], -i, s) for i, s in enumerate(states) if (s, bs) in rate]
        best[bs] = max(here)[-1]
    plain = {int(k): v["per_stream_tok_s"] for k, v in (doc.get("baseline") or {}).items()
             if v.get("per_stream_tok_s")}
    return {"states": states, "sizes": sizes, "rate": rate, "best": best, "plain": plain}


def plot_scan(doc: dict[str, Any], path: Target, title: str | None = None) -> Any:
    """The grid (one row per state, one column per batch size); None when no cell has a rate."""
    from matplotlib.patches import Rectangle

    g = grid(doc)
    if not g["rate"]:
        return None
    plt = pyplot()
    rows = ([PLAIN] if g["plain"] else []) + g["states"]
    sizes = g["sizes"]

    def value(r: str, bs: int) -> float | None:
        return g["plain"].get(bs) if r == PLAIN else g["rate"].get((r, bs))

    top = {bs: max(v for r in rows if (v := value(r, bs)) is not None) for bs in sizes}
    share = [[(v / top[bs]) if (v := value(r, bs)) is not None else float("nan") for bs in sizes] for r in rows]
    lo = min(min(x for x in row if x == x) for row in share if any(x == x for x in row))
    # at most 20 x 20 inches however many states and batch sizes; the cell text shrinks instead
    fig, ax = figure(plt, figsize=(min(20.0, 3.2 + 1.5 * len(sizes)), min(20.0, 1.6 + 0.48 * len(rows))))
    small = len(sizes) > 11 or len(rows) > 38
    cmap = plt.get_cmap("viridis").with_extremes(bad="#eeeeee")
    im = ax.imshow(share, cmap=cmap, vmin=min(lo, 0.8), vmax=1.0, aspect="auto")
    for i, r in enumerate(rows):
        for j, bs in enumerate(sizes):
            v = value(r, bs)
            if v is None:
                ax.text(j, i, "-", ha="center", va="center", fontsize=9, color="#777777")
                continue
            ref = g["plain"].get(bs)
            vs = f"\n{(v / ref - 1) * 100:+.0f}% vs plain" if ref and r != PLAIN else ""
            dark = (share[i][j] - im.norm.vmin) / max(im.norm.vmax - im.norm.vmin, 1e-9) < 0.55
            is_best = g["best"].get(bs) == r
            ax.text(j, i, f"{v:.1f}{vs}", ha="center", va="center", fontsize=5 if small else 8 if vs else 9,
                    color="white" if dark else "black", fontweight="bold" if is_best else "normal")
            if is_best:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#d62728", linewidth=2.5))
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels([str(bs) for bs in sizes])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows)
    ax.set_xlabel("batch size (streams in flight)")
    ax.set_ylabel("state (steps, or a tree)")
    ax.tick_params(length=0)
    bar = fig.colorbar(im, ax=ax, shrink=0.9)
    bar.set_label("share of the batch size's best", fontsize=8)
    model = str(doc.get("model") or "").rstrip("/").rsplit("/", 2)[-2:]
    ax.set_title(title or f"scan{' of ' + '/'.join(model) if model and model[0] else ''}: per-stream tok/s\n"
                 "steady decode cycles; red box = best state per batch size", fontsize=10)
    return save(plt, fig, path, mkdir=not hasattr(path, "write"))


def draw_beside(doc: dict[str, Any], out_dir: Any) -> str | None:
    """scan.png beside scan.json: the line to print (written, or why not); None without cells.
    The scan's results are on disk already: a picture that cannot be drawn never fails the scan."""
    from pathlib import Path

    from ..runtime.errors import UserError
    from .plot_base import missing_reason

    if not grid(doc)["rate"]:
        return None
    why = missing_reason()
    if why:
        return f"scan.png not drawn: {why}"
    dest = Path(out_dir) / "scan.png"
    try:
        plot_scan(doc, dest)
    except (UserError, OSError, ValueError) as exc:
        return f"scan.png not drawn: {exc}"
    return f"wrote {dest}"
