"""Draw the pictures under docs/img from the committed data under docs/data (needs matplotlib).

    .venv/bin/python tools/make_img.py            # every picture
    .venv/bin/python tools/make_img.py --check    # exit 1 if a picture is missing

Each picture is drawn by the same code the commands use (sweep, scan, bench/compare --plot), so
the README and the guide show what a user's run would draw.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"
IMG = ROOT / "docs" / "img"
sys.path.insert(0, str(ROOT))


def pictures() -> dict[str, object]:
    """{file name under docs/img: a function drawing it to a path}."""
    from sglang_eagle3_ext.documents import scan_doc
    from sglang_eagle3_ext.documents.sweep_doc import load_results
    from sglang_eagle3_ext.measure import compare, plot, plot_scan, plot_serving

    core = DATA / "h200-2026-11-29" / "run2" / "core" / "results.json"
    ladders = DATA / "h200-2026-12-01" / "8b-p08" / "p08" / "results.json"
    scan = DATA / "h200-2026-12-02-r8" / "8bp"
    scan_moe = DATA / "h200-2026-12-02-r8" / "moe5" / "scan-moe"
    serving = sorted(str(p) for p in (DATA / "h100-2026-12-07-r19" / "r15m").glob("*/serving-r*.json"))

    def sweep(p: Path) -> dict:
        return load_results(p, missing_ok=False, folders=False)

    return {
        "h200-ladder-8b.png": lambda dest: plot.plot_ladders(
            compare.load_ladders([str(ladders)]), dest,
            title="8B shape on an H200: no speculation (grey) and EAGLE-3 at 1-5 steps (s1-s5)"),
        "h200-scan-8b.png": lambda dest: plot_scan.plot_scan(
            scan_doc.load(scan), dest, title="8B shape on an H200: per-stream tok/s of each step count\n"
                                             "steady decode cycles; red box = best per batch size"),
        "h200-scan-moe.png": lambda dest: plot_scan.plot_scan(
            scan_doc.load(scan_moe), dest, title="MoE shape on an H200: the best step count differs per batch size\n"
                                                 "per-stream tok/s, steady decode cycles; red box = best"),
        "h200-sweep-tok_s.png": lambda dest: plot.plot_tok_s(sweep(core), dest),
        "h200-sweep-phases.png": lambda dest: plot.plot_phases(sweep(core), dest),
        "h100-serving-moe.png": lambda dest: plot_serving.plot_serving(compare.load_serving_set(serving), dest),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only say which pictures are missing")
    args = ap.parse_args(argv)
    todo = pictures()
    if args.check:
        missing = [n for n in todo if not (IMG / n).is_file()]
        for n in missing:
            print(f"missing: docs/img/{n}")
        return 1 if missing else 0
    IMG.mkdir(parents=True, exist_ok=True)
    for name, draw in todo.items():
        print(f"wrote {draw(IMG / name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
