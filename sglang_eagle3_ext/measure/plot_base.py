"""What every plot shares: matplotlib, imported lazily with the Agg backend (no display needed),
the constrained layout, legends placed outside the data, and the save to a path or to a binary
file object (the report inlines the bytes).

matplotlib is an optional dependency (``pip install 'sglang-eagle3-ext[plot]'``): without it a plot
raises UserError with one line, and ``missing_reason`` says why beforehand.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from ..runtime.errors import UserError

Target = str | Path | IO[bytes]


def missing_reason() -> str | None:
    """Why no plot can be drawn here (one line), or None when matplotlib imports."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed: pip install 'sglang-eagle3-ext[plot]'"
    return None


def pyplot() -> Any:
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
