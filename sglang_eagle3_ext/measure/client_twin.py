"""The client's twin of a profile: the bench (or bench_serving) result of the same run, aligned and compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..documents.prof_records import ProfileRun, _amount_at, _bad, _count_at, _obj_at
from ..runtime.errors import UserError
from ..runtime.probes.window import (
    CYCLE,
    PHASES,
    TIMED,
)
from ..runtime.safeparse import Unreadable, json_loads, read_text


def read_client(path: str | Path) -> dict[str, Any]:
    """The client's decode rate and accept length from a result file of the same run:
    our ``bench`` document (``eagle3_bench/1``: per-request decode tok/s, accept length from the
    server's counters), a ladder of them (``eagle3_ladder/1``: ``levels``, one such client per
    concurrency), an open-loop bench (``eagle3_serving/1``: one client per request rate, its
    decode tokens over its decode seconds) or SGLang ``bench_serving`` output (a JSON object or JSONL of them, the
    last line counts: decode tok/s = 1000 / median TPOT, the TPOT excluding the first token)."""
    from ..documents.bench_doc import LADDER_SCHEMA, LIMIT
    from ..documents.bench_doc import SCHEMA as BENCH_SCHEMA
    from ..documents.serving_doc import SCHEMA as SERVING_SCHEMA

    p = Path(path)
    try:  # bounded, regular files only (safeparse): a FIFO or /dev/zero is one line, never a hang
        text = read_text(p, what="a bench or bench_serving result", limit=LIMIT)
    except Unreadable as exc:
        raise UserError(str(exc), exit_code=2) from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    doc: Any = None
    try:
        doc = json_loads(text)
    except ValueError:
        try:
            doc = json_loads(lines[-1]) if lines else None
        except ValueError:
            doc = None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: not a bench result or a bench_serving JSON(L) result", exit_code=2)
    if doc.get("schema") == SERVING_SCHEMA:
        return _open_loop_client(doc, path)
    _check_client(doc, str(path))
    if doc.get("schema") == BENCH_SCHEMA:
        return _bench_client(doc, path)
    if doc.get("schema") == LADDER_SCHEMA:
        # a concurrency ladder (bench --concurrency 1,8,32, or a scan's ladder.json): one client
        # per level, each compared with the windows written while that level ran
        benches = [lv["bench"] for lv in doc.get("levels") or []
                   if isinstance(lv, dict) and isinstance(lv.get("bench"), dict)]
        for i, b in enumerate(benches):
            _check_client(b, f"{path} level {i + 1}")
        levels = [_bench_client(b, path) for b in benches]
        if not levels:
            raise UserError(f"{path}: a ladder without level bench documents", exit_code=2)
        return {"file": str(path), "kind": "sgl-eagle3 bench ladder", "levels": levels,
                "decode_def": levels[0]["decode_def"]}
    tpot = doc.get("median_tpot_ms")
    if tpot is None and doc.get("mean_tpot_ms") is None:
        raise UserError(f"{path}: not a bench result (schema {BENCH_SCHEMA!r}) and no median_tpot_ms / "
                        "mean_tpot_ms (SGLang bench_serving --output-file)", exit_code=2)
    which = "median_tpot_ms" if tpot else "mean_tpot_ms"
    tpot = doc.get(which)
    al = doc.get("accept_length")
    if al is None:
        al = doc.get("spec_accept_length")
    return {"file": str(path), "kind": "SGLang bench_serving",
            "decode_tok_s": round(1000.0 / tpot, 2) if tpot else None,
            "decode_def": f"1000 / {which} ({tpot:.3f} ms)" if tpot else which,
            "accept_len": al or None,
            "concurrency": doc.get("max_concurrency") or doc.get("concurrency")}


OPEN_DECODE_DEF = ("sum over completed requests of tokens after the first chunk / sum of their "
                   "first-to-last text chunk seconds: every second a request was decoding, at whatever "
                   "batch size, with the prefills of others inside")

PROBE_OPEN_DEF = ("tokens / sum(batch size x cycle ms) over every decode cycle of the windows in the "
                  "span, steady and boundary, a prefill that ran inside a cycle included")


def _open_loop_client(doc: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """One client per request rate of an open-loop document, each with the epoch span its
    schedule ran (one second of slack each side: window records are stamped to the second)."""
    from ..documents import serving_doc

    serving_doc.check(doc, str(path))
    levels = []
    for e in doc["rates"]:
        s = e["summary"]
        dec = s.get("decode") or {}
        span = e.get("span")
        levels.append({"file": str(path), "kind": "sgl-eagle3 bench, open loop", "open_loop": True,
                       "request_rate": e["request_rate"], "concurrency": None,
                       "decode_tok_s": dec.get("per_stream_tok_s"), "decode_tokens": dec.get("tokens"),
                       "decode_seconds": dec.get("seconds"), "decode_def": OPEN_DECODE_DEF,
                       "accept_len": s.get("accept_length_decode") or s.get("accept_length"),
                       "accept_def": ("(completion tokens - first tokens) / verify calls: tokens made by "
                                      "verifies, as the probes count them" if s.get("accept_length_decode")
                                      else "completion tokens / verify calls (SGLang's)"),
                       "span": (span[0] - 1.0, span[1] + 1.0) if span else None})
    return {"file": str(path), "kind": "sgl-eagle3 bench, open loop", "levels": levels,
            "decode_def": OPEN_DECODE_DEF}


def churn_rate(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The probes' twin of an open-loop client's decode rate: every decode cycle of the records
    (steady and boundary), each weighted by the requests it served,
    ``tokens / sum(batch x cycle ms)``, a prefill that ran inside a cycle ("other") included.
    Steady cycles are exact per batch size (``by_batch``: requests x mean cycle ms); boundary
    cycles have no per-batch split, so their part is their requests x their mean cycle ms (exact
    when batch size and cycle time do not co-vary within them). None for records without the
    steady / boundary split (eagle3_prof/1, older blocks)."""
    tokens = requests = 0
    steady_ms = bound_ms = 0.0
    for r in records:
        st, bd, bb = r.get("steady"), r.get("boundary"), r.get("by_batch")
        if not (isinstance(st, dict) and isinstance(bd, dict) and isinstance(bb, dict)) \
                or r.get("tokens") is None or r.get("requests") is None:
            return None
        tokens += r["tokens"]
        requests += r["requests"]
        for v in bb.values():
            cyc = ((v.get("phases") or {}).get(CYCLE) or {}).get("mean_ms")
            if cyc is not None and v.get("requests") is not None:
                steady_ms += v["requests"] * cyc
        b_req = r["requests"] - sum(int(v.get("requests") or 0) for v in bb.values())
        b_cyc = ((bd.get("phases") or {}).get(CYCLE) or {}).get("mean_ms")
        if b_req > 0 and b_cyc is not None:
            bound_ms += b_req * b_cyc
    total = steady_ms + bound_ms
    if not (tokens and requests and total > 0):
        return None
    return {"per_stream_tok_s": round(tokens * 1000.0 / total, 2),
            "accept_len": round(tokens / requests, 4), "tokens": tokens, "verifies": requests,
            "request_seconds": round(total / 1000.0, 4),
            "boundary_share": round(bound_ms / total, 4),
            "steady_per_stream_tok_s": round(
                sum(int(v.get("tokens") or 0) for r in records for v in r["by_batch"].values())
                * 1000.0 / steady_ms, 2) if steady_ms > 0 else None}


def open_loop_agreement(run: ProfileRun, client: dict[str, Any]) -> dict[str, Any]:
    """An open-loop client against the probes over the same span, like with like: the client's
    decode tokens / decode seconds against churn_rate (every decode cycle, request-weighted);
    accept length over every verify on both sides."""
    def diff(ours: float | None, theirs: float | None) -> float | None:
        return round((ours / theirs - 1.0) * 100.0, 2) if (ours and theirs) else None

    tw = churn_rate(run.records) or {}
    ps, al = tw.get("per_stream_tok_s"), tw.get("accept_len")
    share = tw.get("boundary_share")
    basis = ("every decode cycle, request-weighted" + (f" ({100 * share:.0f}% boundary)" if share is not None else "")
             if tw else "no steady/boundary split in these records: no like-for-like figure")
    return {"client": client, "basis": basis, "twin": tw or None,
            "decode_tok_s": {"profile": ps, "client": client["decode_tok_s"],
                             "diff_pct": diff(ps, client["decode_tok_s"])},
            "accept_len": {"profile": al, "client": client["accept_len"],
                           "diff_pct": diff(al, client["accept_len"])},
            "steady_decode_tok_s": {"profile": tw.get("steady_per_stream_tok_s"),
                                    "diff_pct": diff(tw.get("steady_per_stream_tok_s"), client["decode_tok_s"])},
            "cycles_def": f"client: {OPEN_DECODE_DEF}; profile: {PROBE_OPEN_DEF}"}


def _bench_client(doc: dict[str, Any], path: str | Path) -> dict[str, Any]:
    s = doc.get("summary") or {}
    dec = (s.get("decode_tok_s") or {})
    return {"file": str(path), "kind": "sgl-eagle3 bench", "decode_tok_s": dec.get("avg"),
            "decode_def": "per-request decode tok/s (first token excluded), mean over runs",
            "accept_len": s.get("accept_length"),
            "concurrency": (doc.get("params") or {}).get("concurrency"), "span": _bench_span(doc)}


def _check_client(doc: dict[str, Any], where: str) -> None:
    """The figures read_client uses: finite numbers >= 0 (counts for concurrency), one line each."""
    from ..documents.bench_doc import SCHEMA as BENCH_SCHEMA
    from ..documents.records import BenchResult

    if doc.get("schema") == BENCH_SCHEMA:
        s = BenchResult.from_json(doc, where).summary or {}
        dec = _obj_at(s, "decode_tok_s", where, "summary.") or {}
        _amount_at(dec, "avg", where, "summary.decode_tok_s.")
        _amount_at(s, "accept_length", where, "summary.")
        params = _obj_at(doc, "params", where, "") or {}
        _count_at(params, "concurrency", where, "params.")
        for k in ("runs", "warmup_runs"):
            runs = doc.get(k)
            if runs is not None and not (isinstance(runs, list) and all(isinstance(r, dict) for r in runs)):
                raise _bad(where, k, "must be a list of objects")
            for i, r in enumerate(runs or []):
                _amount_at(r, "wall_s", where, f"{k}[{i}].")
        return
    for k in ("median_tpot_ms", "mean_tpot_ms", "accept_length", "spec_accept_length"):
        _amount_at(doc, k, where, "")
    for k in ("max_concurrency", "concurrency"):
        _count_at(doc, k, where, "")


def _bench_span(doc: dict[str, Any]) -> tuple[float, float] | None:
    """(start, end) epoch seconds of a bench document. Its ``time`` is stamped when the result is
    built, after the last run (bench.build_result), so the bench ran over the ``wall_s`` of its
    warm-up and measured runs before it; one second of slack each side (both clocks are whole
    seconds). On the H200 ladder, reading ``time`` as the start put mostly the next level's
    batch-8/32 windows beside the batch-1 bench."""
    import datetime as _dt

    try:
        t_end = _dt.datetime.strptime(str(doc["time"]), "%Y-%m-%dT%H:%M:%S%z").timestamp()
        wall = sum(float(r.get("wall_s") or 0.0) for r in [*(doc.get("warmup_runs") or []),
                                                          *(doc.get("runs") or [])])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return (t_end - wall - 1.0, t_end + 1.0)


def _record_epoch(rec: dict[str, Any]) -> float | None:
    import datetime as _dt

    try:
        return _dt.datetime.fromisoformat(str(rec["time"])).timestamp()
    except (KeyError, TypeError, ValueError):
        return None


def aligned_run(run: ProfileRun, client: dict[str, Any]) -> ProfileRun | None:
    """The windows of ``run`` written while the client's bench ran (records carry the time
    they closed, to the second), or None when the two cannot be lined up in time."""
    span = client.get("span")
    if not span or run.kind != "jsonl":
        return None
    keep = [r for r in run.records if (t := _record_epoch(r)) is not None and span[0] <= t <= span[1]]
    if not keep:
        return None
    return ProfileRun(path=run.path, kind=run.kind, records=keep,
                      notes=[f"{len(keep)} of {len(run.records)} window(s) closed while the bench ran"])


COLD_PHASES = TIMED[:2]  # draft and verify: the phases a cold start shows in
COLD_RATIO = 1.5  # a phase's mean over its own p90 in window 1 that marks a cold start


def cold_start(aligned: ProfileRun | None) -> dict[str, Any] | None:
    """Window 1 (the process's first decode cycles since start) inside a client's span, holding a
    cold start: a draft or verify mean at least COLD_RATIO x that phase's own p90 (a few cycles of
    a second or more among normal ones). On the H200 (docs/results.md, round 10) the first
    windows gave 1.8-16x and every later window of 7 files (rounds 9, 10) at most 1.25x; one short warm-up
    request does not reach it. The stall is estimated as cycles x (mean - p50) over both phases.
    None when window 1 is not in the span or shows none."""
    if aligned is None or not aligned.records or aligned.records[0].get("window") != 1:
        return None
    w = aligned.records[0]
    phases, ratio, stall = {}, 0.0, 0.0
    for k in COLD_PHASES:
        ph = (w.get("phases") or {}).get(k) or {}
        mean, p50, p90 = (ph.get(x) for x in ("mean_ms", "p50_ms", "p90_ms"))
        if not all(isinstance(v, (int, float)) and v > 0 for v in (mean, p50, p90)):
            return None
        phases[k] = {"mean_ms": mean, "p90_ms": p90}
        ratio = max(ratio, mean / p90)
        stall += max(0.0, mean - p50)
    if ratio < COLD_RATIO:
        return None
    cycles = int(w.get("cycles") or 0)
    return {"window": 1, "cycles": cycles, "phases": phases, "ratio": round(ratio, 2),
            "stall_s": round(cycles * stall / 1000.0, 2)}


def cold_note(cold: dict[str, Any], where: str) -> str:
    d, v = cold["phases"]["draft"], cold["phases"]["verify"]
    return (f"{where}: the server's first probe window (its first traffic since start) closed inside this run "
            f"and holds a cold start: draft mean {d['mean_ms']:.1f} ms (p90 {d['p90_ms']:.1f}), verify mean "
            f"{v['mean_ms']:.1f} ms (p90 {v['p90_ms']:.1f}) over {cold['cycles']} cycles, about "
            f"{cold['stall_s']:.1f} s of stalls in the client's figures; give the server an unmeasured run "
            f"first before comparing it (docs/guide/bench.md)")


def agreement(summary: dict[str, Any], client: dict[str, Any]) -> dict[str, Any]:
    """Profile vs client, side by side: decode tok/s (per stream) and accept length, with the
    difference of the profile's figure from the client's in %.

    Like is compared with like: when the client ran at one concurrency C and the records split
    cycles by batch size, the profile's figures are its steady cycles at batch size C (a client
    at C streams sees those cycles, not the mix of every load the server had)."""
    def diff(ours: float | None, theirs: float | None) -> float | None:
        return round((ours / theirs - 1.0) * 100.0, 2) if (ours and theirs) else None

    ours_tps = summary.get("eff_tok_s")
    ours_al = summary.get("accept_len")
    basis = summary.get("basis")
    conc = client.get("concurrency")
    bb = (summary.get("by_batch") or {}).get(str(conc)) if isinstance(conc, int) else None
    if bb and bb.get("per_stream_tok_s"):
        ours_tps, ours_al, basis = bb["per_stream_tok_s"], bb.get("accept_len"), f"steady batch-{conc}"
        # SGLang's counter and the client count every verify of a request, its first and last
        # cycles too (whose acceptance is lower): compare accept length over all cycles
        every = (summary.get("all_cycles") or {}).get("accept_len")
        if every:
            ours_al = every
    return {"client": client, "basis": basis,
            "decode_tok_s": {"profile": ours_tps, "client": client["decode_tok_s"],
                             "diff_pct": diff(ours_tps, client["decode_tok_s"])},
            "accept_len": {"profile": ours_al, "client": client["accept_len"],
                           "diff_pct": diff(ours_al, client["accept_len"])},
            "all_cycles_decode_tok_s": {"profile": (summary.get("all_cycles") or {}).get("eff_tok_s"),
                                        "diff_pct": diff((summary.get("all_cycles") or {}).get("eff_tok_s"),
                                                         client["decode_tok_s"])}}


def rank_spread(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-rank spread of each phase (p50 where the summaries have it, else mean) over the TP
    ranks of one run, and the slowest rank (highest cycle time). ``summaries``: one
    ``summarize`` result per rank stream, each with its ``rank``."""
    ranked = sorted((s for s in summaries if s.get("rank") is not None), key=lambda s: s["rank"])
    if len(ranked) < 2:
        return {}
    stat = "p50_ms" if all(s["phases"][CYCLE].get("p50_ms") is not None for s in ranked) else "mean_ms"
    phases: dict[str, Any] = {}
    for p in (*PHASES, CYCLE):
        by = {s["rank"]: s["phases"][p].get(stat) for s in ranked if s["phases"][p].get(stat) is not None}
        if not by:
            continue
        lo, hi = min(by.values()), max(by.values())
        phases[p] = {"by_rank": {str(r): v for r, v in by.items()}, "min_ms": lo, "max_ms": hi,
                     "spread_ms": round(hi - lo, 4), "spread_pct": round((hi / lo - 1) * 100, 2) if lo else None,
                     "slowest_rank": max(by, key=lambda r: by[r])}
    cyc = phases.get(CYCLE)
    return {"stat": stat, "ranks": [s["rank"] for s in ranked], "phases": phases,
            "slowest_rank": cyc["slowest_rank"] if cyc else None,
            "basis": "+".join(sorted({str(s.get("basis")) for s in ranked}))}
