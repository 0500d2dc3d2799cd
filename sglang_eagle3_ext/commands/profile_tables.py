"""The tables `sgl-eagle3 profile` prints: phases, keys, boundaries, batch sizes, agreement with the client, ranks, predictions, the policy's choices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..measure import accounting, analysis, client_twin, policy_report
from ..runtime.probes.window import CYCLE, CYCLE_LABEL, LABELS, PHASES
from .console import plain

_LABELS = tuple(LABELS.items())  # (phase, label), the block's order (probes/window.py)


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "n/a" if v is None else format(v, spec)


def _versus_baseline(v: dict[str, Any], cyc: dict[str, Any], baseline_tps: float) -> list[str]:
    """Break-even accept length at the baseline's tok/s, this key's margin over it, tok/s ratio."""
    be = analysis.break_even_accept_len(cyc["mean_ms"], baseline_tps) if cyc.get("mean_ms") else None
    al, ps = v.get("accept_len"), v.get("per_stream_tok_s")
    return [_fmt(be), _fmt(al - be, "+.2f") if (al is not None and be is not None) else "n/a",
            f"{(ps / baseline_tps - 1) * 100:+.1f}%" if ps else "n/a"]


def _table(summaries: list[dict[str, Any]], baseline_tps: float | None):
    from rich.table import Table

    t = Table(title="EAGLE-3 decode cycle, steady state (accept length incl. the bonus token)", show_lines=False,
              caption="eff tok/s = accept len x 1000 / TOTAL cycle: the server's own timing of the cycles that "
                      "'phases below are' names. bench and compare give the client's decode tok/s (per request, "
                      "tokens after the first / time from the first token to the last), so the two need not "
                      "agree; `profile PROBES --bench BENCH.json` sets them side by side",
              caption_justify="left")
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
        lambda s: "several (one key per figure below)" if len(_keys(s)) > 1 else
        " / ".join("?" if s["spec"][k] is None else str(s["spec"][k]) for k in ("steps", "topk", "draft_tokens")))
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
        def per_key(fn):
            return lambda s: ("per key (table below)" if len(_keys(s)) > 1 else
                              "per batch size (table below)" if _mix(s) else fn(s))
        row(f"Break-even accept len @ {baseline_tps:g} tok/s", per_key(lambda s: _fmt(s.get("break_even_accept_len"))))
        row("Margin (accept len)", per_key(lambda s: _fmt(s.get("margin_accept_len"), "+.2f")))
        row("vs baseline", per_key(lambda s: "n/a" if s.get("vs_baseline_pct") is None
                                   else f"{s['vs_baseline_pct']:+.1f}%"))
    return t


def _key_table(summaries: list[dict[str, Any]], baseline_tps: float | None):
    """One row per key: its own steady cycles, phases, acceptance and tok/s (interval over blocks)."""
    from rich.table import Table

    rows = [(s, k, v) for s in summaries for k, v in _keys(s).items()]
    if not rows or all(len(_keys(s)) < 2 for s in summaries):
        return None
    # keys that ran but have no steady cycle: a row each, never dropped (issue 33)
    bare = [(s, k, kc) for s in summaries for k, kc in (s.get("key_cycles") or {}).items()
            if not kc.get("steady") and k not in _keys(s)]
    t = Table(title="Steady cycles by key (steps, topk, draft tokens, batch size, graph g / eager e): "
                    "each row is made of that key's own steady cycles")
    many = len(summaries) > 1
    cols = (["file"] if many else []) + ["key", "cycles (blocks)", "steady share", "draft", "verify", "extend", "other",
                                         "cycle ms (p50)", "accept len", "accept by position",
                                         "tok/s per stream [95% over blocks]", "tok/s total"]
    if baseline_tps is not None:
        cols += [f"break-even @ {baseline_tps:g}", "margin", "vs baseline"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("file", "key", "accept by position") else "right")
    for s, k, v in rows:
        ph = v.get("phases") or {}
        cyc = ph.get(CYCLE) or {}
        iv = accounting.block_intervals(v.get("parts") or [])["per_stream_tok_s"]
        share = v.get("steady_share")
        few = accounting.trust_note(v)
        cells = ([Path(s["file"]).name] if many else []) + [
            k + (" *" if few else ""), f"{v['cycles']} ({len(v.get('parts') or [])})",
            "n/a" if share is None else f"{share:.0%} of {v.get('all_cycles')}",
            *[_fmt((ph.get(p) or {}).get("mean_ms")) for p in PHASES],
            f"{_fmt(cyc.get('mean_ms'))} ({_fmt(cyc.get('p50_ms'))})", _fmt(v.get("accept_len"), ".3f"),
            " ".join(_fmt(r) for r in v.get("per_position") or []) or "-",
            _fmt(v.get("per_stream_tok_s"), ".1f") + _iv(iv, ".1f"),
            _fmt(v.get("throughput_tok_s"), ".1f")]
        if baseline_tps is not None:
            cells += _versus_baseline(v, cyc, baseline_tps)
        t.add_row(*cells)
    for s, k, kc in bare:
        t.add_row(*([Path(s["file"]).name] if many else []), k + " *", "0 (0)", f"0% of {kc['all']}",
                  *["n/a"] * (len(cols) - 3 - (1 if many else 0)))
    t.caption = ("tok/s per stream = accept len x 1000 / the key's mean steady cycle ms; interval: 95 % "
                 "Student-t over the key's hold blocks (jackknife of the pooled figure); steady share = the "
                 "key's steady cycles of all its cycles (a cycle at a new batch size is its new key's; one "
                 "next to a prefill, an idle gap or a step switch is a boundary); * = few steady cycles "
                 f"(< {accounting.FEW_CYCLES}), < {accounting.FEW_BLOCKS} hold blocks or a steady share "
                 "below 50 %: read with care; boundary cycles are in the table above")
    return t


def _key_summaries(s: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-key summaries for break-even / --predict: per batch size, the topk-1 key with the most
    steps (its per-position rates reach every shorter chain); the file itself when it is one key."""
    keys = _keys(s)
    bb = s.get("by_batch") or {}
    if not keys and len(bb) > 1 and s.get("per_position"):
        # older records (/2) of a ladder: the phases of each batch size's own steady cycles; the
        # per-position acceptance is the file's (it does not split by batch size), said in the title
        return [{"file": s["file"], "key": f"batch {k}", "basis": "steady", "phases": v["phases"],
                 "per_position": s["per_position"], "accept_len": v.get("accept_len"),
                 "eff_tok_s": v.get("per_stream_tok_s"), "spec": s.get("spec") or {},
                 "note": "per-position acceptance over every batch size of the file"}
                for k, v in bb.items() if v.get("phases")]
    if len(keys) < 2:
        return [dict(s, key=next(iter(keys), None), measured={})]
    best: dict[Any, tuple[str, dict[str, Any]]] = {}
    chains: dict[Any, list[dict[str, Any]]] = {}
    for k, v in keys.items():
        if v.get("topk") not in (None, 1) or not v.get("steps"):
            continue
        chains.setdefault(v.get("bs"), []).append(v)
        cur = best.get(v.get("bs"))
        if cur is None or v["steps"] > cur[1]["steps"]:
            best[v.get("bs")] = (k, v)
    out = []
    for b in sorted(best, key=lambda x: (x is None, x)):
        k, v = best[b]
        same = chains[b]
        pos = v.get("per_position") or []
        note = None
        if len(same) > 1:  # every cycle at this batch size that ran a position observed it (exact)
            pos = analysis.pooled_rates([(c["steps"], c.get("accept_hist") or {}) for c in same])
            note = (f"per-position acceptance pooled over the {len(same)} chains at batch {b} (steps "
                    f"{', '.join(str(c['steps']) for c in sorted(same, key=lambda c: c['steps']))})")
        out.append({"file": s["file"], "key": k, "basis": "steady", "phases": v["phases"],
                    "per_position": pos, "accept_len": v.get("accept_len"),
                    "eff_tok_s": v.get("per_stream_tok_s"), "note": note, "pooled": len(same) > 1,
                    "measured": {c["steps"]: c.get("accept_len") for c in same},
                    "spec": {"steps": v["steps"], "topk": v.get("topk"), "draft_tokens": v.get("draft_tokens")}})
    return out


def _basis(s: dict[str, Any]) -> str:
    st = s.get("steady")
    if s["basis"] == "steady":
        keys = _keys(s)
        mix = _mix(s)
        one = f" of one key {next(iter(keys))}" if len(keys) == 1 else ""
        per = "one key per figure below" if len(keys) > 1 else "figures per batch size below"
        return f"{st['cycles']} steady cycles{one}" + (f"; {mix}: {per}" if mix else "")
    return "all cycles (no steady split)" if st is None else "all cycles (no steady cycle)"


def _keys(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The file's configuration keys with steady cycles (eagle3_prof/3 by_key)."""
    return {k: v for k, v in (s.get("by_key") or {}).items() if v.get("cycles")}


def _mix(s: dict[str, Any]) -> str | None:
    """What the headline mixes, or None when it is one key (or one batch size of older records)."""
    keys = _keys(s)
    if len(keys) > 1:
        steps = sorted({v["steps"] for v in keys.values() if v.get("steps") is not None})
        bss = sorted({v["bs"] for v in keys.values() if v.get("bs") is not None})
        return (f"a MIX of {len(keys)} keys (steps {', '.join(map(str, steps))} x batch sizes "
                f"{', '.join(map(str, bss))})")
    bb = s.get("by_batch") or {}
    if not keys and len(bb) > 1:
        return f"a MIX of {len(bb)} batch sizes ({', '.join(bb)})"
    return None


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


def _batch_table(summaries: list[dict[str, Any]], baseline_tps: float | None = None):
    from rich.table import Table

    t = Table(title="Steady cycles by batch size (every step count that ran there together)")
    cols = ["file", "batch", "cycles", "accept len", "cycle ms (p50)", "tok/s per stream", "tok/s total"]
    if baseline_tps is not None:
        cols += [f"break-even @ {baseline_tps:g}", "margin", "vs baseline"]
    for c in cols:
        t.add_column(c, justify="left" if c == "file" else "right")
    for s in summaries:
        for bs, v in (s.get("by_batch") or {}).items():
            cyc = (v.get("phases") or {}).get("cycle") or {}
            cells = [plain(Path(s["file"]).name), bs, str(v["cycles"]), _fmt(v.get("accept_len"), ".3f"),
                     f"{_fmt(cyc.get('mean_ms'))} ({_fmt(cyc.get('p50_ms'))})",
                     _fmt(v.get("per_stream_tok_s"), ".1f"), _fmt(v.get("throughput_tok_s"), ".1f")]
            if baseline_tps is not None:
                cells += _versus_baseline(v, cyc, baseline_tps)
            t.add_row(*cells)
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
    iv = a.get("interval") or {}
    t.add_row(f"decode tok/s per stream ({a['basis']} cycles)", _fmt(d["profile"], ".1f"),
              _fmt(d["client"], ".1f"), pct(d["diff_pct"]))
    if a["basis"] == "steady":  # (a batch-matched comparison has no all-cycles twin)
        ac = a["all_cycles_decode_tok_s"]
        t.add_row("decode tok/s per stream (all cycles)", _fmt(ac["profile"], ".1f"), _fmt(d["client"], ".1f"),
                  pct(ac["diff_pct"]))
    t.add_row("accept len (incl. bonus; every verify)", _fmt(al["profile"], ".3f"),
              _fmt(al["client"], ".3f"), pct(al["diff_pct"]))
    spread = [f"{name}{_iv(iv.get(k), spec)}" for name, k, spec in (("tok/s", "per_stream_tok_s", ".1f"),
                                                                    ("accept len", "accept_len", ".3f")) if iv.get(k)]
    t.caption = plain(f"client decode rate: {c['decode_def']}; profile: {a.get('windows', 'every window')}"
                      + (f"; 95 % over its {iv['windows']} windows (what a figure of that many windows is worth): "
                         + ", ".join(spread) if spread else ""))
    return t


def _iv(iv: list[float] | None, spec: str) -> str:
    return f" [{iv[0]:{spec}}, {iv[1]:{spec}}]" if iv else ""


def _ladder_agreement_table(s: dict[str, Any], a: dict[str, Any]):
    from rich.table import Table

    c = a["client"]
    open_loop = any(lv["client"].get("open_loop") for lv in a["ladder"])
    t = Table(title=f"Profile vs client, every {'rate' if open_loop else 'level'} ({c['kind']}: {Path(c['file']).name})")
    for col in ("rate /s" if open_loop else "concurrency", "profile tok/s per stream", "client", "difference", "profile accept len",
                "client accept len", "difference", "profile cycles", "windows"):
        t.add_column(col, justify="left" if col in ("profile cycles", "windows") else "right")

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{v:+.1f}%"

    for lv in a["ladder"]:
        d, al = lv["decode_tok_s"], lv["accept_len"]
        lc = lv["client"]
        iv = lv.get("interval") or {}
        t.add_row(str(lc["request_rate"] if open_loop else lc.get("concurrency")),
                  _fmt(d["profile"], ".1f") + _iv(iv.get("per_stream_tok_s"), ".1f"),
                  _fmt(d["client"], ".1f"), pct(d["diff_pct"]),
                  _fmt(al["profile"], ".3f") + _iv(iv.get("accept_len"), ".3f"), _fmt(al["client"], ".3f"),
                  pct(al["diff_pct"]), str(lv["basis"]), lv["windows"])
    t.caption = (f"client decode rate: {c['decode_def']}; profile: the steady cycles at the level's batch size "
                 "(every step count the server ran there, like the client sees them); [95 % over the level's windows]: "
                 "what a figure of that many windows is worth (on one repeated text their edges cut requests)")
    if open_loop:
        t.caption = (f"client: {client_twin.OPEN_DECODE_DEF}; profile: {client_twin.PROBE_OPEN_DEF}; "
                     f"accept len (incl. bonus): client {a['ladder'][0]['client'].get('accept_def', '')}; "
                     "profile: tokens / verifies of the same cycles")
    return t


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


def _predict_table(s: dict[str, Any], preds: list[analysis.Prediction], check: list[dict[str, Any]] | None = None):
    from rich.table import Table

    which = (f"key {s['key']}" if s.get("key") else (_mix(s) or "the file")) + (f"; {s['note']}" if s.get("note") else "")
    t = Table(title=plain(f"Prediction from {s['file']}, {which} ({s['basis']} cycles; topk 1 chain; accept len incl. "
                          f"bonus; verify+extend+other held flat, draft ms per step x steps)"))
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
    t.caption = plain(_check_caption(check or []))
    return t


def _check_caption(check: list[dict[str, Any]]) -> str:
    """What the model is worth on this traffic: against every step count measured here, or, with
    only the one it came from, what it assumes and how far that went on one repeated text."""
    multi = check if len(check) > 1 else []  # one chain: its own rates give its own accept back exactly
    if multi:
        worst = max(multi, key=lambda c: abs(c["diff_pct"]))
        return ("per-position model against the step counts measured on this traffic: "
                + ", ".join(f"{c['steps']} steps {c['model_accept_len']:.3f} vs {c['measured_accept_len']:.3f} "
                            f"({c['diff_pct']:+.1f} %)" for c in multi)
                + f"; predicted rows carry that error (worst {worst['diff_pct']:+.1f} %)")
    return ("one step count measured: predicted rows assume a shorter chain's cycles start where this chain's "
            "did; on one repeated text (every request the same prompt at temperature 0) a chain's cycle starts "
            "depend on its step count, and the model was off by up to -4.4 % (CPU, tiny 8B chat path: 2 steps "
            "from 4 -2.8 %, 3 from 4 -4.4 %); over many prompts within ~1 % (docs/guide/profiling.md)")


def _choices_table(summaries: list[dict[str, Any]]):
    """Which step counts ran at which batch size (eagle3_prof/3 ``control.choices``, every decode
    cycle): what SGLang's own adaptive mode chose, or what a hold schedule ran. Shown when a file
    ran more than one step count."""
    from rich.table import Table

    have = [s for s in summaries if s.get("control") and any(
        len(v) > 1 for v in (s["control"].get("choices") or {}).values())]
    if not have:
        return None
    t = Table(title="Step counts run per batch size (decode cycles, steady and boundary)")
    for c in ("file", "decided by", "batch", "steps: cycles (share)"):
        t.add_column(c, justify="left" if c != "batch" else "right")
    for s in have:
        ctl = s["control"]
        who = ctl.get("decider") or "SGLang (its own adaptive rule, or fixed)"
        for bs, by in ctl["choices"].items():
            total = sum(by.values()) or 1
            t.add_row(Path(s["file"]).name, who, bs,
                      ", ".join(f"{k}: {n} ({100.0 * n / total:.0f}%)" for k, n in by.items()))
    return t


def _policy_table(summaries: list[dict[str, Any]]):
    """The ``profile`` table, or None when no file ran the policy."""
    from rich.table import Table

    have = [(s, policy_report.rows(s)) for s in summaries]
    have = [(s, r) for s, r in have if r]
    if not have:
        return None
    t = Table(title="Throughput policy: steps chosen per batch size, expected vs realised per-stream tok/s "
                    "(expected: online acceptance / scan cycle ms; realised: this file's steady cycles of that key)")
    for c in ("file", "batch", "steps", "cycles (share)", "explore", "expected", "realised", "diff"):
        t.add_column(c, justify="left" if c == "file" else "right")
    for s, rs in have:
        for r in rs:
            t.add_row(Path(s["file"]).name, str(r["bs"]), str(r["steps"]), f"{r['cycles']} ({r['share']:.0%})",
                      str(r["explore"]), _fmt1(r["expected_per_stream_tok_s"]), _fmt1(r["realised_per_stream_tok_s"]),
                      "" if r["realised_vs_expected_pct"] is None else f"{r['realised_vs_expected_pct']:+.1f}%")
    return t


def _fmt1(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"
