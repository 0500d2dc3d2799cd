"""`sgl-eagle3 calibrate`: a scan's cycle costs moved to the served traffic (tune/calibrate.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from .console import err, out, plain, print_json

HELP = ("Move a scan's cycle costs to the traffic a server really serves, from its probe files "
        "(longer contexts add a step-independent cost per cycle): a scan file for launch --policy")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scan", metavar="SCAN", help="a scan folder or its scan.json (sgl-eagle3 scan)")
    p.add_argument("probes", nargs="+", metavar="PROF.jsonl",
                   help="probe files of a server (any step counts the scan measured) under the served traffic")
    p.add_argument("--out", required=True, metavar="FILE.json", help="the calibrated scan file to write")
    p.add_argument("--min-cycles", type=int, default=None, metavar="N",
                   help="steady cycles a key needs before its own mean replaces the scan's figure (default 30)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def run(args: argparse.Namespace) -> int:
    from ..documents import prof_records, scan_doc
    from ..documents.outputs import check_destination, write_atomic
    from ..measure.accounting import by_key_summary
    from ..runtime.errors import UserError
    from ..tune.calibrate import DEFAULT_MIN_CYCLES, best_by_bs, calibrate, distinct_records

    n = DEFAULT_MIN_CYCLES if args.min_cycles is None else args.min_cycles
    if not 1 <= n <= 10**6:
        raise UserError(f"--min-cycles {n}: give 1..1000000", exit_code=2)
    dest = check_destination(args.out)
    for src in [args.scan, *args.probes]:  # the inputs stay as measured: a calibrated copy goes beside them
        f = Path(src).expanduser()
        f = f / "scan.json" if f.is_dir() else f
        if f.exists() and f.resolve() == dest.resolve():
            raise UserError(f"--out {args.out} is the input {src}: write the calibrated scan to a new file", exit_code=2)
    doc = scan_doc.load(args.scan)
    records, notes = distinct_records([prof_records.load(f) for f in args.probes])
    for note in notes:  # a file given twice, a copy or a rank sibling: its cycles count once
        err.print(f"note: {note}", highlight=False, markup=False)
    new, rows = calibrate(doc, by_key_summary(records), sources=list(args.probes), min_cycles=n)
    scan_doc.check(json.loads(json.dumps(new)), "the calibrated scan")  # what launch --policy will read
    write_atomic(args.out, json.dumps(new, indent=1) + "\n")
    before, after = best_by_bs(rows, "scan_rate"), best_by_bs(rows, "rate")
    if args.json:
        print_json({"out": args.out, "rows": rows, "best_scan": before, "best_calibrated": after,
                    "offsets": new["calibration"]["offsets"]})
        return 0
    render(rows, before, after, args.out, new["calibration"]["beyond_scan"])
    return 0


def render(rows: list[dict[str, Any]], before: dict[int, int], after: dict[int, int], path: str,
           beyond: list[int]) -> None:
    t = Table(title="Scan cycle costs under the served traffic (per CUDA-graph batch size; tok/s per stream "
                    "at the scan's accept length)")
    for col in ("batch", "offset ms", "steps", "scan ms", "calibrated ms", "from", "scan tok/s", "calibrated tok/s"):
        t.add_column(col, justify="left" if col == "from" else "right")
    for r in rows:
        basis = {"measured": f"measured ({r['cycles']} cycles)", "offset": "scan + offset",
                 "uncalibrated": "scan (no probes here)"}.get(r["basis"], "scan line + offset")
        mark = " *" if after.get(r["bs"]) == r["steps"] else ""
        t.add_row(str(r["bs"]), f"{r['offset_ms']:+.2f}", f"{r['steps']}{mark}", f"{r['scan_ms']:.2f}",
                  f"{r['ms']:.2f}", plain(basis), f"{r['scan_rate']:.1f}", f"{r['rate']:.1f}")
    out.print(t)
    moved = [b for b in after if before.get(b) != after[b]]
    say = lambda s: out.print(s, highlight=False, markup=False)  # noqa: E731
    say("best step count per batch size: scan " + ", ".join(f"{b}: {s}" for b, s in before.items())
        + " -> calibrated " + ", ".join(f"{b}: {s}" for b, s in after.items())
        + (f" (changed at {', '.join(map(str, moved))})" if moved else " (unchanged)"))
    say("offset = the cycle-weighted mean of (measured - scan) over the step counts that ran at that batch "
        "size; * = the calibrated best; between and beyond calibrated sizes the policy interpolates as for a scan")
    thin = sorted({(r["bs"], r["steps"]) for r in rows if r["basis"] == "offset-interpolated"})
    if thin:
        say(f"{len(thin)} of {len(rows)} rows rest on the scan's line between its batch sizes (it never ran that "
            "step count there: 'scan line + offset'); measured probes of those keys, or a scan with those "
            "batch sizes in --concurrency, make them firm")
    bare = sorted({r["bs"] for r in rows if r["basis"] == "uncalibrated"})
    if bare:
        say(f"batch sizes {', '.join(map(str, bare))}: the scan measured them, the probes never ran there; they keep "
            "the scan's figures (the policy interpolates from calibrated to uncalibrated sizes)")
    if beyond:
        say(f"batch sizes {', '.join(map(str, beyond))} ran above the scan's largest measured batch size: not "
            "calibrated (a scan with larger --concurrency levels covers them)")
    say(f"wrote {path}; use it as a scan: sgl-eagle3 launch ... --policy {path}")
