"""`sgl-eagle3 profile FILE...`: phase tables, accept length, break-even, and prediction from one run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import analysis, profile_log
from ..console import err, out, print_json
from ..errors import UserError

HELP = "Read probe JSONL / server logs with EAGLE3_PROF blocks: phase table, break-even, --predict."

_LABELS = (
    ("draft", "Draft steps"),
    ("verify", "Target verify"),
    ("extend", "Draft re-extend"),
    ("other", "Other overhead"),
)
_MAX_NOTES = 4


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="eagle3_prof/1 JSONL (EAGLE3_PROFILE_OUT) or a server log with EAGLE3_PROF blocks")
    p.add_argument("--baseline-tps", type=float, metavar="X",
                   help="no-spec decode tok/s of the same server: adds break-even accept length and margin")
    p.add_argument("--baseline-step-ms", type=float, metavar="MS",
                   help="no-spec decode step time for --predict (default: 1000 / --baseline-tps)")
    p.add_argument("--predict", action="store_true",
                   help="predict accept length, cycle ms and tok/s for fewer steps from one topk-1 run")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--all-windows", action="store_true",
                   help="keep window 1 (the process's warm-up cycles) in the summary")


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "n/a" if v is None else format(v, spec)


def _with_baseline(s: dict[str, Any], baseline_tps: float | None) -> dict[str, Any]:
    cycle = s["phases"]["cycle"]["mean_ms"]
    if baseline_tps is None or not cycle:
        return s
    be = analysis.break_even_accept_len(cycle, baseline_tps)
    s["baseline_tok_s"] = baseline_tps
    s["break_even_accept_len"] = round(be, 4)
    if s["accept_len"] is not None:
        s["margin_accept_len"] = round(s["accept_len"] - be, 4)
        s["vs_baseline_pct"] = round((s["eff_tok_s"] / baseline_tps - 1.0) * 100.0, 2)
    return s


def _table(summaries: list[dict[str, Any]], baseline_tps: float | None):
    from rich.table import Table

    t = Table(title="EAGLE-3 decode cycle (accept length incl. the bonus token)", show_lines=False)
    t.add_column("", no_wrap=True)
    names = [Path(s["file"]).name for s in summaries]
    unique = len(set(names)) == len(names)
    for s, name in zip(summaries, names, strict=True):
        t.add_column(name if unique else s["file"], justify="right", overflow="fold")

    def row(label: str, fn) -> None:
        t.add_row(label, *[fn(s) for s in summaries])

    row("source", lambda s: f"{s['kind']}, {s['windows']} window(s)" + (" [legacy, converted]" if s["legacy"] else ""))
    row("timing mode", lambda s: s["mode"])
    row("steps / topk / draft tokens",
        lambda s: " / ".join("?" if s["spec"][k] is None else str(s["spec"][k])
                             for k in ("steps", "topk", "draft_tokens")))
    row("SGLang", lambda s: s["sglang_version"] or "?")
    row("cycles", lambda s: "?" if s["cycles"] is None else str(s["cycles"]))
    for key, label in _LABELS:
        def cell(s: dict[str, Any], key: str = key) -> str:
            ms = s["phases"][key]["mean_ms"]
            total = s["phases"]["cycle"]["mean_ms"]
            if ms is None:
                return "n/a"
            return f"{ms:.2f} ms ({100 * ms / total:4.1f}%)" if total else f"{ms:.2f} ms"
        row(label, cell)
    row("TOTAL cycle", lambda s: f"{_fmt(s['phases']['cycle']['mean_ms'])} ms")
    row("Accept len (incl. bonus)", lambda s: _fmt(s["accept_len"], ".3f"))
    row("Accept by position (cond.)",
        lambda s: " ".join(_fmt(r) for r in s["per_position"]) if s["per_position"] else "n/a")
    row("Eff tok/s", lambda s: _fmt(s["eff_tok_s"], ".1f"))
    if any(s.get("probe_read_us_per_cycle") is not None for s in summaries):
        row("Probe read cost", lambda s: "n/a" if s.get("probe_read_us_per_cycle") is None
            else f"{s['probe_read_us_per_cycle']:.1f} us/cycle")
    if baseline_tps is not None:
        row(f"Break-even accept len @ {baseline_tps:g} tok/s", lambda s: _fmt(s.get("break_even_accept_len")))
        row("Margin (accept len)", lambda s: _fmt(s.get("margin_accept_len"), "+.2f"))
        row("vs baseline", lambda s: "n/a" if s.get("vs_baseline_pct") is None else f"{s['vs_baseline_pct']:+.1f}%")
    return t


def _predict_table(s: dict[str, Any], preds: list[analysis.Prediction]):
    from rich.table import Table

    t = Table(title=f"Prediction from {s['file']} (topk 1 chain; accept len incl. bonus; "
                    f"verify+extend+other held flat, draft ms per step x steps)")
    for c in ("steps", "draft tok", "accept len", "cycle ms", "tok/s", "vs base", "row"):
        t.add_column(c, justify="right")
    for p in preds:
        t.add_row(
            "no spec" if p.kind == "baseline" else str(p.steps),
            "-" if p.draft_tokens is None else str(p.draft_tokens),
            f"{p.accept_len:.3f}", f"{p.cycle_ms:.2f}", f"{p.tok_s:.1f}",
            "-" if p.vs_baseline_pct is None else f"{p.vs_baseline_pct:+.1f}%",
            p.kind,
        )
    return t


def run(args: argparse.Namespace) -> int:
    if args.baseline_tps is not None and args.baseline_tps <= 0:
        raise UserError(f"--baseline-tps must be positive (got {args.baseline_tps:g})", exit_code=2)
    if args.baseline_step_ms is not None and args.baseline_step_ms <= 0:
        raise UserError(f"--baseline-step-ms must be positive (got {args.baseline_step_ms:g})", exit_code=2)
    summaries = [_with_baseline(profile_log.summarize(profile_log.load(f), all_windows=args.all_windows), args.baseline_tps)
                 for f in args.files]
    step_ms = args.baseline_step_ms or (1000.0 / args.baseline_tps if args.baseline_tps else None)
    predictions: dict[str, Any] = {}
    if args.predict:
        for s in summaries:
            try:
                preds = analysis.predict_from_run(s, step_ms)
            except UserError as exc:
                raise UserError(f"{s['file']}: {exc}", exit_code=exc.exit_code) from None
            predictions[s["file"]] = {"rows": preds, "recommendation": analysis.recommend(preds)}

    if args.json:
        print_json({
            "accept_len_def": "tokens per request per verify cycle, incl. the bonus token",
            "baseline_tok_s": args.baseline_tps,
            "files": summaries,
            "predictions": {f: {"rows": [p.to_dict() for p in v["rows"]],
                                "recommendation": v["recommendation"],
                                "baseline_step_ms": step_ms}
                            for f, v in predictions.items()},
        })
        return 0

    out.print(_table(summaries, args.baseline_tps))
    for s in summaries:
        notes = s["notes"]
        for n in notes[:_MAX_NOTES]:
            err.print(f"note: {n}", highlight=False, markup=False)
        if len(notes) > _MAX_NOTES:
            err.print(f"note: ... and {len(notes) - _MAX_NOTES} more for {s['file']} (see --json)",
                      highlight=False, markup=False)
    for s in summaries:
        if s["file"] in predictions:
            v = predictions[s["file"]]
            out.print(_predict_table(s, v["rows"]))
            out.print(v["recommendation"], highlight=False, markup=False)
    return 0
