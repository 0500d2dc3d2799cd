"""`sgl-eagle3 profile FILE...`: the steady-state phase table, the cost of request boundaries,
per-batch-size figures, break-even, prediction from one run, and agreement with the client's
numbers (--bench)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import analysis, profile_log
from ..console import clean, err, out, plain, print_json
from ..errors import UserError
from ..probes.window import CYCLE, CYCLE_LABEL, LABELS

HELP = "Read probe JSONL / server logs with EAGLE3_PROF blocks: phase table, break-even, --predict."

_LABELS = tuple(LABELS.items())  # (phase, label), the block's order (probes/window.py)
_MAX_NOTES = 4


def add_arguments(p: argparse.ArgumentParser) -> None:
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
                   help="the client's result of the same run (sgl-eagle3 bench JSON, or SGLang "
                        "bench_serving --output-file JSON/JSONL): decode tok/s and accept length side by side")


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

    t = Table(title="EAGLE-3 decode cycle, steady state (accept length incl. the bonus token)", show_lines=False)
    t.add_column("", no_wrap=True)
    names = [Path(s["file"]).name for s in summaries]
    unique = len(set(names)) == len(names)
    for s, name in zip(summaries, names, strict=True):
        t.add_column(plain(name if unique else s["file"]), justify="right", overflow="fold")

    def row(label: str, fn) -> None:
        t.add_row(label, *[plain(fn(s)) for s in summaries])

    row("source", lambda s: f"{s['kind']}, {s['windows']} window(s)" + (" [legacy, converted]" if s["legacy"] else ""))
    row("timing mode", lambda s: s["mode"])
    row("steps / topk / draft tokens",
        lambda s: " / ".join("?" if s["spec"][k] is None else str(s["spec"][k])
                             for k in ("steps", "topk", "draft_tokens")))
    row("SGLang", lambda s: s["sglang_version"] or "?")
    row("cycles", lambda s: "?" if s["cycles"] is None else str(s["cycles"]))
    row("phases below are", _basis)
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
    row("Eff tok/s (per stream)", lambda s: _fmt(s["eff_tok_s"], ".1f"))
    if any(s["basis"] == "steady" for s in summaries):
        row("all cycles: cycle / eff tok/s", lambda s: f"{_fmt(s['all_cycles']['phases']['cycle']['mean_ms'])} ms / "
            f"{_fmt(s['all_cycles']['eff_tok_s'], '.1f')}")
    if any(s.get("probe_read_us_per_cycle") is not None for s in summaries):
        row("Probe read cost", lambda s: "n/a" if s.get("probe_read_us_per_cycle") is None
            else f"{s['probe_read_us_per_cycle']:.1f} us/cycle")
    if baseline_tps is not None:
        row(f"Break-even accept len @ {baseline_tps:g} tok/s", lambda s: _fmt(s.get("break_even_accept_len")))
        row("Margin (accept len)", lambda s: _fmt(s.get("margin_accept_len"), "+.2f"))
        row("vs baseline", lambda s: "n/a" if s.get("vs_baseline_pct") is None else f"{s['vs_baseline_pct']:+.1f}%")
    return t


def _basis(s: dict[str, Any]) -> str:
    st = s.get("steady")
    if s["basis"] == "steady":
        return f"{st['cycles']} steady cycles"
    return "all cycles (no steady split)" if st is None else "all cycles (no steady cycle)"


def _boundary_table(summaries: list[dict[str, Any]]):
    """What request boundaries cost, apart from the steady table (one column per file)."""
    from rich.table import Table

    have = [s for s in summaries if s.get("boundary")]
    if not have:
        return None
    t = Table(title="Request boundaries (cycles next to a join/leave, prefill/extend, batch change, idle gap)")
    t.add_column("", no_wrap=True)
    for s in have:
        t.add_column(plain(Path(s["file"]).name), justify="right", overflow="fold")

    def row(label: str, fn) -> None:
        t.add_row(label, *[plain(fn(s["boundary"], s)) for s in have])

    row("boundary cycles", lambda b, s: f"{b['cycles']} of {s['cycles']}")
    row("reasons (cycles)", lambda b, s: ", ".join(f"{k} {v}" for k, v in b["reasons"].items() if v) or "-")
    row("extra ms over steady p50", lambda b, s: _fmt(b.get("extra_ms")))
    row("joins (prefill/extend)", lambda b, s: str(b.get("joins") or 0))
    row("ms per join", lambda b, s: _fmt(b.get("extra_ms_per_join")))
    row("made of (extra ms)", lambda b, s: ", ".join(
        f"{k} {v:.2f}" for k, v in (b.get("extra_by_phase") or {}).items() if v) or "-")
    return t


def _batch_table(summaries: list[dict[str, Any]]):
    from rich.table import Table

    t = Table(title="Steady cycles by batch size")
    for c in ("file", "batch", "cycles", "accept len", "cycle ms (p50)", "tok/s per stream", "tok/s total"):
        t.add_column(c, justify="left" if c == "file" else "right")
    for s in summaries:
        for bs, v in (s.get("by_batch") or {}).items():
            cyc = (v.get("phases") or {}).get("cycle") or {}
            t.add_row(plain(Path(s["file"]).name), bs, str(v["cycles"]), _fmt(v.get("accept_len"), ".3f"),
                      f"{_fmt(cyc.get('mean_ms'))} ({_fmt(cyc.get('p50_ms'))})",
                      _fmt(v.get("per_stream_tok_s"), ".1f"), _fmt(v.get("throughput_tok_s"), ".1f"))
    return t if t.row_count else None


def _agreement_table(s: dict[str, Any], a: dict[str, Any]):
    from rich.table import Table

    c = a["client"]
    t = Table(title=plain(f"Profile vs client ({c['kind']}: {Path(c['file']).name})"))
    for col in ("", "profile", "client", "difference"):
        t.add_column(col, justify="right" if col else "left")

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{v:+.1f}%"

    d, al = a["decode_tok_s"], a["accept_len"]
    t.add_row(f"decode tok/s per stream ({a['basis']} cycles)", _fmt(d["profile"], ".1f"),
              _fmt(d["client"], ".1f"), pct(d["diff_pct"]))
    if a["basis"] == "steady":  # (a batch-matched comparison has no all-cycles twin)
        ac = a["all_cycles_decode_tok_s"]
        t.add_row("decode tok/s per stream (all cycles)", _fmt(ac["profile"], ".1f"), _fmt(d["client"], ".1f"),
                  pct(ac["diff_pct"]))
    t.add_row("accept len (incl. bonus; every verify)", _fmt(al["profile"], ".3f"), _fmt(al["client"], ".3f"),
              pct(al["diff_pct"]))
    t.caption = plain(f"client decode rate: {c['decode_def']}; profile: {a.get('windows', 'every window')}")
    return t


def _rank_groups(files: list[str]) -> list[list[str]]:
    """Files of one run's TP ranks together: every FILE plus its ``.rankN`` siblings, grouped by
    the EAGLE3_PROFILE_OUT path they share; rank 0 (the path itself) first."""
    groups: dict[str, list[str]] = {}
    for f in files:
        base, _ = profile_log.rank_base(f)
        g = groups.setdefault(base, [])
        rank0 = [base] if Path(base).is_file() else []
        for q in [*rank0, f, *map(str, profile_log.rank_siblings(f))]:
            if q not in g:
                g.append(q)
    return [sorted(g, key=lambda q: (profile_log.rank_base(q)[1] or 0, q)) for g in groups.values()]


def _load_group(group: list[str], named: set[str]) -> tuple[list[profile_log.ProfileRun], list[str]]:
    """Every stream of one run. A ``.rankN`` sibling found beside a named file (not named itself)
    that cannot be read (a stray, unreadable or half-written file) is skipped with a note; the
    named files must read."""
    loaded: list[profile_log.ProfileRun] = []
    skipped: list[str] = []
    for f in group:
        if f in named:
            loaded.append(profile_log.load(f))
            continue
        if not Path(f).is_file():  # a folder; a FIFO would block the read for ever
            skipped.append(f"rank sibling skipped: {f}: not a regular file")
            continue
        try:
            loaded.append(profile_log.load(f))
        except UserError as exc:
            skipped.append(f"rank sibling skipped: {exc}")
    return loaded, skipped


def _rank_table(base: str, spread: dict[str, Any]):
    from rich.table import Table

    stat = "p50" if spread["stat"] == "p50_ms" else "mean"
    t = Table(title=plain(f"Per-rank phase {stat} ({spread['basis']} cycles): {Path(base).name} and its .rankN streams"))
    t.add_column("phase", no_wrap=True)
    for r in spread["ranks"]:
        t.add_column(f"rank {r}", justify="right")
    t.add_column("spread", justify="right")
    t.add_column("slowest", justify="right")
    for key, label in (*_LABELS, (CYCLE, CYCLE_LABEL)):
        ph = spread["phases"].get(key)
        if not ph:
            continue
        t.add_row(label, *[_fmt(ph["by_rank"].get(str(r))) for r in spread["ranks"]],
                  f"{ph['spread_ms']:.2f} ms" + ("" if ph["spread_pct"] is None else f" ({ph['spread_pct']:.1f}%)"),
                  f"rank {ph['slowest_rank']}" if ph["spread_ms"] > 0 else "-")
    t.caption = f"slowest rank: {spread['slowest_rank']} (highest cycle {stat})"
    return t


def _predict_table(s: dict[str, Any], preds: list[analysis.Prediction]):
    from rich.table import Table

    t = Table(title=plain(f"Prediction from {s['file']} ({s['basis']} cycles; topk 1 chain; accept len incl. bonus; "
                          f"verify+extend+other held flat, draft ms per step x steps)"))
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
    summaries = []
    ranks: dict[str, Any] = {}
    runs: list[profile_log.ProfileRun] = []
    named = set(args.files)
    for group in _rank_groups(args.files):
        loaded, skipped = _load_group(group, named)
        runs.append(loaded[0])
        per = [profile_log.summarize(r, all_windows=args.all_windows) for r in loaded]
        per[0]["notes"].extend(skipped)
        summaries.append(_with_baseline(per[0], args.baseline_tps))  # the table shows rank 0's stream
        spread = profile_log.rank_spread(per)
        if spread:
            ranks[profile_log.rank_base(group[0])[0]] = spread
    step_ms = args.baseline_step_ms or (1000.0 / args.baseline_tps if args.baseline_tps else None)
    predictions: dict[str, Any] = {}
    if args.predict:
        for s in summaries:
            try:
                preds = analysis.predict_from_run(s, step_ms)
            except UserError as exc:
                raise UserError(f"{s['file']}: {exc}", exit_code=exc.exit_code) from None
            predictions[s["file"]] = {"rows": preds, "recommendation": analysis.recommend(preds)}
    agree: dict[str, Any] = {}
    if args.bench:
        client = profile_log.read_client(args.bench)
        for s in summaries:
            run = next((r for r in runs if r.path == s["file"]), None)
            aligned = profile_log.aligned_run(run, client) if run is not None else None
            # windows written while the bench ran, when the times line up; else the whole file
            basis = profile_log.summarize(aligned, all_windows=args.all_windows) if aligned is not None else s
            agree[s["file"]] = profile_log.agreement(basis, client)
            agree[s["file"]]["windows"] = (aligned.notes[0] if aligned is not None
                                           else "every window of the file (no time overlap found)")

    if args.json:
        print_json({
            "accept_len_def": "tokens per request per verify cycle, incl. the bonus token",
            "baseline_tok_s": args.baseline_tps,
            "files": summaries,
            "predictions": {f: {"rows": [p.to_dict() for p in v["rows"]],
                                "recommendation": v["recommendation"],
                                "baseline_step_ms": step_ms}
                            for f, v in predictions.items()},
            "agreement": agree,
            "ranks": ranks,
        })
        return 0

    out.print(_table(summaries, args.baseline_tps))
    for extra in (_boundary_table(summaries), _batch_table(summaries)):
        if extra is not None:
            out.print(extra)
    for base, spread in ranks.items():
        out.print(_rank_table(base, spread))
    for s in summaries:
        if s["file"] in agree:
            out.print(_agreement_table(s, agree[s["file"]]))
    for s in summaries:
        notes = s["notes"]
        for n in notes[:_MAX_NOTES]:
            err.print(f"note: {clean(n)}", highlight=False, markup=False)
        if len(notes) > _MAX_NOTES:
            err.print(f"note: ... and {len(notes) - _MAX_NOTES} more for {clean(s['file'])} (see --json)",
                      highlight=False, markup=False)
    for s in summaries:
        if s["file"] in predictions:
            v = predictions[s["file"]]
            out.print(_predict_table(s, v["rows"]))
            out.print(v["recommendation"], highlight=False, markup=False)
    return 0
