"""The scan result (eagle3_scan/1, scan.json): read and checked, and the figures every reader takes from it (main cells, best static count per batch size, the steps table, the client twin)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from ..runtime.probes.window import ALL_PHASES
from .fields import MapOf, Opt, Pair, Req
from .fields import check as check_shape

SCHEMA = "eagle3_scan/1"
STEP0_LABEL = "step 0 (SGLang, not plain decoding)"
PLAIN_LABEL = "plain server (no speculation)"


def client_aggregate(bench_doc: dict[str, Any]) -> dict[str, Any] | None:
    """The client's aggregate over a level's counted requests (warm-up runs left out): decode
    tokens / decode seconds, both summed over requests (bench.py RequestRecord: completion tokens
    after the first chunk, last token - first token). The like-for-like twin of the probes'
    aggregate; the mean of per-request rates is not, when requests ran under different step counts."""
    tok = 0
    sec = 0.0
    n = 0
    for run in bench_doc.get("runs") or []:
        for q in run.get("requests") or []:
            if q.get("error") or q.get("decode_tok_s") is None:
                continue
            t0, t1 = q.get("ttft_s"), q.get("last_token_s")
            after = int(q.get("completion_tokens") or 0) - int(q.get("first_chunk_tokens") or 1)
            if t0 is None or t1 is None or after <= 0 or not t1 > t0:
                continue
            tok += after
            sec += float(t1) - float(t0)
            n += 1
    if not n:
        return None
    return {"per_stream_tok_s": round(tok / sec, 2), "decode_tokens": tok, "decode_s": round(sec, 4), "requests": n,
            "basis": "decode tokens / decode seconds summed over the level's requests (every cycle they were in: "
                     "all step counts of the schedule, boundary cycles and the gaps between cycles)"}


def probe_aggregate(cells: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The probes' aggregate over a level's steady cycles, every key (all step counts, drain batch
    sizes too): tokens / request-milliseconds, i.e. sum tokens x 1000 / sum (batch size x cycle ms)
    -- the same quantity as client_aggregate, measured inside the server."""
    tok = sum(c.get("tokens") or 0 for c in cells)
    req_ms = sum(c["bs"] * c["cycles"] * (c.get("cycle_ms") or 0.0) for c in cells)
    if not (tok and req_ms):
        return None
    return {"per_stream_tok_s": round(tok * 1000.0 / req_ms, 2), "tokens": tok, "request_ms": round(req_ms, 2),
            "cycles": sum(c["cycles"] for c in cells),
            "steps_mix": {k: sum(c["cycles"] for c in cells if state_label(c) == k)
                          for k in sorted({state_label(c) for c in cells}, key=_label_order)},
            "basis": "tokens x 1000 / sum of batch size x cycle ms over the level's steady cycles (boundary "
                     "cycles left out)"}


def twin(doc: dict[str, Any], level: int) -> dict[str, Any] | None:
    """One level's outside twin, like for like: the client's aggregate against the probes'
    aggregate over the same level; the client's mean / median of per-request rates beside them."""
    cl = (doc.get("client") or {}).get(str(level)) or {}
    agg = cl.get("aggregate")
    pa = probe_aggregate([c for c in doc.get("cells", []) if c["level"] == level])
    if not (agg or pa or cl):
        return None
    diff = (round((pa["per_stream_tok_s"] / agg["per_stream_tok_s"] - 1) * 100, 2)
            if agg and pa and agg.get("per_stream_tok_s") else None)
    return {"level": level, "client_aggregate": agg, "probes": pa, "probes_vs_client_pct": diff,
            "client_mean": cl.get("per_stream_tok_s"), "client_median": cl.get("per_stream_tok_s_median"),
            "throughput_tok_s": cl.get("throughput_tok_s"), "accept_length": cl.get("accept_length"),
            "accept_source": cl.get("accept_source")}


def backfill_client(doc: dict[str, Any], folder: Path) -> None:
    """Scan results written before the client aggregate existed: compute it from the ladder.json
    beside scan.json (its per-request data), saying so."""
    missing = [k for k, v in (doc.get("client") or {}).items() if isinstance(v, dict) and "aggregate" not in v]
    lad_path = folder / "ladder.json"
    if not missing or not lad_path.is_file():
        return
    from .bench_doc import load_ladder

    try:  # the one ladder reader (bounded, typed); a damaged ladder.json only means no backfill
        lad = load_ladder(lad_path)
    except UserError:
        return
    levels = {str(lv["concurrency"]): lv["bench"] for lv in lad["levels"] if isinstance(lv.get("bench"), dict)}
    for k in missing:
        if k in levels:
            agg = client_aggregate(levels[k])
            if agg:
                agg["source"] = str(lad_path)
            doc["client"][k]["aggregate"] = agg


def main_cells(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The cells measured at the batch size their level aimed at, however few cycles they hold
    (the drain batch sizes of a level, when requests finish one by one, stay in ``cells`` but are
    not compared). The policy's rule too (runtime/policy.is_main)."""
    from ..runtime.policy import is_main

    return [c for c in doc.get("cells", []) if is_main(c)]


def best_static(doc: dict[str, Any]) -> dict[str, Any]:
    """The best static step count per batch size (per-stream tok/s) and overall (the best summed
    over the levels' batch sizes, each level weighted alike by its per-stream rate)."""
    base = doc.get("baseline") or {}
    best: dict[str, Any] = {}
    by_bs: dict[int, list[dict[str, Any]]] = {}
    for c in main_cells(doc):
        if c["per_stream_tok_s"]:
            by_bs.setdefault(c["bs"], []).append(c)
    for bs, cs in sorted(by_bs.items()):
        b = max(cs, key=lambda c: (c["per_stream_tok_s"], -c["steps"], not is_tree(c)))
        ref = (base.get(str(bs)) or {}).get("per_stream_tok_s")
        best[str(bs)] = {"steps": b["steps"], "state": state_label(b), "per_stream_tok_s": b["per_stream_tok_s"],
                         "throughput_tok_s": b["throughput_tok_s"],
                         "vs_baseline": round((b["per_stream_tok_s"] / ref - 1) * 100, 2) if ref else None}
    if by_bs:
        keys = set.intersection(*({state_label(c) for c in cs} for cs in by_bs.values()))
        if keys:
            def score(k: str) -> float:  # geometric mean of per-stream rate relative to each level's best
                rel = [next(c["per_stream_tok_s"] for c in cs if state_label(c) == k) / max(c["per_stream_tok_s"] for c in cs)
                       for cs in by_bs.values()]
                return math.exp(statistics.fmean(math.log(r) for r in rel))
            k = max(sorted(keys, key=_label_order), key=score)
            first = next(c for cs in by_bs.values() for c in cs if state_label(c) == k)
            best["overall"] = {"steps": first["steps"], "state": k, "relative_to_best": round(score(k), 4),
                               "basis": "the one step count with the highest geometric mean of its per-stream "
                                        "tok/s relative to each batch size's best"}
    return best


def is_tree(c: dict[str, Any]) -> bool:
    """A tree cell (topk > 1, or a state label STEPSxTOPKxTOKENS)."""
    return isinstance(_key(c), str)


def state_key(v: dict[str, Any]) -> int | str:
    """The state a merged entry or a cell measured: its step count for a chain (topk 1), its label
    ``STEPSxTOPKxTOKENS`` for a tree (runtime/specstate.py), so tree 5x4x21 never merges with
    chain 5. A cell's own ``state`` label wins."""
    lab = v.get("state")
    if isinstance(lab, str) and lab:
        return int(lab) if lab.isdigit() else lab
    topk = v.get("topk") or 1
    if topk > 1:
        return f"{v['steps']}x{topk}x{v.get('draft_tokens') or '?'}"
    return int(v["steps"])


def _key(c: dict[str, Any]) -> int | str:
    return state_key(c)


def state_label(c: dict[str, Any]) -> str:
    """A cell's state: its step count for a chain ("5"), STEPSxTOPKxTOKENS for a tree ("5x4x21")."""
    return str(_key(c))


def _label_order(label: str) -> tuple[int, int, str]:
    return (0, int(label), "") if label.isdigit() else (1, 0, label)


def table(doc: dict[str, Any]) -> dict[int, dict[int, float]]:
    """{batch size: {steps: per-stream tok/s}} of the main CHAIN cells (adaptive.choose's input:
    SGLang's adaptive config holds chains only; a tree of the same step count never overwrites
    its chain)."""
    t: dict[int, dict[int, float]] = {}
    for c in main_cells(doc):
        rate = cell_rate(c)
        if rate and not is_tree(c):
            t.setdefault(c["bs"], {})[c["steps"]] = rate
    return t


def state_table(doc: dict[str, Any]) -> dict[int, dict[int | str, float]]:
    """{batch size: {state key: per-stream tok/s}} of the main cells, chains and trees."""
    t: dict[int, dict[int | str, float]] = {}
    for c in main_cells(doc):
        rate = cell_rate(c)
        if rate:
            t.setdefault(c["bs"], {})[_key(c)] = rate
    return t


def cell_rate(c: dict[str, Any]) -> float | None:
    """A cell's per-stream tok/s; from its accept length and cycle ms (the same quantity by its
    definition) in trimmed scan files that keep only what the policy reads."""
    rate = c.get("per_stream_tok_s")
    if rate:
        return rate
    al, ms = c.get("accept_len"), c.get("cycle_ms")
    return al * 1000.0 / ms if al and ms else None


def markdown(doc: dict[str, Any]) -> str:
    """The per-key cells at each level's batch size as one Markdown table (table.md)."""
    base = doc.get("baseline") or {}
    head = ("batch size", "steps", "cycles / blocks", "cycle ms", "accept len", "accept by position",
            "tok/s per stream [95% over blocks]", "tok/s total", "vs plain")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join([":-:"] * len(head)) + "|"]
    for c in sorted(main_cells(doc), key=lambda c: (c["bs"], _label_order(state_label(c)), c["steps"])):
        iv = (c.get("interval") or {}).get("per_stream_tok_s")
        ref = (base.get(str(c["bs"])) or {}).get("per_stream_tok_s")
        vs = f"{(c['per_stream_tok_s'] / ref - 1) * 100:+.1f}%" if (ref and c["per_stream_tok_s"]) else "-"
        lines.append("| " + " | ".join([
            str(c["bs"]), STEP0_LABEL if state_label(c) == "0" else state_label(c), f"{c['cycles']} / {c['blocks']}",
            f"{c['cycle_ms']:.2f}" if c["cycle_ms"] else "-", f"{c['accept_len']:.2f}" if c["accept_len"] else "-",
            " ".join("-" if r is None else f"{r:.2f}" for r in c["per_position"]) or "-",
            (f"{c['per_stream_tok_s']:.1f}" if c["per_stream_tok_s"] else "-") + (f" [{iv[0]:.1f}, {iv[1]:.1f}]" if iv else ""),
            f"{c['throughput_tok_s']:.1f}" if c["throughput_tok_s"] else "-", vs]) + " |")
    for k, v in sorted(base.items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {k} | {PLAIN_LABEL} | client | - | - | - | {v['per_stream_tok_s']:.1f} | "
                     f"{v['throughput_tok_s']:.1f} | — |")
    return "\n".join(lines)


# ------------------------------------------------------------------ reading a result


_PHASE = Opt({"mean_ms": Opt("amount"), "p50_ms": Opt("amount"), "p90_ms": Opt("amount")})
_FIGURES = {k: Opt("amount") for k in ("cycle_ms", "accept_len", "per_stream_tok_s", "throughput_tok_s")}
CELL = {"steps": Req("steps"), "bs": Req("bs"), "level": Req("bs"), "cycles": Req("count"),
        "blocks": "count", "topk": Opt("count"), "draft_tokens": Opt("count"), "graph": Opt("bool"),
        "requests": Opt("count"), "tokens": Opt("count"), **_FIGURES, "per_position": Opt([Opt("rate")]),
        "phases": Opt({k: _PHASE for k in ALL_PHASES}),
        "interval": Opt({"per_stream_tok_s": Opt(Pair("signed")), "cycle_ms": Opt(Pair("signed"))})}
_CLIENT = {**{k: Opt("amount") for k in ("per_stream_tok_s", "per_stream_tok_s_median", "throughput_tok_s",
                                          "ttft_s", "ttft_s_median", "accept_length")},
           "accept_source": Opt("text"), "ok_runs": Opt("count"), "failed_requests": Opt("count"),
           "aggregate": Opt({"per_stream_tok_s": Req("amount"), "decode_tokens": Opt("count"),
                             "decode_s": Opt("amount"), "requests": Opt("count")})}
_BEST = MapOf("bs", {"steps": Req("steps"), "per_stream_tok_s": Req("amount"),
                     "throughput_tok_s": Opt("amount"), "vs_baseline": Opt("signed")})
_GIB = Opt(MapOf("text", "amount"))
SHAPE = {
    "cells": Req([CELL]), "candidates": Req(["steps"]), "levels": Req(["bs"]), "block": Opt("count"),
    "min_cycles": Opt("count"), "max_tokens": Opt("count"), "interrupted": Opt("bool"),
    "levels_done": Opt(["bs"]), "notes": Opt(["text"]), "wall_s": Opt("amount"), "start_s": Opt("amount"),
    "baseline": Opt(MapOf("bs", {"per_stream_tok_s": Req("amount"), "throughput_tok_s": Req("amount"),
                                 "runs": Opt("count")})),
    "client": Opt(MapOf("bs", Opt(_CLIENT))),
    "adaptive": Opt({"path": Req("text"), "format": Req("text"), "tiers": Req(MapOf("bs", ["steps"])),
                     "reasons": Opt(MapOf("bs", "text")), "within_pct": Req("amount"),
                     "launch_steps": Req("steps")}),
    "memory": Opt({"log": Opt("text"),
                   "estimate": Opt({"total_gib": Opt("amount"), "per_state_gib": _GIB}),
                   "measured": Opt({"total_gib": Req("amount"), "per_state_gib": _GIB,
                                    "outside_states_gib": Opt("amount"), "captures": Opt("count"),
                                    "states_built": Opt("count")})}),
}
_CELL_DEFAULTS: dict[str, Any] = {"blocks": 0, "graph": None, "per_position": [], "cycle_ms": None,
                                  "accept_len": None, "per_stream_tok_s": None, "throughput_tok_s": None}


def check(data: Any, origin: str) -> dict[str, Any]:
    """The typed check of a scan document (every field a reader of ours uses): UserError(2), one
    line naming ``origin`` and the field. Optional cell fields a reader indexes are filled (None)."""
    from .records import ScanResult

    ScanResult.from_json(data, origin)  # schema name and version, top-level JSON types
    check_shape(data, SHAPE, origin)
    best = data.get("best")
    if best is not None:
        check_shape(best, {"overall": Opt({"steps": Req("steps"), "relative_to_best": Req("amount")})}, origin, "best")
        check_shape({k: v for k, v in best.items() if k != "overall"}, _BEST, origin, "best")
    for i, c in enumerate(data["cells"]):
        if len(c.get("per_position") or []) > c["steps"]:
            raise UserError(f"{origin}: cells[{i}].per_position has more rates than its {c['steps']} steps", 2)
        al = c.get("accept_len")
        if al is not None and not 1.0 <= al <= c["steps"] + 1 + 1e-6:
            raise UserError(f"{origin}: cells[{i}].accept_len {al} outside [1, steps + 1] (incl. the bonus)", 2)
        for k, v in _CELL_DEFAULTS.items():
            c.setdefault(k, list(v) if isinstance(v, list) else v)
    return data


def load(path: str | Path) -> dict[str, Any]:
    """A scan result (a scan folder or its scan.json): the bounded read (safeparse: a regular file
    of at most DOC_LIMIT, no NaN, no 400-digit integer, limited depth) and the typed check, so
    every command that reads a scan (compare, sweep --report, adaptive write --from, launch
    --policy through the same reader in runtime/policy) refuses a bad one alike, with one line."""
    from .jsonio import read_json

    p = Path(path)
    f = p / "scan.json" if p.is_dir() else p
    if not f.exists() and not f.is_symlink():
        raise UserError(f"{path}: no such file (a scan folder or its scan.json)", exit_code=2)
    data = read_json(f, what="a scan result")
    check(data, str(f))
    backfill_client(data, f.parent)
    return data


def is_scan(path: str | Path) -> bool:
    """A scan folder, or a regular file whose first 4000 bytes name the scan schema (a FIFO or a
    device is no scan: the reader then says what it is)."""
    p = Path(path)
    if p.is_dir():
        return (p / "scan.json").exists() or (p / "scan.json").is_symlink()
    f = p
    if not f.is_file():
        return False
    try:
        with open(f, "rb") as fh:
            head = fh.read(4000).decode("utf-8", errors="replace")
    except OSError:
        return False
    return '"eagle3_scan/' in head
