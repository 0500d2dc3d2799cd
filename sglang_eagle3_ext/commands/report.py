"""`sgl-eagle3 report`: one self-contained HTML page of a scan, a sweep or bench files."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..runtime.errors import UserError
from .console import err, out

HELP = ("One self-contained HTML page (tables and pictures inline, no other file) of a scan folder, a "
        "sweep folder or a set of bench results, to pass around")

EPILOG = """\
Examples:
  sgl-eagle3 report scan-llama3                 # writes scan-llama3/report.html
  sgl-eagle3 report sweep-out --out team.html
  sgl-eagle3 report runs/ --out serving.html    # every bench result found below runs/
Pictures need matplotlib (pip install 'sglang-eagle3-ext[plot]'); without it the page has the tables
and says why the pictures are missing.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("paths", nargs="+", metavar="DIR|FILE",
                   help="a scan folder (scan.json), a sweep folder (results.json), a folder of bench results "
                        "(searched), or result files (bench --out, open-loop, ladders, scan.json, results.json)")
    p.add_argument("--out", metavar="FILE.html",
                   help="where to write the page (default DIR/report.html for one folder, else report.html)")
    p.add_argument("--title", help="the page's title (default: names the inputs)")


def default_out(paths: list[str]) -> Path:
    if len(paths) == 1 and Path(paths[0]).is_dir():
        return Path(paths[0]) / "report.html"
    return Path("report.html")


def run(args: argparse.Namespace) -> int:
    from ..documents.outputs import check_destination, write_atomic
    from ..measure.plot_report import build

    dest = args.out or str(default_out(args.paths))
    if Path(dest).is_dir():
        raise UserError(f"--out {dest}: a folder; give a file name such as {Path(dest) / 'report.html'}", exit_code=2)
    check_destination(dest)  # before any drawing: a folder, an unwritable place is one line
    report = build(args.paths, args.title)
    for n in report.notes:
        err.print(f"note: {n}", highlight=False, markup=False)
    write_atomic(dest, report.html)
    size = len(report.html.encode("utf-8"))
    out.print(f"wrote {dest} ({', '.join(report.kinds)}: {report.tables} table(s), {report.pictures} picture(s), "
              f"{size / 1024:.0f} KiB, self-contained)", highlight=False, markup=False)
    return 0
