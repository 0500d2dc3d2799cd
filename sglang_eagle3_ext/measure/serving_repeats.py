"""Repeated open-loop runs pooled per configuration (``compare --repeats``).

One open-loop run per server cannot tell a configuration from a stretch of host noise: on the lent
GPUs one run in eight lost 4-8 % to slower prefills while its steady cycles were unchanged
(docs/results.md, rounds 11 and 13). The fix is to alternate the contenders (A B, B A, ...) and
read them pooled: per (label, request rate) the mean of each figure over its runs with a 95 %
Student-t interval, and against the baseline the runs paired by order (run i of a configuration
with run i of the baseline: in an alternated schedule they ran next to each other), the mean of
the paired ratios with its own interval. A paired interval that holds 0 means "not told apart".

Pairs are made by run, not by position in a rate's list: run k of a label is its k-th run in file
order, where a file that repeats a rate the label's current run already holds starts the next run
(a multi-rate file is one run; one file per rate, given run after run, adds up to one run). A run
that lacks a rate (it stopped early) then leaves that rate unpaired instead of shifting every later
pair by one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .accounting import t975
from .compare import _md

# (row key, the summary's field, the percentile inside it or None): the figures pooled per group
FIGURES = (("request_throughput", "request_throughput", None),
           ("output_throughput", "output_throughput", None),
           ("request_goodput", "goodput", "request_goodput"),
           ("itl_p50_ms", "itl_ms", "p50"), ("itl_p99_ms", "itl_ms", "p99"),
           ("ttft_p99_ms", "ttft_ms", "p99"), ("accept_length", "accept_length", None))
PAIRED = ("output_throughput",)  # paired by run, with an interval
RATIO = ("request_goodput", "itl_p99_ms")  # the ratio of the means: a goodput near 0 in one run
# would swing a mean of per-run ratios


def mean_interval(xs: Sequence[float]) -> tuple[float, float | None, float | None]:
    """Mean and its 95 % Student-t interval (None, None with fewer than two values)."""
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, None, None
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    h = t975(n - 1) * sd / math.sqrt(n)
    return m, m - h, m + h


def _figure(summary: dict[str, Any], field: str, sub: str | None) -> float | None:
    v = summary.get(field)
    if sub is not None:
        v = v.get(sub) if isinstance(v, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _pooled(vals: list[float | None]) -> dict[str, float | None]:
    xs = [v for v in vals if v is not None]
    if not xs:
        return {"mean": None, "lo": None, "hi": None}
    m, lo, hi = mean_interval(xs)
    return {"mean": m, "lo": lo, "hi": hi}


def run_ids(docs: list[dict[str, Any]]) -> list[int]:
    """The run number of each document within its label (see the module docstring)."""
    ids: list[int] = []
    current: dict[str, tuple[int, set[Any]]] = {}  # label -> (run number, rates it holds)
    for d in docs:
        label = str(d.get("label"))
        rates = [e["request_rate"] for e in d["rates"]]
        k, held = current.get(label, (-1, set()))
        if k < 0 or held & set(rates):
            k, held = k + 1, set()
        current[label] = (k, held | set(rates))
        ids.append(k)
    return ids


def runs_by_group(docs: list[dict[str, Any]]) -> dict[tuple[str, Any], dict[tuple[int, int], dict[str, Any]]]:
    """(label, request rate) -> {(run number, repeat within the file): summary}, in file order."""
    out: dict[tuple[str, Any], dict[tuple[int, int], dict[str, Any]]] = {}
    for d, k in zip(docs, run_ids(docs), strict=True):
        for e in d["rates"]:
            runs = out.setdefault((str(d.get("label")), e["request_rate"]), {})
            runs[(k, sum(1 for r in runs if r[0] == k))] = e["summary"]
    return out


def groups(docs: list[dict[str, Any]]) -> dict[tuple[str, Any], list[dict[str, Any]]]:
    """(label, request rate) -> the summaries of that label at that rate, in file order."""
    return {key: list(runs.values()) for key, runs in runs_by_group(docs).items()}


def has_repeats(docs: list[dict[str, Any]]) -> bool:
    return any(len(v) > 1 for v in groups(docs).values())


def _row(rate: Any, label: str, by_run: dict[tuple[int, int], dict[str, Any]],
         base_by_run: dict[tuple[int, int], dict[str, Any]] | None, is_base: bool) -> dict[str, Any]:
    runs = list(by_run.values())
    base = list(base_by_run.values()) if base_by_run is not None else None
    row: dict[str, Any] = {"request_rate": rate, "config": label, "runs": len(runs), "is_baseline": is_base}
    for key, field, sub in FIGURES:
        row[key] = _pooled([_figure(s, field, sub) for s in runs])
    for key, field, sub in FIGURES:
        if key not in PAIRED + RATIO:
            continue
        row[f"{key}_vs_baseline_pct"] = None
        if base is None or is_base:
            continue
        if key in PAIRED:  # run k against the baseline's run k; a run either side lacks stays unpaired
            pairs = [(_figure(s, field, sub), _figure(base_by_run[k], field, sub))
                     for k, s in by_run.items() if base_by_run and k in base_by_run]
            ratios = [(a / b - 1.0) * 100.0 for a, b in pairs if a is not None and b]
            row[f"{key}_vs_baseline_pct"] = _pooled(ratios) | {"pairs": len(ratios)}
        else:
            b = _pooled([_figure(s, field, sub) for s in base])["mean"]
            m = row[key]["mean"]
            row[f"{key}_vs_baseline_pct"] = None if m is None or not b else {"mean": (m / b - 1.0) * 100.0}
    return row


def repeat_rows(docs: list[dict[str, Any]], base_label: str) -> list[dict[str, Any]]:
    """One row per (request rate, label): runs, each figure's mean [95 %], and against the
    baseline label at the same rate: output tok/s paired by run (mean of the ratios [95 %]),
    goodput and ITL p99 as the ratio of the means, in percent."""
    gs = runs_by_group(docs)
    rates = sorted({r for _, r in gs}, key=lambda r: float("inf") if r == "inf" else r)
    labels = list(dict.fromkeys(lbl for lbl, _ in gs))
    return [_row(rate, lbl, gs[(lbl, rate)], gs.get((base_label, rate)), lbl == base_label)
            for rate in rates for lbl in labels if (lbl, rate) in gs]


def _iv(f: dict[str, Any] | None, nd: int = 1, pct: bool = False) -> str:
    if not f or f.get("mean") is None:
        return "-"
    fmt = (lambda x: f"{x:+.{nd}f}") if pct else (lambda x: f"{x:.{nd}f}")
    body = fmt(f["mean"]) + ("%" if pct else "")
    if f.get("lo") is not None:
        body += f" [{fmt(f['lo'])}, {fmt(f['hi'])}]"
    return body


HEAD = ("rate /s", "config", "runs", "req/s", "out tok/s [95 %]", "vs base, paired [95 %]",
        "goodput req/s", "vs base", "ITL p50 / p99 ms", "ITL p99 vs base", "TTFT p99 ms", "accept len")


def cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    from ..documents.serving_doc import rate_label
    from ..documents.text import clean

    def vs(r: dict[str, Any], key: str) -> str:  # paired keys carry an interval, ratio keys a mean
        return "—" if r["is_baseline"] else _iv(r[f"{key}_vs_baseline_pct"], 1, pct=True)

    return [[rate_label(r["request_rate"]), clean(r["config"]), str(r["runs"]),
             _iv({"mean": r["request_throughput"]["mean"]}, 2), _iv(r["output_throughput"]),
             vs(r, "output_throughput"), _iv({"mean": r["request_goodput"]["mean"]}, 2),
             vs(r, "request_goodput"),
             f"{_iv({'mean': r['itl_p50_ms']['mean']}, 2)} / {_iv({'mean': r['itl_p99_ms']['mean']}, 2)}",
             vs(r, "itl_p99_ms"), _iv({"mean": r["ttft_p99_ms"]["mean"]}, 0),
             _iv({"mean": r["accept_length"]["mean"]}, 3)]
            for r in rows]


NOTE = ("means over each config's runs at that rate, 95 % Student-t interval over runs; vs base: run k "
        "paired with the baseline's run k at the same rate (runs in file order; a run without that rate "
        "stays unpaired), mean of the paired ratios [95 %]; an interval "
        "that holds 0 does not tell the two apart; goodput and ITL p99 vs base: ratio of the means")


def markdown(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(HEAD) + " |"
    sep = "|" + "|".join(["---"] * 2 + [":-:"] * (len(HEAD) - 2)) + "|"
    return "\n".join([head, sep] + ["| " + " | ".join(_md(cs)) + " |" for cs in cells(rows)])
