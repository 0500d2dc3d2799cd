"""`sgl-eagle3 sweep`: fresh server per config -> bench -> probes -> stop; table, plots, analysis."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from .compare import rich_table
from .console import err, out

HELP = ("Sweep steps/topk/draft tokens (+ no-spec baseline, NCCL, custom all-reduce) x concurrency: "
        "bench each, analyse, recommend per tier.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_file", metavar="SWEEP.yaml", nargs="?", help="the matrix (see docs/guide/sweep.md)")
    p.add_argument("--report", metavar="DIR",
                   help="start nothing: re-read DIR's results.json and probe files, print table and "
                        "analysis; DIR is never written (--out writes results, table, plots there). "
                        "A scan folder (sgl-eagle3 scan) prints the scan's tables")
    p.add_argument("--out", metavar="DIR", help="output folder (default sweep-<name>; with --report: "
                   "where to write the redone results.json, table.md and plots, nothing if absent)")
    p.add_argument("--resume", action="store_true",
                   help="continue a sweep in --out: configs already ok are skipped, failed ones re-run")
    p.add_argument("--plan", action="store_true", help="print the configs and exit (nothing started)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def print_analysis(a: dict[str, Any]) -> None:
    cm = a.get("cost_model")
    if cm:
        sign = "-" if cm["cd"] < 0 else "+"
        out.print(f"Cost model ({cm['family']}): cycle_ms = {cm['c0']:.2f} {sign} {abs(cm['cd']):.2f} x steps "
                  f"(RMS misfit {cm['residual_ms']:.2f} ms over {cm['n']} configs)")
        if cm.get("warning"):
            out.print(f"  [yellow]{cm['warning']}[/]", highlight=False)
    rows = [r for r in a.get("break_even", []) if r["break_even"] is not None]
    if rows:
        out.print("Break-even accept length (incl. bonus) = cycle ms x baseline tok/s / 1000:")
        for r in rows:
            verdict = "-" if r["beats"] is None else ("beats" if r["beats"] else "below")
            out.print(f"  {r['name']}: {r['cycle_ms']:.2f} ms x {r['baseline_tok_s']:.1f} tok/s -> "
                      f"needs {r['break_even']:.2f}, measured {_f(r['accept_length'], '{:.2f}')}: "
                      f"{verdict} {r['baseline']}")
    pr = a.get("predicted")
    if pr and pr["rows"]:
        out.print(f"Predicted from one run ({pr['from']}) beside measured:")
        out.print("  steps  kind       pred AL  pred tok/s  model tok/s  meas AL  meas tok/s")
        for r in pr["rows"]:
            out.print(f"  {r['steps']:>5}  {r['kind']:<9} {r['pred_accept_length']:>8.2f}  "
                      f"{r['pred_tok_s']:>10.1f}  {_f(r.get('model_tok_s')):>11}  "
                      f"{_f(r['meas_accept_length'], '{:.2f}'):>7}  {_f(r['meas_tok_s']):>10}")
        out.print("  (pred: this one run's phases; model: the cost-model fit over every config, which "
                  "the recommendation and best k use)")
    if a.get("best_k") is not None:
        out.print(f"Predicted best k (cost model + measured acceptance): {a['best_k']}")
    for n in a.get("notes", []):
        out.print(f"[dim]note: {n}[/]")
    out.print(f"[bold]Recommendation:[/] {a['recommendation']}")


def print_tiers(t: dict[str, Any]) -> None:
    """Steps x concurrency: per-stream tok/s per cell (measured; * = predicted), best per tier."""
    from rich.table import Table

    meas = {(r["steps"], r["batch_size"]): r["per_stream_tok_s"] for r in t["measured"]}
    pred = {(r["steps"], r["batch_size"]): r["per_stream_tok_s"] for r in t["predicted"]}
    steps = sorted({k for k, _ in meas} | {k for k, _ in pred})
    tab = Table(title="per-stream decode tok/s by concurrency (batch size) and steps (0 = no-spec); "
                      "* = predicted (cost model)", title_justify="left")
    tab.add_column("batch size", justify="right")
    for k in steps:
        tab.add_column(f"steps {k}", justify="right")
    tab.add_column("best", justify="right")
    tab.add_column("spec vs no-spec", justify="right")
    for r in t["recommendation"]:
        b = r["batch_size"]
        cells = []
        for k in steps:
            v, star = meas.get((k, b)), ""
            if v is None and (k, b) in pred:
                v, star = pred[(k, b)], "*"
            cells.append("-" if v is None else f"{v:.1f}{star}")
        g = r["gain_pct"]
        tab.add_row(str(b), *cells, f"{r['best_steps']}{'' if r['source'] == 'measured' else '*'}",
                    "-" if g is None else f"{g:+.1f}%")
    out.print(tab)
    cm = t.get("cost_model")
    if cm:
        out.print(f"Cost model over tokens in flight (probes, steady cycles): verify ms = {cm['verify_ms']} "
                  f"(RMS {cm['verify_fit']['rms_ms']:.2f} ms, {cm['verify_fit']['n']} points); draft ms/step = "
                  f"{cm['draft_ms_per_step']}", highlight=False)
    for n in t.get("notes", []):
        out.print(f"[dim]note: {n}[/]")
    out.print(f"[bold]Per tier:[/] {t['sentence']}")


def run(args: argparse.Namespace) -> int:
    from ..tune import sweep

    if args.report:
        out_dir = Path(args.report)
        from ..documents import scan_doc

        if scan_doc.is_scan(out_dir) and not (out_dir / "results.json").exists():
            return _report_scan(out_dir, Path(args.out) if args.out else None)
        doc = sweep.load_results(out_dir / "results.json")
        if doc is None:
            raise UserError(f"{out_dir}: no results.json (not a sweep output folder)", exit_code=2)
        # summaries follow the current reading rules (warm-up window, the bench's batch size)
        sweep.refresh_profiles(doc, out_dir)
        dest = Path(args.out) if args.out else None
        if dest is not None and dest.resolve() == out_dir.resolve():
            raise UserError(f"--out {dest} is the folder --report reads: give another folder", exit_code=2)
        if dest is None:
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                rc = _report(doc, Path(tmp), no_plots=True, scratch=True)
            out.print(f"nothing written ({out_dir} is only read); --out DIR writes results.json, "
                      "table.md and plots there", highlight=False, markup=False)
            return rc
        from ..documents.outputs import check_folder

        check_folder(dest)
        return _report(doc, dest, args.no_plots)
    if not args.sweep_file:
        raise UserError("give a SWEEP.yaml (or --report DIR)", exit_code=2)
    spec = sweep.load_spec(args.sweep_file)
    out_dir = Path(args.out or f"sweep-{sweep._slug(spec.name)}")
    out.print(f"Sweep {spec.name}: {len(spec.configs)} config(s) -> {out_dir}")
    for s in spec.skipped:
        out.print(f"  skipped {s['name']}: {s['reason']}")
    if len(spec.concurrency) > 1:
        out.print(f"  each config benched at concurrency {', '.join(map(str, spec.concurrency))}")
    if args.plan:
        for c in spec.configs:
            out.print(f"  {c.name}")
        return 0
    from ..serve.stepenv import command_notes, refuse_exported

    refuse_exported("sweep")  # before any server: every config would run the exported schedule / policy
    for note in command_notes("sweep"):  # our NCCL / probe variables: not passed to its servers
        err.print(f"note: {note}", highlight=False, markup=False)
    sweep.check_paths(spec)  # a missing model folder: one line here, not one failure per config
    if (out_dir / "results.json").exists() and not args.resume:
        raise UserError(f"{out_dir / 'results.json'} exists: pass --resume to continue it, or another --out",
                        exit_code=2)
    from ..documents.outputs import check_destination, check_folder

    check_folder(out_dir)  # before any server starts: a bad --out is one line, exit 2
    check_destination(out_dir / "results.json", what="results file")
    from ..serve.interrupts import as_interrupt

    try:
        with as_interrupt():  # SIGTERM/SIGHUP: the config in flight is stopped and saved, like Ctrl-C
            doc = sweep.run_sweep(spec, out_dir, resume=args.resume, sglang_root=args.sglang_root,
                                  log=lambda m: err.print(m, highlight=False, markup=False))
    except KeyboardInterrupt:
        err.print("sweep interrupted: its server stopped, results.json saved; `--resume` continues",
                  highlight=False, markup=False)
        raise
    return _report(doc, out_dir, args.no_plots)


def _report_scan(src: Path, dest: Path | None) -> int:
    """--report of a scan folder (or its scan.json): the scan's tables again; --out writes
    scan.json and table.md there, src is only read."""
    from ..documents import scan_doc
    from ..documents.jsonio import write_json
    from .scan import render

    doc = scan_doc.load(src)
    render(doc)
    if dest is None:
        out.print(f"nothing written ({src} is only read); --out DIR writes scan.json and table.md there",
                  highlight=False, markup=False)
        return 0
    if dest.resolve() == (src if src.is_dir() else src.parent).resolve():
        raise UserError(f"--out {dest} is the folder --report reads: give another folder", exit_code=2)
    dest.mkdir(parents=True, exist_ok=True)
    write_json(dest / "scan.json", doc)
    (dest / "table.md").write_text(scan_doc.markdown(doc) + "\n")
    out.print(f"wrote {dest / 'scan.json'}, {dest / 'table.md'}", highlight=False, markup=False)
    return 0


def _report(doc: dict[str, Any], out_dir: Path, no_plots: bool, scratch: bool = False) -> int:
    """Failures, the comparison table, the analysis and the plots of one sweep document.
    ``scratch``: out_dir is a temporary folder (report only): its files are not announced."""
    from ..documents.jsonio import write_json
    from ..documents.outputs import WriteFailed, report_unwritten, write_atomic
    from ..measure import compare
    from ..tune import sweep

    failed = [c for c in doc["configs"] if c["status"] != "ok"]
    for c in failed:
        out.print(f"[red]failed[/] {c['name']}: {c['error']}")
        for line in (c.get("log_tail") or [])[-5:]:
            out.print(f"    {line}", highlight=False, markup=False)
    write_json(out_dir / "results.json", doc)
    try:
        rs = compare.rows(compare.load([str(out_dir / "results.json")]))
    except UserError:
        rs = []
    if rs:
        out.print(rich_table(rs))
        write_atomic(out_dir / "table.md", compare.markdown(rs) + "\n", what="table")
    from ..tune import tiers

    analysis = sweep.analyse(doc)
    analysis["tiers"] = tiers.analyse(doc, out_dir)
    from ..tune import treeverdict

    analysis["trees"] = treeverdict.verdict(doc, out_dir)
    doc["analysis"] = analysis
    try:
        write_json(out_dir / "results.json", doc)
    except WriteFailed as exc:  # the whole document on stdout: nothing measured is lost
        report_unwritten(exc, json.dumps(doc, indent=2, default=str))
        return 1
    print_analysis(analysis)
    if analysis["tiers"]:
        print_tiers(analysis["tiers"])
    if analysis["trees"]:
        for line in treeverdict.lines(analysis["trees"]):
            out.print(line, highlight=False, markup=False)
    if not no_plots and rs:
        from ..measure import plot

        try:
            for p in plot.plots(doc, out_dir):
                out.print(f"wrote {p}")
            ladders = [dict(c["ladder"], label=c["name"], baseline=bool(c.get("baseline"))) for c in doc["configs"]
                       if c.get("status") == "ok" and c.get("ladder")]
            if ladders:
                out.print(f"wrote {plot.plot_ladders(ladders, out_dir / 'ladder.png')}")
        except UserError as exc:
            err.print(f"[yellow]plots skipped:[/] {exc}")
    if not scratch:
        out.print(f"wrote {out_dir / 'results.json'}" + (f", {out_dir / 'table.md'}" if rs else ""))
    return 0 if not failed else 1
