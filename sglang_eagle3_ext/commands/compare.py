"""`sgl-eagle3 compare`: the seeds' table (config, tok/s avg/peak, accept length, vs baseline)."""

from __future__ import annotations

import argparse
from typing import Any

from ..measure import compare, serving_repeats
from ..runtime.errors import UserError
from .console import out, plain, print_json

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
                        "over runs) and pair run i with the baseline's run i (alternate the contenders: "
                        "A B, B A, ...)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--json", action="store_true", help="machine-readable rows")


def run(args: argparse.Namespace) -> int:
    if compare.is_serving_set(args.files):
        docs = compare.load_serving_set(args.files)
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


def rich_table(rs: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    metric = rs[0]["metric"] if rs else "decode_tok_s"
    t = Table(title=f"tok/s = {metric.replace('_tok_s', '')} tok/s per stream; accept len incl. bonus",
              title_justify="left")
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
