"""`sgl-eagle3 adaptive write`: SGLang's --speculative-adaptive-config from a steps x concurrency sweep."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from ..runtime.errors import UserError
from .console import out, print_json

HELP = ("Write SGLang's adaptive speculation config (tiers of candidate steps per batch size) "
        "from a sweep's or a scan's measurements, checked with the release's own loader.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    w = sub.add_parser("write", help="choose tiers and write the JSON config")
    w.add_argument("--from", dest="source", required=True, metavar="SWEEP_DIR|results.json|SCAN_DIR",
                   help="a steps x concurrency sweep (sgl-eagle3 sweep with bench.concurrency a list), "
                        "or a scan (sgl-eagle3 scan: its folder or scan.json; probe figures, steady cycles)")
    w.add_argument("--out", required=True, metavar="adaptive.json", help="the config file to write")
    w.add_argument("--within", type=float, default=5.0, metavar="PCT",
                   help="a step count is a candidate at a tier when its per-stream tok/s is within "
                        "PCT %% of the best there (default 5)")
    w.add_argument("--predicted", action="store_true",
                   help="also use the sweep's predicted cells (probes + cost model, marked *) where "
                        "nothing was measured")
    w.add_argument("--json", action="store_true", help="print the choice as JSON")
    w.add_argument("--sglang-root", dest="sglang_root_w", metavar="PATH", default=None,
                   help="an unpacked SGLang tree whose loader decides the format")


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def render(choices: list[Any], source: dict[tuple[int, int], str], loader: Any, version: str,
           out_path: str, read: dict[int, list[int]], within: float) -> None:
    from rich.table import Table

    steps = sorted({s for c in choices for s in c.tok_s})
    t = Table(title=f"per-stream decode tok/s per tier (steps 0 = no speculation; * = predicted); "
                    f"candidates within {within:g}% of the best", title_justify="left")
    t.add_column("tier (batch size)", justify="right")
    for s in steps:
        t.add_column(f"steps {s}", justify="right")
    t.add_column("best", justify="right")
    t.add_column("candidates")
    for c in choices:
        cells = []
        for s in steps:
            v = c.tok_s.get(s)
            mark = "*" if source.get((c.batch_size, s)) == "predicted" else ""
            cells.append(_f(v) + mark if v is not None else "-")
        t.add_row(str(c.batch_size), *cells, str(c.best_steps), str(c.candidates))
    out.print(t)
    for c in choices:
        if c.note:
            out.print(f"note: tier {c.batch_size}: {c.note}", highlight=False, markup=False)
    from ..tune.adaptive import launch_steps

    out.print(f"wrote {out_path} ({loader.format} format of SGLang {version})", highlight=False,
              markup=False)
    out.print(f"checked with the release's own loader ({loader.source}): it reads "
              f"{ {k: v for k, v in sorted(read.items())} }", highlight=False, markup=False)
    out.print(f"launch with: sgl-eagle3 launch ... --adaptive {shlex.quote(str(out_path))}  (starts at "
              f"--steps {launch_steps(read)}, the largest candidate)", highlight=False, markup=False)


def run(args: argparse.Namespace) -> int:
    from ..runtime.sglang_env import locate
    from ..tune import adaptive

    if args.action != "write":
        raise UserError("usage: sgl-eagle3 adaptive write --from SWEEP_DIR --out adaptive.json",
                        exit_code=2)
    from ..documents.outputs import WriteFailed, check_destination, report_unwritten

    env = locate(args.sglang_root_w or getattr(args, "sglang_root", None))
    check_destination(args.out)  # before reading anything: a bad --out is one line, exit 2
    loader = adaptive.release_loader(env.package_dir)
    table, source, _ = adaptive.load_measurements(args.source, args.predicted)
    try:
        choices, cfg, read = adaptive.write(table, args.out, loader, args.within)
    except WriteFailed as exc:
        report_unwritten(exc, getattr(exc, "result", ""))
        return 1
    if args.json:
        print_json({"config": cfg, "release": env.version, "format": loader.format,
                    "read_back": {str(k): v for k, v in read.items()},
                    "launch_steps": adaptive.launch_steps(read),
                    "tiers": [{"batch_size": c.batch_size, "best_steps": c.best_steps,
                               "candidates": c.candidates, "tok_s": {str(k): v for k, v in c.tok_s.items()},
                               "note": c.note} for c in choices]})
    else:
        render(choices, source, loader, env.version, args.out, read, args.within)
    return 0
