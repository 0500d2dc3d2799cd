"""Open-loop results as one picture: TTFT, ITL and TPOT (p50 solid, p99 dashed) and goodput
against the offered request rate, one colour per config (label).

A campaign writes one file per label and rate, sometimes several runs of a label at a rate: the
files of a label are joined into one line, and runs at the same rate are averaged (the point says
how many). Rates sit evenly spaced in the order they were offered, ``inf`` (all at once) last.
"""

from __future__ import annotations

import statistics
from typing import Any

from .plot_base import Target, figure, pyplot, save

LATENCY = (("ttft_ms", "TTFT ms"), ("itl_ms", "ITL ms (per token)"), ("tpot_ms", "TPOT ms"))


def _rate_key(r: Any) -> float:
    return float("inf") if r == "inf" else float(r)


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.fmean(vals) if vals else None


def series(docs: list[dict[str, Any]]) -> dict[str, dict[Any, dict[str, Any]]]:
    """{label: {rate: figures}}, runs of a label at a rate averaged: ``<stat>_p50`` / ``_p99`` for
    TTFT, ITL, TPOT; ``goodput`` (None without SLOs), ``req_s`` (completed req/s), ``runs``."""
    runs: dict[str, dict[Any, list[dict[str, Any]]]] = {}
    for i, d in enumerate(docs):
        label = str(d.get("label") or f"file {i + 1}")
        for e in d.get("rates") or []:
            s = e.get("summary") or {}
            if s.get("completed"):
                runs.setdefault(label, {}).setdefault(e["request_rate"], []).append(s)
    out: dict[str, dict[Any, dict[str, Any]]] = {}
    for label, by_rate in runs.items():
        for rate, ss in sorted(by_rate.items(), key=lambda kv: _rate_key(kv[0])):
            fig: dict[str, Any] = {"runs": len(ss)}
            for key, _ in LATENCY:
                for q in ("p50", "p99"):
                    fig[f"{key}_{q}"] = _mean([(s.get(key) or {}).get(q) for s in ss])
            fig["goodput"] = _mean([(s.get("goodput") or {}).get("request_goodput") for s in ss])
            fig["req_s"] = _mean([s.get("request_throughput") for s in ss])
            out.setdefault(label, {})[rate] = fig
    return out


def plot_serving(docs: list[dict[str, Any]], path: Target) -> Any:
    """The 2 x 2 picture (latency panels and goodput) of open-loop documents; ``path`` a file path
    or a binary file object."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    data = series(docs)
    rates = sorted({r for by in data.values() for r in by}, key=_rate_key)
    pos = {r: i for i, r in enumerate(rates)}
    has_goodput = any(f["goodput"] is not None for by in data.values() for f in by.values())
    fig, axes = figure(plt, 2, 2, figsize=(11, 7.5))
    flat = list(axes.flat)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    handles = []
    for n, (label, by) in enumerate(data.items()):
        color = colors[n % len(colors)]
        rs = list(by)
        xs = [pos[r] for r in rs]
        for ax, (key, _) in zip(flat, LATENCY, strict=False):
            ax.plot(xs, [by[r][f"{key}_p50"] for r in rs], marker="o", color=color)
            ax.plot(xs, [by[r][f"{key}_p99"] for r in rs], marker="x", linestyle="--", color=color)
        g = flat[3]
        if has_goodput:
            g.plot(xs, [by[r]["goodput"] for r in rs], marker="o", color=color)
        g.plot(xs, [by[r]["req_s"] for r in rs], marker=".", linestyle=":", color=color)
        many = max(f["runs"] for f in by.values())
        handles.append(Line2D([], [], color=color, marker="o",
                              label=label + (f" (up to {many} runs a rate, averaged)" if many > 1 else "")))
    handles += [Line2D([], [], color="black", label="p50"),
                Line2D([], [], color="black", linestyle="--", marker="x", label="p99")]
    if has_goodput:
        handles.append(Line2D([], [], color="black", marker="o", label="goodput (met every SLO)"))
    handles.append(Line2D([], [], color="black", linestyle=":", marker=".", label="completed req/s"))
    titles = [t for _, t in LATENCY] + ["goodput and completed req/s" if has_goodput else "completed req/s (no SLO given)"]
    for ax, title in zip(flat, titles, strict=True):
        ax.set_xticks(range(len(rates)))
        ax.set_xticklabels(["inf" if r == "inf" else f"{r:g}" for r in rates])
        ax.set_xlabel("request rate offered (req/s)")
        ax.set_ylabel(title)
        ys = [y for line in ax.get_lines() for y in line.get_ydata() if y is not None and y > 0]
        if ys and max(ys) > 30 * min(ys):  # queueing: p99 TTFT 100x its p50 at low load reads on a log axis
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if len(rates) == 1:
            ax.set_xlim(-0.5, 0.5)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False)
    fig.suptitle("open loop: latency and goodput against the request rate")
    return save(plt, fig, path, mkdir=not hasattr(path, "write"))
