"""`sgl-eagle3 compare`: the seeds' table (config, tok/s avg/peak, accept length, vs baseline)."""

from __future__ import annotations

import argparse
from typing import Any

from ..measure import compare, serving_repeats
from ..runtime.errors import UserError
from .console import err, out, plain, print_json

HELP = ("Compare bench results: tok/s avg and peak, accept length, % vs a baseline; "
        "ladders per concurrency level.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE.json",
                   help="bench result files (sgl-eagle3 bench --out), a sweep results.json, or "
                        "concurrency ladders (bench --concurrency 1,2,4 --out; all files ladders), a "
                        "scan's scan.json / folder (one ladder per step count), or open-loop results "
                        "(bench --request-rate ... --out; all files open-loop: one row per rate)")
    p.add_argument("--baseline", metavar="LABEL",
                   help="label of the baseline row (default: a sweep's no-spec config, else the first file)")
    p.add_argument("--metric", default="decode_tok_s",
                   choices=("decode_tok_s", "e2e_tok_s", "throughput_tok_s"),
                   help="which tok/s to compare (default decode_tok_s)")
    p.add_argument("--repeats", action="store_true",
                   help="open-loop results: pool the runs of each label at each rate (mean, 95 %% interval "
                        "over runs) and pair run k with the baseline's run k at each rate (runs in file order; "
                        "alternate the contenders: A B, B A, ...)")
    p.add_argument("--force", action="store_true",
                   help="open-loop results of different workloads (max tokens, api, seed, prompts, SLOs, ...): "
                        "compare anyway, with a warning line each (default: refused)")
    p.add_argument("--plot", metavar="FILE.png",
                   help="also draw the files (needs matplotlib): open loop: TTFT / ITL / TPOT p50, p99 and goodput "
                        "against the request rate; ladders: tok/s against concurrency; bench results: tok/s bars")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--json", action="store_true", help="machine-readable rows")


def run(args: argparse.Namespace) -> int:
    if args.plot is not None:
        _check_plot(args.plot)  # before any reading: a bad path or no matplotlib is one line
    rc = tables(args)
    if args.plot is not None and rc == 0:
        _plot(args)
    return rc


def _check_plot(path: str) -> None:
    from ..documents.outputs import check_destination
    from ..measure.plot_base import missing_reason

    if not path.lower().endswith(".png"):
        raise UserError(f"--plot {path}: give a .png file name (the plot is a PNG image)", exit_code=2)
    check_destination(path, "--plot")
    why = missing_reason()
    if why:
        raise UserError(f"--plot: {why} (or leave --plot out)", exit_code=2)


def _plot(args: argparse.Namespace) -> None:
    """The files of the table just printed, drawn (read again: cheap beside the drawing)."""
    from ..measure.plot import plot_results

    if compare.is_serving_set(args.files):
        kind, docs = "serving", compare.load_serving_set(args.files)
    elif compare.is_ladder_set(args.files):
        kind, docs = "ladder", compare.load_ladders(args.files)
    else:
        kind, docs = "bench", compare.load(args.files)
    base = compare.pick_baseline(docs, args.baseline)
    if kind == "ladder":
        docs = [dict(d, baseline=i == base) for i, d in enumerate(docs)]
    made = plot_results(kind, docs, args.plot, base)
    (err if args.json else out).print(f"wrote {made}" if made else "--plot: nothing to draw (no finished result)",
                                      highlight=False, markup=False)


def tables(args: argparse.Namespace) -> int:
    if compare.is_serving_set(args.files):
        docs = compare.load_serving_set(args.files)
        _same_workload(docs, args)
        if args.repeats:
            return _repeats(docs, args)
        sr = compare.serving_rows(docs, args.baseline)
        if args.json:
            print_json(sr)
        elif args.markdown:
            out.print(compare.serving_markdown(sr), highlight=False, markup=False)
        else:
            out.print(serving_rich_table(sr))
        if serving_repeats.has_repeats(docs) and not args.json:
            out.print("some labels ran more than once at a rate: --repeats pools their runs and pairs "
                      "them with the baseline's", highlight=False, markup=False)
        return 0
    if args.repeats:
        raise UserError("--repeats pools open-loop results (bench --request-rate ... --out)", exit_code=2)
    if compare.is_ladder_set(args.files):
        lr = compare.ladder_rows(compare.load_ladders(args.files), args.baseline)
        if args.json:
            print_json(lr)
        elif args.markdown:
            out.print(compare.ladder_markdown(lr), highlight=False, markup=False)
        else:
            out.print(ladder_rich_table(lr))
        return 0
    rs = compare.rows(compare.load(args.files), args.baseline, args.metric)
    if args.json:
        print_json(rs)
    elif args.markdown:
        out.print(compare.markdown(rs), highlight=False, markup=False)
    else:
        out.print(rich_table(rs))
    return 0


def _same_workload(docs: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Open-loop runs of different workloads are not one configuration against another: refused
    (exit 2) unless --force, which prints a warning line per differing run."""
    diffs = compare.workload_diffs(docs, compare.pick_baseline(docs, args.baseline))
    if not diffs:
        return
    if not args.force:
        more = f" (and {len(diffs) - 1} more)" if len(diffs) > 1 else ""
        raise UserError(f"{diffs[0]}{more}; --force compares them anyway", exit_code=2)
    for line in diffs:
        err.print(f"warning: {line}", highlight=False, markup=False)


# what each --metric is made of, said above the table: the client's clock, unlike profile's eff tok/s
# (accept length over the server's own cycle timings), so the two differ for one config
METRIC_MADE_OF = {
    "decode_tok_s": "decode tok/s per stream, the client's: per request, tokens after the first / time from the "
                    "first token to the last (TTFT left out), mean over the measured requests; profile's eff tok/s "
                    "is the server's own cycle timing instead",
    "e2e_tok_s": "end-to-end tok/s per stream, the client's: per request, tokens / time from sending to the last "
                 "token (TTFT included), mean over the measured requests",
    "throughput_tok_s": "throughput tok/s, the client's: all completion tokens of a run / its wall time (every "
                        "stream together), mean over runs",
}


def rich_table(rs: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    metric = rs[0]["metric"] if rs else "decode_tok_s"
    t = Table(title=f"tok/s = {METRIC_MADE_OF.get(metric, metric)}; accept len incl. bonus", title_justify="left")
    t.add_column("Config")
    for c in ("tok/s (avg)", "tok/s (peak)", "accept len", "vs baseline"):
        t.add_column(c, justify="right")
    for cells in compare.table_lines(rs):
        t.add_row(*map(plain, cells))  # no markup from labels
    return t


def ladder_rich_table(rs: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    t = Table(title="per level vs the baseline ladder at the same concurrency; accept len incl. bonus",
              title_justify="left")
    for i, c in enumerate(compare.LADDER_HEAD):
        t.add_column(c, justify="left" if i == 1 else "right")
    for cells in compare.ladder_cells(rs):
        t.add_row(*map(plain, cells))
    return t


def serving_rich_table(rs: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    t = Table(title="open loop, per request rate vs the baseline file at the same rate (ITL per token; "
                    "accept len incl. bonus)", title_justify="left")
    for i, c in enumerate(compare.SERVING_HEAD):
        t.add_column(c, justify="left" if i == 1 else "right")
    for cells in compare.serving_cells(rs):
        t.add_row(*map(plain, cells))
    return t


def _repeats(docs: list[dict[str, Any]], args: argparse.Namespace) -> int:
    base = docs[compare.pick_baseline(docs, args.baseline)].get("label")
    rows = serving_repeats.repeat_rows(docs, str(base))
    if args.json:
        print_json(rows)
        return 0
    if args.markdown:
        out.print(serving_repeats.markdown(rows), highlight=False, markup=False)
    else:
        from rich.table import Table

        t = Table(title=f"open loop, repeated runs pooled per config and rate; baseline {plain(str(base))}",
                  title_justify="left")
        for i, c in enumerate(serving_repeats.HEAD):
            t.add_column(c, justify="left" if i == 1 else "right")
        for cells in serving_repeats.cells(rows):
            t.add_row(*map(plain, cells))
        out.print(t)
    out.print(serving_repeats.NOTE, highlight=False, markup=False)
    return 0
