"""From the probes' records to scan cells: per (state, batch size) key merged over windows, its interval over hold blocks, and the live tail of the probe file."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from ..documents.prof_records import _check_record
from ..documents.scan_doc import state_key
from ..runtime.errors import UserError
from ..runtime.safeparse import json_loads

# ------------------------------------------------------------------ probe records (eagle3_prof/3)


def parse_key(key: str) -> tuple[int, int, int, int, bool | None]:
    """``"s3.k1.d4.b8.g"`` -> (3, 1, 4, 8, True); graph letter g / e / u (unknown)."""
    try:
        s, k, d, b, g = key.split(".")
        return int(s[1:]), int(k[1:]), int(d[1:]), int(b[1:]), {"g": True, "e": False}.get(g)
    except ValueError:
        raise UserError(f"probe record key {key!r}: expected s<steps>.k<topk>.d<draft>.b<bs>.<g|e|u>",
                        exit_code=2) from None


class RecordTail:
    """Reads complete JSONL lines appended to the probe file since the last call (live)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out = []
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:  # the probe file's own checks (prof_records): a bad record never reaches a cell
                rec = _check_record(json_loads(line), str(self.path))
            except (ValueError, UserError):
                continue  # a torn line of a crashed writer: `profile` names such lines
            out.append(rec)
        return out


def merge_keys(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The records' ``by_key`` entries merged over windows (accounting.by_key_summary: steady
    cycles only; counts add, phases merge cycle-weighted, ``parts`` merge by hold block id)."""
    from ..measure.accounting import by_key_summary

    out = by_key_summary(records)
    for k, v in out.items():  # keys whose head lacks a field: the key itself says it
        steps, topk, dt, bs, graph = parse_key(k)
        v.setdefault("steps", steps)
        for f, x in (("steps", steps), ("topk", topk), ("draft_tokens", dt), ("bs", bs)):
            if v.get(f) is None:
                v[f] = x
    return out


def merged_cycles(records: list[dict[str, Any]]) -> int:
    return sum(v["cycles"] for v in merge_keys(records).values())


def coverage(merged: dict[str, dict[str, Any]], bs: int) -> dict[int | str, int]:
    """Steady cycles per state (chain: steps; tree: its label) at batch size ``bs``."""
    cov: dict[int | str, int] = {}
    for v in merged.values():
        if v["bs"] == bs:
            k = state_key(v)
            cov[k] = cov.get(k, 0) + v["cycles"]
    return cov


# ------------------------------------------------------------------ figures


def t_interval(values: list[float]) -> list[float] | None:
    """95 % Student-t interval of the mean of ``values``; None below 2."""
    from ..measure.accounting import t975

    n = len(values)
    if n < 2:
        return None
    m = statistics.fmean(values)
    half = t975(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return [round(m - half, 3), round(m + half, 3)]


def _rate(tokens: float, requests: float, cycles: float, ms_sum: float) -> tuple[float | None, float | None]:
    """(per-stream tok/s, cycle ms) of a set of cycles: tokens per request per cycle x 1000 / cycle ms."""
    if not (requests and cycles and ms_sum):
        return None, None
    cyc = ms_sum / cycles
    return tokens / requests * 1000.0 / cyc, cyc


def cell(v: dict[str, Any], level: int) -> dict[str, Any]:
    """One (steps, batch size) cell of the scan document from a merged by_key entry; its intervals
    are over the key's hold blocks (accounting.block_intervals: the jackknife of the pooled
    figure, blocks weighed by their cycles), and ``trust`` says when its steady cycles, blocks
    or steady share are few (accounting.trust_note)."""
    from ..measure.accounting import block_intervals, trust_note

    cyc_ms = ((v.get("phases") or {}).get("cycle") or {}).get("mean_ms")
    iv = block_intervals(v.get("parts") or [])
    return {"steps": v["steps"], "topk": v["topk"], "draft_tokens": v["draft_tokens"], "state": str(state_key(v)),
            "bs": v["bs"],
            "graph": v.get("graph"), "level": level, "cycles": v["cycles"], "blocks": len(v.get("parts") or []),
            "all_cycles": v.get("all_cycles"), "steady_share": v.get("steady_share"), "trust": trust_note(v),
            "requests": v.get("requests"), "tokens": v.get("tokens"),
            "cycle_ms": round(cyc_ms, 4) if cyc_ms else None, "phases": v.get("phases"),
            "accept_len": v.get("accept_len"), "per_position": v.get("per_position") or [],
            "per_stream_tok_s": v.get("per_stream_tok_s"), "throughput_tok_s": v.get("throughput_tok_s"),
            "interval": {"per_stream_tok_s": iv["per_stream_tok_s"], "cycle_ms": iv["cycle_ms"],
                         "accept_len": iv["accept_len"],
                         "basis": f"95 % t-interval over {iv['blocks']} hold block(s): jackknife of the "
                                  "pooled figure, each block weighed by its cycles"}}


def probe_mix(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Every steady cycle of a level's windows, all step counts and batch sizes together: what the
    client's whole-level figure should be near (the client also sees boundary cycles)."""
    merged = merge_keys(records)
    cycles = sum(v["cycles"] for v in merged.values())
    if not cycles:
        return None
    ms = sum(sum(p[2] for p in v.get("parts") or []) for v in merged.values())
    tok = sum(v["tokens"] for v in merged.values())
    req = sum(v["requests"] for v in merged.values())
    ps, cyc = _rate(tok, req, cycles, ms)
    return {"cycles": cycles, "cycle_ms": round(cyc, 4) if cyc else None,
            "accept_len": round(tok / req, 4) if req else None,
            "per_stream_tok_s": round(ps, 2) if ps else None,
            "throughput_tok_s": round(tok * 1000.0 / ms, 2) if ms else None,
            "steps_mix": {str(s): sum(v["cycles"] for v in merged.values() if state_key(v) == s)
                          for s in _sorted_keys({state_key(v) for v in merged.values()})}}


def _sorted_keys(keys: set[int | str]) -> list[int | str]:
    """Chains by steps, then trees (runtime/specstate.sort_keys; an unparsable label last)."""
    from ..runtime import specstate

    good = [k for k in keys if _parses(k)]
    return specstate.sort_keys(good) + sorted(str(k) for k in keys if not _parses(k))


def _parses(k: int | str) -> bool:
    from ..runtime import specstate

    try:
        specstate.of_key(k)
    except ValueError:
        return False
    return True
