"""`sgl-eagle3 profile FILE...`: the steady-state phase table, the cost of request boundaries,
per-batch-size figures, break-even, prediction from one run, and agreement with the client's
numbers (--bench)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..documents import prof_records
from ..measure import accounting, analysis, client_twin, policy_report
from ..runtime.errors import UserError
from .console import clean, err, out, print_json
from .profile_tables import (
    _agreement_table,
    _batch_table,
    _boundary_table,
    _choices_table,
    _key_summaries,
    _key_table,
    _ladder_agreement_table,
    _mix,
    _policy_table,
    _predict_table,
    _rank_table,
    _table,
)

HELP = "Read probe JSONL / server logs with EAGLE3_PROF blocks: phase table, break-even, --predict."

EPILOG = """\
What the figures are made of:
  Phases, accept length and tok/s are over STEADY decode cycles. A BOUNDARY cycle is one next to
  a request joining or leaving the batch, a prefill/extend forward, a batch-size change, an idle
  gap, or a step-count switch (SGLang's adaptive mode, or a scan's hold schedule); boundary cycles
  are counted and costed in their own table, not mixed into the steady figures.
  One key = one (steps, topk, draft tokens, batch size, CUDA graph or eager). Where a file holds
  more than one key (a ladder, a scan, SGLang's adaptive mode), the headline says it is a mix and
  the per-key table gives each key's own figures; break-even and --predict are given per key.
  tok/s per stream = accept length x 1000 / mean cycle ms of those cycles (the probes' figure; the
  client's twin comes with --bench).
--bench takes our bench JSON, a ladder (bench --concurrency 1,8,32, or a scan's ladder.json:
  every level compared with the windows written while it ran), or SGLang bench_serving output.
"""
_MAX_NOTES = 4


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="eagle3_prof JSONL (EAGLE3_PROFILE_OUT; its .rankN siblings are found too) "
                        "or a server log with EAGLE3_PROF blocks")
    p.add_argument("--baseline-tps", type=float, metavar="X",
                   help="no-spec decode tok/s of the same server: adds break-even accept length and margin")
    p.add_argument("--baseline-step-ms", type=float, metavar="MS",
                   help="no-spec decode step time for --predict (default: 1000 / --baseline-tps)")
    p.add_argument("--predict", action="store_true",
                   help="predict accept length, cycle ms and tok/s for fewer steps from one topk-1 run")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--all-windows", action="store_true",
                   help="keep window 1 (the process's warm-up cycles) in the summary")
    p.add_argument("--bench", metavar="BENCH.json",
                   help="the client's result of the same run (sgl-eagle3 bench JSON, a ladder JSON "
                        "(every level compared), or SGLang bench_serving --output-file JSON/JSONL): "
                        "decode tok/s and accept length side by side")


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


def _agree(s: dict[str, Any], run: Any, client: dict[str, Any], all_windows: bool) -> dict[str, Any]:
    """Profile vs one client result: the windows written while it ran (when the times line up;
    else the whole file), like with like (its batch size when the records split by batch)."""
    aligned = client_twin.aligned_run(run, client) if run is not None else None
    if client.get("open_loop") and run is not None:  # every decode cycle in the span, request-weighted
        a = client_twin.open_loop_agreement(aligned if aligned is not None else run, client)
        a["windows"] = (aligned.notes[0] if aligned is not None else "every window of the file (no time overlap found)")
        a["cold_start"] = client_twin.cold_start(aligned)
        return a
    basis = accounting.summarize(aligned, all_windows=all_windows) if aligned is not None else s
    a = client_twin.agreement(basis, client)
    a["windows"] = (aligned.notes[0] if aligned is not None else "every window of the file (no time overlap found)")
    recs = (aligned or run).records if run is not None else []
    if not all_windows:  # as summarize: each process's window 1 is its warm-up
        from ..documents.prof_records import warmup_windows

        starts = set(warmup_windows(recs))
        recs = [r for i, r in enumerate(recs) if i not in starts]
    conc = client.get("concurrency")
    a["interval"] = accounting.window_intervals(recs, conc if a.get("basis", "").startswith("steady batch-") else None)
    return a


def _rank_groups(files: list[str]) -> list[list[str]]:
    """Files of one run's TP ranks together: every FILE plus its ``.rankN`` siblings, grouped by
    the EAGLE3_PROFILE_OUT path they share; rank 0 (the path itself) first."""
    groups: dict[str, list[str]] = {}
    for f in files:
        base, _ = prof_records.rank_base(f)
        g = groups.setdefault(base, [])
        rank0 = [base] if Path(base).is_file() else []
        for q in [*rank0, f, *map(str, prof_records.rank_siblings(f))]:
            if q not in g:
                g.append(q)
    return [sorted(g, key=lambda q: (prof_records.rank_base(q)[1] or 0, q)) for g in groups.values()]


def _load_group(group: list[str], named: set[str]) -> tuple[list[prof_records.ProfileRun], list[str]]:
    """Every stream of one run. A ``.rankN`` sibling found beside a named file (not named itself)
    that cannot be read (a stray, unreadable or half-written file) is skipped with a note; the
    named files must read."""
    loaded: list[prof_records.ProfileRun] = []
    skipped: list[str] = []
    for f in group:
        if f in named:
            loaded.append(prof_records.load(f))
            continue
        if not Path(f).is_file():  # a folder; a FIFO would block the read for ever
            skipped.append(f"rank sibling skipped: {f}: not a regular file")
            continue
        try:
            loaded.append(prof_records.load(f))
        except UserError as exc:
            skipped.append(f"rank sibling skipped: {exc}")
    return loaded, skipped


def run(args: argparse.Namespace) -> int:
    if args.baseline_tps is not None and args.baseline_tps <= 0:
        raise UserError(f"--baseline-tps must be positive (got {args.baseline_tps:g})", exit_code=2)
    if args.baseline_step_ms is not None and args.baseline_step_ms <= 0:
        raise UserError(f"--baseline-step-ms must be positive (got {args.baseline_step_ms:g})", exit_code=2)
    summaries = []
    ranks: dict[str, Any] = {}
    runs: list[prof_records.ProfileRun] = []
    named = set(args.files)
    for group in _rank_groups(args.files):
        loaded, skipped = _load_group(group, named)
        runs.append(loaded[0])
        per = [accounting.summarize(r, all_windows=args.all_windows) for r in loaded]
        per[0]["notes"].extend(skipped)
        summaries.append(_with_baseline(per[0], args.baseline_tps))  # the table shows rank 0's stream
        spread = client_twin.rank_spread(per)
        if spread:
            ranks[prof_records.rank_base(group[0])[0]] = spread
    step_ms = args.baseline_step_ms or (1000.0 / args.baseline_tps if args.baseline_tps else None)
    predictions: dict[str, Any] = {}
    if args.predict:
        for s in summaries:
            for ks in _key_summaries(s):
                try:
                    preds = analysis.predict_from_run(ks, step_ms, ks.get("accept_len") if ks.get("pooled") else None)
                except UserError as exc:
                    where = f"{s['file']}" + (f" key {ks['key']}" if ks.get("key") else "")
                    raise UserError(f"{where}: {exc}", exit_code=exc.exit_code) from None
                name = s["file"] + (f" [{ks['key']}]" if ks.get("key") and _mix(s) else "")
                check = analysis.model_check(ks.get("per_position") or [], ks.get("measured") or {})
                predictions[name] = {"rows": preds, "recommendation": analysis.recommend(preds), "summary": ks,
                                     "key": ks.get("key"), "check": check}
    agree: dict[str, Any] = {}
    if args.bench:
        client = client_twin.read_client(args.bench)
        for s in summaries:
            run = next((r for r in runs if r.path == s["file"]), None)
            if "levels" in client:  # a ladder: every level against the windows of its own span
                agree[s["file"]] = {"ladder": [_agree(s, run, lv, args.all_windows) for lv in client["levels"]],
                                    "client": {k: v for k, v in client.items() if k != "levels"}}
            else:
                agree[s["file"]] = _agree(s, run, client, args.all_windows)

    if args.json:
        print_json({
            "accept_len_def": "tokens per request per verify cycle, incl. the bonus token",
            "baseline_tok_s": args.baseline_tps,
            "files": summaries,
            "predictions": {f: {"rows": [p.to_dict() for p in v["rows"]],
                                "recommendation": v["recommendation"], "key": v["key"],
                                "baseline_step_ms": step_ms, "model_check": v["check"]}
                            for f, v in predictions.items()},
            "agreement": agree,
            "ranks": ranks,
        })
        return 0

    out.print(_table(summaries, args.baseline_tps))
    for extra in (_boundary_table(summaries), _batch_table(summaries, args.baseline_tps), _choices_table(summaries),
                  _key_table(summaries, args.baseline_tps)):
        if extra is not None:
            out.print(extra)
    if (pt := _policy_table(summaries)) is not None:  # issue 25: what the policy chose and got
        out.print(pt)
        for s in summaries:  # issue 33: the table's costs are not this traffic's
            if (hint := policy_report.calibration_hint(s)) is not None:
                err.print(f"note: {clean(hint)}", highlight=False, markup=False)
    for base, spread in ranks.items():
        out.print(_rank_table(base, spread))
    for s in summaries:
        if s["file"] in agree:
            a = agree[s["file"]]
            out.print(_ladder_agreement_table(s, a) if "ladder" in a else _agreement_table(s, a))
            for lv in a.get("ladder") or [a]:
                if lv.get("cold_start"):
                    rate = lv["client"].get("request_rate")
                    where = f"rate {rate}/s" if rate is not None else Path(s["file"]).name
                    err.print(f"warning: {clean(client_twin.cold_note(lv['cold_start'], where))}",
                              highlight=False, markup=False)
    for s in summaries:
        notes = s["notes"]
        for n in notes[:_MAX_NOTES]:
            err.print(f"note: {clean(n)}", highlight=False, markup=False)
        if len(notes) > _MAX_NOTES:
            err.print(f"note: ... and {len(notes) - _MAX_NOTES} more for {clean(s['file'])} (see --json)",
                      highlight=False, markup=False)
    for v in predictions.values():
        out.print(_predict_table(v["summary"], v["rows"], v["check"]))
        out.print(v["recommendation"], highlight=False, markup=False)
    return 0
