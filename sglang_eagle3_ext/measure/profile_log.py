"""Read what the probes wrote: ``eagle3_prof/1|2|3`` JSONL files and server logs with EAGLE3_PROF blocks.

Both come back as the same record dicts (the JSONL schema of docs/architecture.md), so the
analysis never cares where a number came from. Blocks written by the seeds' hand patch are
*legacy*: their "tok accepted" / "Accept len" / "Eff tok/s" counted accepted draft tokens only.
They are converted to tokens per cycle incl. the bonus token, and every conversion is reported in
``ProfileRun.notes``.

/2 records split each window into steady decode cycles and boundary cycles (docs/profiling.md);
``summarize`` reports its top-level figures on the steady cycles when every record has the split
(``basis: "steady"``), else on all cycles (``basis: "all"``, said in the notes), so break-even,
prediction and the sweep's cost model read steady figures whenever they exist.
``steady_summary`` / ``by_batch_summary`` / ``boundary_summary`` aggregate the split over windows;
``by_key_summary`` / ``control_summary`` the /3 per-configuration split (steps, topk, draft tokens,
batch size, graph) and what ran at each batch size.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..documents.records import MAX_COUNT, WindowRecord, amount_error, count_error
from ..runtime.errors import UserError
from ..runtime.probes.window import (
    CYCLE,
    LABEL_TO_PHASE,
    PHASES,
    REASONS,
    SCHEMA,
    per_position_rates,
)
from ..runtime.safeparse import json_loads

_NUM = r"(\d+(?:\.\d+)?)"
_HEADER = re.compile(
    r"EAGLE3_PROF \((?P<cycles>\d+) cycles, (?P<tok>\d+) tok (?P<what>accepted|incl\. bonus)"
    r"(?:, (?P<req>\d+) verifies)?\)"
    r"(?: window (?P<window>\d+))?(?:, mode (?P<mode>\w+))?(?:, rank (?P<rank>\d+))?"
)
_PHASE_LINE = re.compile(
    r"(?P<label>" + "|".join(map(re.escape, LABEL_TO_PHASE)) + r"):\s*(?P<rest>.*)$"
)
_PHASE_VALUE = re.compile(_NUM + r" ms/cyc\s*\(\s*" + _NUM + r"%\)")
_TOTAL_LINE = re.compile(r"TOTAL:\s*(?P<rest>.*)$")
_TOTAL_VALUE = re.compile(_NUM + r" ms/cyc")
_ACCEPT_LINE = re.compile(r"Accept len:\s*(?P<rest>.*)$")
_ACCEPT_VALUE = re.compile(r"(?:" + _NUM + r"|n/a)(?P<bonus>\s*\(incl\. bonus\))?")
_TPS_LINE = re.compile(r"Eff tok/s:\s*(?P<rest>.*)$")
_POS_LINE = re.compile(r"Accept by pos:\s*(?P<rest>.*?)\s*\(conditional\)")
_MODE_LINE = re.compile(r"Timing mode:\s*(?P<mode>\w+)")
_CYCLES_LINE = re.compile(r"Cycles:\s*(?P<all>\d+) = (?P<steady>\d+) steady \+ (?P<bound>\d+) boundary \((?P<why>[^)]*)\)")
_STEADY_LINE = re.compile(
    r"Steady:\s*(?:none|" + _NUM + r" ms/cyc \(p50 " + _NUM + r"; draft " + _NUM + r", verify " + _NUM
    + r", extend " + _NUM + r", other " + _NUM + r"\), accept len (?:" + _NUM + r"|n/a), eff tok/s (?:"
    + _NUM + r"|n/a))"
)
_RAN_LINE = re.compile(r"Steps ran:\s*(?P<ran>.*?)(?: \((?P<who>\w+) decider, block (?P<block>\S+)\))?\s*$")
_BOUND_LINE = re.compile(r"Boundary cost:\s*\+" + _NUM + r" ms over steady p50, (?P<joins>\d+) joins")
_CONFIG_LINE = re.compile(
    r"Config:\s*steps (?P<steps>\S+), topk (?P<topk>\S+), draft tokens (?P<dt>[^;]+); "
    r"SGLang (?P<ver>[^;]+); route (?P<route>\S+)"
)


@dataclass
class ProfileRun:
    """Everything read from one file: its window records and what was converted or assumed."""

    path: str
    kind: str  # "jsonl" | "log"
    records: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


def _full_number(rest: str, pattern: re.Pattern[str]) -> re.Match[str] | None:
    m = pattern.match(rest.strip())
    return m


def _opt_int(s: str) -> int | None:
    s = s.strip()
    return int(s) if s.isdigit() else None


class _Block:
    def __init__(self, line: int) -> None:
        self.line = line
        self.header: re.Match[str] | None = None
        self.phases: dict[str, float] = {}
        self.pct: dict[str, float] = {}
        self.total: float | None = None
        self.accept: float | None = None
        self.accept_bonus: bool | None = None
        self.tps: float | None = None
        self.per_position: list[float | None] = []
        self.mode: str | None = None
        self.config: re.Match[str] | None = None
        self.split_cycles: re.Match[str] | None = None
        self.split_steady: re.Match[str] | None = None
        self.split_bound: re.Match[str] | None = None
        self.ran: re.Match[str] | None = None
        self.truncated: list[str] = []

    @property
    def has_body(self) -> bool:
        return bool(self.phases) or self.total is not None


def _scan_blocks(text: str) -> list[_Block]:
    """Find EAGLE3_PROF blocks; a block is a header and/or a run of known body lines."""
    blocks: list[_Block] = []
    cur: _Block | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        h = _HEADER.search(line)
        if h:
            cur = _Block(lineno)
            cur.header = h
            blocks.append(cur)
            continue
        m = _PHASE_LINE.search(line)
        if m:
            phase = LABEL_TO_PHASE[m["label"]]
            if cur is None or phase in cur.phases or phase in cur.truncated:
                cur = _Block(lineno)  # a body without a header line (e.g. cut by `grep | tail`)
                blocks.append(cur)
            v = _full_number(m["rest"], _PHASE_VALUE)
            if v:
                cur.phases[phase] = float(v[1])
                cur.pct[phase] = float(v[2])
            else:
                cur.truncated.append(phase)
            continue
        if cur is None:
            continue
        if m := _TOTAL_LINE.search(line):
            v = _full_number(m["rest"], _TOTAL_VALUE)
            if v:
                cur.total = float(v[1])
            else:
                cur.truncated.append("total")
        elif m := _ACCEPT_LINE.search(line):
            v = _full_number(m["rest"], _ACCEPT_VALUE)
            if v and v.group(0):
                cur.accept = float(v[1]) if v[1] else None
                cur.accept_bonus = bool(v["bonus"])
            else:
                cur.truncated.append("accept_len")
        elif m := _TPS_LINE.search(line):
            v = re.match(_NUM, m["rest"].strip())
            if v:
                cur.tps = float(v[1])
            elif not m["rest"].strip().startswith("n/a"):
                cur.truncated.append("eff_tok_s")
        elif m := _POS_LINE.search(line):
            cur.per_position = [None if x == "n/a" else float(x) for x in m["rest"].split()]
        elif m := _MODE_LINE.search(line):
            cur.mode = m["mode"]
        elif m := _CONFIG_LINE.search(line):
            cur.config = m
        elif m := _CYCLES_LINE.search(line):
            cur.split_cycles = m
        elif m := _STEADY_LINE.search(line):
            cur.split_steady = m
        elif m := _BOUND_LINE.search(line):
            cur.split_bound = m
        elif m := _RAN_LINE.search(line):
            cur.ran = m
        else:
            cur = None  # any other line ends the block
    return blocks


def _block_record(b: _Block, index: int, path: str, notes: list[str]) -> dict[str, Any]:
    where = f"{path}:{b.line}"
    h = b.header
    legacy = h is not None and h["what"] == "accepted" or (h is None and b.accept_bonus is False)
    if h is None and b.accept_bonus is None:
        legacy = True  # no header and no accept line: the only writer of such blocks is the seeds' patch
    missing = [p for p in PHASES if p not in b.phases]
    if b.total is None and missing:
        raise UserError(f"{where}: EAGLE3_PROF block lacks {', '.join(missing)} and TOTAL; cannot read it")
    phases = {p: {"mean_ms": b.phases.get(p), "p50_ms": None, "p90_ms": None} for p in PHASES}
    total = b.total
    if total is None:
        total = round(sum(b.phases.values()), 4)
        notes.append(f"{where}: TOTAL line is cut off; cycle time taken as the sum of the phases ({total:.2f} ms)")
    phases[CYCLE] = {"mean_ms": total, "p50_ms": None, "p90_ms": None}
    cut = [t for t in b.truncated if t != "total"]
    if cut:
        notes.append(f"{where}: cut-off line(s) ignored: {', '.join(cut)}")

    cycles = int(h["cycles"]) if h else None
    rec: dict[str, Any] = {
        "schema": SCHEMA, "window": index, "cycles": cycles, "phases": phases,
        "source": "log", "line": b.line,
    }
    if legacy:
        rec["mode"] = "wall"  # the seeds' patch used perf_counter
        rec["legacy"] = {"accept_len_drafts_only": b.accept, "eff_tok_s_drafts_only": b.tps}
        if h is not None:
            acc = int(h["tok"])
            rec.update(requests=cycles, accepted_drafts=acc, tokens=acc + cycles)
            accept_len = acc / cycles + 1.0 if cycles else None
            how = f"({acc}/{cycles} + 1)"
        elif b.accept is not None:
            rec.update(requests=None, accepted_drafts=None, tokens=None)
            accept_len = b.accept + 1.0
            how = f"({b.accept:.2f} + 1)"
        else:
            rec.update(requests=None, accepted_drafts=None, tokens=None)
            accept_len = None
            how = ""
        rec["accept_len"] = round(accept_len, 4) if accept_len is not None else None
        rec["eff_tok_s"] = round(accept_len * 1000.0 / total, 2) if (accept_len and total) else None
        if accept_len is not None:
            old_al = f"Accept len {b.accept:.2f}" if b.accept is not None else f"{h['tok']} tok accepted"
            old_tps = f", Eff tok/s {b.tps:.1f} -> {rec['eff_tok_s']:.1f}" if b.tps is not None else (
                f", Eff tok/s -> {rec['eff_tok_s']:.1f}")
            notes.append(
                f"{where}: legacy block counted accepted drafts only; converted {old_al} -> "
                f"{accept_len:.3f} tokens per cycle incl. bonus {how}{old_tps} "
                f"(assumes one request per cycle, as the seeds' single-stream runs had)"
            )
        rec["spec"] = {"steps": None, "topk": None, "draft_tokens": None}
        rec["per_position"] = []
        return rec

    # our own block
    req = int(h["req"]) if h and h["req"] else None
    tokens = int(h["tok"]) if h else None
    rec.update(
        requests=req,
        tokens=tokens,
        accepted_drafts=(tokens - req) if (tokens is not None and req is not None) else None,
        accept_len=b.accept,
        eff_tok_s=b.tps,
        per_position=b.per_position,
        mode=(b.mode or (h["mode"] if h else None)),
        rank=int(h["rank"]) if h and h["rank"] else None,
    )
    if h and h["window"]:
        rec["window"] = int(h["window"])
    if b.config:
        c = b.config
        rec["spec"] = {"steps": _opt_int(c["steps"]), "topk": _opt_int(c["topk"]),
                       "draft_tokens": _opt_int(c["dt"])}
        rec["sglang_version"] = None if c["ver"].strip() == "?" else c["ver"].strip()
        rec["route"] = None if c["route"] == "?" else c["route"]
    else:
        rec["spec"] = {"steps": None, "topk": None, "draft_tokens": None}
    if b.split_cycles and b.split_steady:
        _block_split(b, rec)
    if b.ran:
        rec["control"] = _block_control(b.ran)
    return rec


def _block_control(m: re.Match[str]) -> dict[str, Any]:
    """The /3 block's "Steps ran: bs 2: 1 x50, 3 x50 (hold decider, block 7)" line."""
    choices: dict[str, dict[str, int]] = {}
    for part in m["ran"].split(";"):
        bs, _, rest = part.strip().removeprefix("bs ").partition(":")
        row = choices.setdefault(bs.strip(), {})
        for item in rest.split(","):
            steps, _, n = item.strip().partition(" x")
            if n.isdigit():
                row[steps.strip()] = int(n)
    block = m["block"]
    return {"decider": m["who"], "block": int(block) if block and block.isdigit() else None,
            "candidates": None, "choices": choices}


def _block_split(b: _Block, rec: dict[str, Any]) -> None:
    """The steady / boundary lines of a /2 block: means and the steady cycle p50 only."""
    c, st = b.split_cycles, b.split_steady
    reasons = dict.fromkeys(REASONS, 0)
    for part in c["why"].split(","):
        k, _, v = part.strip().rpartition(" ")
        if k in reasons and v.isdigit():
            reasons[k] = int(v)
    phases = None
    if st[1] is not None:
        vals = dict(zip(PHASES, (float(x) for x in st.groups()[2:6]), strict=True))
        phases = {p: {"mean_ms": vals[p], "p50_ms": None, "p90_ms": None} for p in PHASES}
        phases[CYCLE] = {"mean_ms": float(st[1]), "p50_ms": float(st[2]), "p90_ms": None}
    rec["steady"] = {"cycles": int(c["steady"]), "requests": None, "accepted_drafts": None, "tokens": None,
                     "accept_len": float(st[7]) if st[7] else None, "phases": phases,
                     "eff_tok_s": float(st[8]) if st[8] else None}
    bd = b.split_bound
    rec["boundary"] = {"cycles": int(c["bound"]), "reasons": reasons, "phases": None,
                       "extra_ms": float(bd[1]) if bd else None, "extra_by_phase": None,
                       "joins": int(bd["joins"]) if bd else 0, "extra_ms_per_join": None}


def _check_record(rec: Any, where: str) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise UserError(f"{where}: a JSONL line must be an object, got {type(rec).__name__}")
    # schema name/version, required fields (cycles, phases, mode) and top-level JSON types
    WindowRecord.from_json(rec, where)
    phases = rec["phases"]
    try:
        for p in (*PHASES, CYCLE):
            float(phases[p]["mean_ms"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{where}: phases must hold mean_ms for draft/verify/extend/other/cycle ({exc})") from None
    for name, ph in phases.items():
        bad = [k for k, v in ph.items() if v is not None and not _is_num(v)] if isinstance(ph, dict) else [name]
        if bad:
            raise UserError(f"{where}: phases.{name}.{bad[0]} must be a number")
    for k in ("per_position",):
        v = rec.get(k)
        if v is not None and not (isinstance(v, list) and all(x is None or _is_num(x) for x in v)):
            raise UserError(f"{where}: {k} must be a list of numbers")
    hist = rec.get("accept_hist")
    if hist is not None and not (isinstance(hist, dict) and all(_is_num(x) for x in hist.values())):
        raise UserError(f"{where}: accept_hist must map lengths to counts")
    _check_values(rec, where)
    return rec


# ---------------------------------------------------------------- value checks (issue 23)
# What the summaries below compute with, checked per record, so a NaN, a negative count, a word
# where a number belongs or a 300-digit integer is one line naming the file:line and the field,
# never "nan ms" in a table or a traceback. Limits are far above any real record.
MAX_STEPS = 1024     # spec steps / topk / draft tokens, accept_hist lengths, per_position entries
MAX_BATCH = 1 << 20  # a by_batch key (batch size)


def _bad(where: str, name: str, why: str) -> UserError:
    return UserError(f"{where}: {name} {why}", exit_code=2)


def _count_at(d: dict[str, Any], key: str, where: str, name: str, *, limit: int | None = None) -> None:
    v = d.get(key)
    if v is None:
        return
    why = count_error(v)
    if why is None and limit is not None and v > limit:
        why = f"must be at most {limit}, got {v}"
    if why:
        raise _bad(where, f"{name}{key}", why)


def _amount_at(d: dict[str, Any], key: str, where: str, name: str, *, signed: bool = False) -> None:
    v = d.get(key)
    if v is None:
        return
    if signed:
        if not (_is_num(v) and math.isfinite(v) and abs(v) < MAX_COUNT):
            raise _bad(where, f"{name}{key}", f"must be a finite number, got {v!r:.40}")
        return
    why = amount_error(v)
    if why:
        raise _bad(where, f"{name}{key}", why)


def _obj_at(d: dict[str, Any], key: str, where: str, name: str) -> dict[str, Any] | None:
    v = d.get(key)
    if v is None or isinstance(v, dict):
        return v
    raise _bad(where, f"{name}{key}", f"must be an object, got {type(v).__name__}")


def _phases_at(ph: Any, where: str, name: str, *, need_cycle: bool = False) -> None:
    if ph is None:
        return
    if not isinstance(ph, dict):
        raise _bad(where, name, f"must be an object, got {type(ph).__name__}")
    if need_cycle and not (isinstance(ph.get(CYCLE), dict) and _is_num(ph[CYCLE].get("mean_ms"))):
        raise _bad(where, f"{name}.{CYCLE}.mean_ms", "is missing")
    for p, row in ph.items():
        if not isinstance(row, dict):
            raise _bad(where, f"{name}.{p}", f"must be an object, got {type(row).__name__}")
        for k in row:
            _amount_at(row, k, where, f"{name}.{p}.")


def _part_at(part: Any, where: str, name: str) -> None:
    """A steady / by_batch part: counts, accept length, rates, phases."""
    if not isinstance(part, dict):
        raise _bad(where, name, f"must be an object, got {type(part).__name__}")
    for k in ("cycles", "requests", "accepted_drafts", "tokens"):
        _count_at(part, k, where, f"{name}.")
    for k in ("accept_len", "eff_tok_s", "per_stream_tok_s", "throughput_tok_s"):
        _amount_at(part, k, where, f"{name}.")
    _phases_at(part.get("phases"), where, f"{name}.phases", need_cycle=True)


def _check_values(rec: dict[str, Any], where: str) -> None:
    """Nested values of one window record (top-level ones: records.WindowRecord)."""
    _phases_at(rec["phases"], where, "phases")
    for i, x in enumerate(rec.get("per_position") or []):
        if x is not None and not (amount_error(x) is None and x <= 1):
            raise _bad(where, f"per_position[{i}]", f"must be a rate between 0 and 1, got {x!r}")
    if len(rec.get("per_position") or []) > MAX_STEPS:
        raise _bad(where, "per_position", f"has more than {MAX_STEPS} positions")
    hist = rec.get("accept_hist") or {}
    if len(hist) > MAX_STEPS:
        raise _bad(where, "accept_hist", f"has more than {MAX_STEPS} lengths")
    for k in hist:
        if not (isinstance(k, str) and k.isdigit() and int(k) <= MAX_STEPS):
            raise _bad(where, "accept_hist", f"keys are accepted lengths 0..{MAX_STEPS}, got {k!r}")
        _count_at(hist, k, where, "accept_hist.")
    spec = _obj_at(rec, "spec", where, "") or {}
    for k in ("steps", "topk", "draft_tokens"):
        _count_at(spec, k, where, "spec.", limit=MAX_STEPS)
    if rec.get("steady") is not None:
        _part_at(rec["steady"], where, "steady")
    bd = _obj_at(rec, "boundary", where, "")
    if bd is not None:
        _count_at(bd, "cycles", where, "boundary.")
        _count_at(bd, "joins", where, "boundary.")
        reasons = _obj_at(bd, "reasons", where, "boundary.") or {}
        for k in reasons:
            _count_at(reasons, k, where, "boundary.reasons.")
        _amount_at(bd, "extra_ms", where, "boundary.", signed=True)  # boundary cycles may beat the p50
        _amount_at(bd, "extra_ms_per_join", where, "boundary.", signed=True)
        by_phase = _obj_at(bd, "extra_by_phase", where, "boundary.") or {}
        for k in by_phase:
            if by_phase[k] is None:
                raise _bad(where, f"boundary.extra_by_phase.{k}", "must be a number, got None")
            _amount_at(by_phase, k, where, "boundary.extra_by_phase.", signed=True)
        _phases_at(bd.get("phases"), where, "boundary.phases")
    for k, part in (_obj_at(rec, "by_batch", where, "") or {}).items():
        if not (isinstance(k, str) and k.isdigit() and 0 < int(k) <= MAX_BATCH):
            raise _bad(where, "by_batch", f"keys are batch sizes 1..{MAX_BATCH}, got {k!r}")
        _part_at(part, where, f"by_batch.{k}")


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def load(path: str | Path) -> ProfileRun:
    """Read one file (JSONL from EAGLE3_PROFILE_OUT, or any text log with EAGLE3_PROF blocks).

    A file still being written may end in half a line: that last line (no newline after it) is
    skipped with a note; a bad line anywhere else refuses the file, naming the line and field.
    Records of two ranks in one file are refused (each rank writes its own stream)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if first.startswith("{"):
        notes: list[str] = []
        records = []
        rank0: int | None = None
        lines = text.split("\n")
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json_loads(line)
            except ValueError as exc:
                if i == len(lines):  # text does not end in a newline: the writer is mid-line
                    notes.append(f"{path}:{i}: last line is incomplete (the file is still being "
                                 "written?); skipped")
                    continue
                raise UserError(f"{path}:{i}: not valid JSON ({getattr(exc, 'msg', exc)})") from None
            records.append(_check_record(rec, f"{path}:{i}"))
            rank0 = _one_rank(rank0, rec, f"{path}:{i}")
        if not records:
            raise UserError(f"{path}: no complete eagle3_prof record yet (only a partial line)")
        return ProfileRun(str(path), "jsonl", records, notes)
    notes = []
    blocks = [b for b in _scan_blocks(text) if b.has_body]
    if not blocks:
        raise UserError(f"{path}: no EAGLE3_PROF block and no eagle3_prof JSONL record found")
    records = []
    rank0 = None
    for i, b in enumerate(blocks, 1):
        where = f"{path}:{b.line}"
        try:
            rec = _block_record(b, i, str(path), notes)
        except ValueError as exc:  # int() of a number with thousands of digits
            raise UserError(f"{where}: EAGLE3_PROF block holds a number this tool cannot read ({exc})") from None
        records.append(_check_record(rec, where))
        rank0 = _one_rank(rank0, rec, where)
    return ProfileRun(str(path), "log", records, notes)


def _one_rank(rank0: int | None, rec: dict[str, Any], where: str) -> int | None:
    """The file's rank so far; refuses a record of another rank: two ranks' streams in one file
    would be summed as one rank's (twice the cycles, means of two GPUs)."""
    rank = rec.get("rank")
    if not isinstance(rank, int) or rank == rank0:
        return rank0
    if rank0 is not None:
        raise UserError(f"{where}: a rank {rank} record after rank {rank0} records in one file; a file "
                        "holds one rank's stream (rank 0 writes EAGLE3_PROFILE_OUT, rank N writes "
                        "<out>.rankN): split it by rank, e.g. with jq 'select(.rank == 0)'", exit_code=2)
    return rank


def _wavg(pairs: list[tuple[float, float]]) -> float | None:
    tw = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / tw if tw else None


def _wmedian(pairs: list[tuple[float, float]]) -> float | None:
    """Weighted median of (value, weight): the value where the cumulative weight reaches half."""
    pairs = sorted(p for p in pairs if p[0] is not None and p[1] > 0)
    total = sum(w for _, w in pairs)
    if not total:
        return None
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= total / 2:
            return v
    return pairs[-1][0]


def merge_phases(parts: list[tuple[dict[str, Any] | None, float]]) -> dict[str, dict[str, float | None]] | None:
    """Phase stats over windows, weighted by cycles: mean = weighted mean of window means;
    p50 / p90 = cycle-weighted median of the window p50s / p90s (per-window percentiles cannot be
    merged exactly; this is the documented approximation)."""
    parts = [(ph, w) for ph, w in parts if ph and w]
    if not parts:
        return None
    out: dict[str, dict[str, float | None]] = {}
    for p in (*PHASES, CYCLE):
        row: dict[str, float | None] = {}
        for k, fn in (("mean_ms", _wavg), ("p50_ms", _wmedian), ("p90_ms", _wmedian)):
            v = fn([(ph[p][k], w) for ph, w in parts if ph.get(p, {}).get(k) is not None])
            row[k] = round(v, 4) if v is not None else None
        out[p] = row
    return out


def _counts(parts: list[dict[str, Any]]) -> tuple[int | None, int | None, float | None]:
    """(requests, tokens, accept_len) summed over parts; accept_len weighted when counts are missing."""
    if parts and all(p.get("requests") is not None and p.get("tokens") is not None for p in parts):
        req = sum(p["requests"] for p in parts)
        tok = sum(p["tokens"] for p in parts)
        return req, tok, (round(tok / req, 4) if req else None)
    al = _wavg([(p["accept_len"], float(p.get("cycles") or 0)) for p in parts if p.get("accept_len") is not None])
    return None, None, (round(al, 4) if al is not None else None)


def steady_summary(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The steady-decode figures of a list of window records (RECORDS.md shape), or None when
    any record has no split (``eagle3_prof/1``, legacy blocks): then only all-cycle figures exist."""
    if not records or any(not isinstance(r.get("steady"), dict) for r in records):
        return None
    parts = [r["steady"] for r in records]
    cycles = sum(int(p.get("cycles") or 0) for p in parts)
    req, tok, al = _counts(parts)
    phases = merge_phases([(p.get("phases"), float(p.get("cycles") or 0)) for p in parts])
    cyc = phases[CYCLE]["mean_ms"] if phases else None
    acc = sum(p["accepted_drafts"] for p in parts) if all(p.get("accepted_drafts") is not None for p in parts) else None
    return {"cycles": cycles, "requests": req, "accepted_drafts": acc, "tokens": tok, "accept_len": al,
            "phases": phases,
            "eff_tok_s": round(al * 1000.0 / cyc, 2) if (al and cyc) else None}


def boundary_summary(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Boundary cycles over windows: counts and reasons summed, phases merged, extra ms summed."""
    if not records or any(not isinstance(r.get("boundary"), dict) for r in records):
        return None
    parts = [r["boundary"] for r in records]
    reasons = {k: sum(int((p.get("reasons") or {}).get(k) or 0) for p in parts) for k in REASONS}
    extra = [p.get("extra_ms") for p in parts if p.get("extra_ms") is not None]
    by_phase: dict[str, float] | None = None
    if any(p.get("extra_by_phase") for p in parts):
        by_phase = {ph: round(sum((p.get("extra_by_phase") or {}).get(ph, 0.0) for p in parts), 4) for ph in PHASES}
    joins = sum(int(p.get("joins") or 0) for p in parts)
    extra_ms = round(sum(extra), 4) if extra else None
    return {"cycles": sum(int(p.get("cycles") or 0) for p in parts), "reasons": reasons,
            "phases": merge_phases([(p.get("phases"), float(p.get("cycles") or 0)) for p in parts]),
            "extra_ms": extra_ms, "extra_by_phase": by_phase, "joins": joins,
            "extra_ms_per_join": round(extra_ms / joins, 4) if (extra_ms is not None and joins) else None}


def by_batch_summary(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Steady cycles per batch size over windows ({} for records without the split)."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        for k, v in (r.get("by_batch") or {}).items():
            groups.setdefault(int(k), []).append(v)
    out: dict[int, dict[str, Any]] = {}
    for bs in sorted(groups):
        parts = groups[bs]
        cycles = sum(int(p.get("cycles") or 0) for p in parts)
        req, tok, al = _counts(parts)
        phases = merge_phases([(p.get("phases"), float(p.get("cycles") or 0)) for p in parts])
        cyc = phases[CYCLE]["mean_ms"] if phases else None
        busy = sum(float(p.get("cycles") or 0) * p["phases"][CYCLE]["mean_ms"] for p in parts if p.get("phases"))
        out[bs] = {"cycles": cycles, "requests": req, "tokens": tok, "accept_len": al, "phases": phases,
                   "per_stream_tok_s": round(al * 1000.0 / cyc, 2) if (al and cyc) else None,
                   "throughput_tok_s": round(tok * 1000.0 / busy, 2) if (tok and busy) else None}
    return out


def by_key_summary(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Steady cycles per configuration key over windows (/3 ``by_key``; {} for older records).

    Counts and accept histograms are summed, phases merged (``merge_phases``), ``parts`` merged by
    block id (a hold block that spans two windows becomes one part) and sorted by block id, so a
    reader can put an interval over blocks (``part_rates``)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        for k, v in (r.get("by_key") or {}).items():
            if isinstance(v, dict):
                groups.setdefault(k, []).append(v)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(groups, key=_key_order):
        cells = groups[key]
        head = cells[0]
        cycles = sum(int(c.get("cycles") or 0) for c in cells)
        req = sum(int(c.get("requests") or 0) for c in cells)
        acc = sum(int(c.get("accepted_drafts") or 0) for c in cells)
        hist: dict[int, int] = {}
        for c in cells:
            for n, cnt in (c.get("accept_hist") or {}).items():
                hist[int(n)] = hist.get(int(n), 0) + int(cnt)
        phases = merge_phases([(c.get("phases"), float(c.get("cycles") or 0)) for c in cells])
        cyc = phases[CYCLE]["mean_ms"] if phases else None
        parts: dict[int, list[Any]] = {}
        for c in cells:
            for b, n, ms, tok, rq in c.get("parts") or ():
                p = parts.setdefault(int(b), [int(b), 0, 0.0, 0, 0])
                p[1] += int(n)
                p[2] += float(ms)
                p[3] += int(tok)
                p[4] += int(rq)
        busy = sum(p[2] for p in parts.values())
        tok = acc + req
        al = tok / req if req else None
        steps = head.get("steps")
        out[key] = {
            "steps": steps, "topk": head.get("topk"), "draft_tokens": head.get("draft_tokens"),
            "bs": head.get("bs"), "graph": head.get("graph"), "windows": len(cells), "cycles": cycles,
            "requests": req, "accepted_drafts": acc, "tokens": tok,
            "accept_len": round(al, 4) if al is not None else None,
            "accept_hist": {str(n): hist[n] for n in sorted(hist)},
            "per_position": per_position_rates(hist, steps or max(hist)) if (hist and steps != 0) else [],
            "phases": phases,
            "per_stream_tok_s": round(al * 1000.0 / cyc, 2) if (al and cyc) else None,
            "throughput_tok_s": round(tok * 1000.0 / busy, 2) if (tok and busy) else None,
            "parts": [[p[0], p[1], round(p[2], 4), p[3], p[4]] for _, p in sorted(parts.items())],
        }
    return out


def _key_order(key: str) -> tuple[Any, ...]:
    """by_key keys in (bs, steps, ...) order; unknown parts (?) last."""
    fields = dict((f[0], f[1:]) for f in key.split(".") if f)
    def num(v: str | None) -> float:
        return float(v) if v and v.lstrip("-").isdigit() else float("inf")
    return (num(fields.get("b")), num(fields.get("s")), num(fields.get("k")), num(fields.get("d")), key)


def part_rates(parts: list[list[Any]]) -> list[dict[str, float | None]]:
    """Per part (hold block): cycles, cycle ms and per-stream tok/s of that block alone."""
    out = []
    for b, n, ms, tok, req in parts:
        cyc = ms / n if n else None
        al = tok / req if req else None
        out.append({"block": b, "cycles": n, "cycle_ms": round(cyc, 4) if cyc else None,
                    "per_stream_tok_s": round(al * 1000.0 / cyc, 2) if (al and cyc) else None})
    return out


def control_summary(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The /3 ``control`` over windows: the decider(s), candidates and decode cycles per batch size
    per step count summed (what SGLang's own adaptive mode, or a held schedule, ran where); None
    when no record carries it."""
    ctl = [r["control"] for r in records if isinstance(r.get("control"), dict)]
    if not ctl:
        return None
    choices: dict[str, dict[str, int]] = {}
    for c in ctl:
        for bs, by in (c.get("choices") or {}).items():
            row = choices.setdefault(str(bs), {})
            for steps, n in by.items():
                row[str(steps)] = row.get(str(steps), 0) + int(n)
    deciders = sorted({str(c.get("decider")) for c in ctl if c.get("decider")})
    cands = next((c.get("candidates") for c in reversed(ctl) if c.get("candidates")), None)
    return {"decider": "+".join(deciders) or None, "candidates": cands,
            "choices": {bs: dict(sorted(v.items(), key=lambda kv: _key_order("s" + kv[0])))
                        for bs, v in sorted(choices.items(), key=lambda kv: _key_order("b" + kv[0]))},
            "unmatched_accepts": sum(int(c.get("unmatched_accepts") or 0) for c in ctl),
            "policy": _policy_merge(ctl)}


def _policy_merge(ctl: list[dict[str, Any]]) -> dict[str, Any] | None:
    from .policy_report import merge  # the throughput policy's part of control (issue 25)

    return merge(ctl)


def summarize(run: ProfileRun, *, all_windows: bool = False) -> dict[str, Any]:
    """One record-shaped summary of all windows in a run (cycle-weighted means).

    Per-window percentiles cannot be merged, so the summary keeps means only; accept length is
    recomputed from the summed counts when every window has them.

    Window 1 of a process holds its first decode cycles: SGLang's own start-up warm-up request and
    the probes' lazy set-up. On the H200 (docs/gpu-results.md) that window's mean cycle was 10x
    the steady state and moved a 22-window mean by 40 %, so it is left out when later windows
    exist, unless ``all_windows``; the summary says so.
    """
    recs = run.records
    notes = list(run.notes)
    if not all_windows and run.kind == "jsonl" and len(recs) > 1 and recs[0].get("window") == 1:
        notes.append(f"window 1 ({recs[0].get('cycles')} cycles, process warm-up) left out; "
                     "--all-windows keeps it")
        recs = recs[1:]
    w = [float(r.get("cycles") or 1) for r in recs]
    phases = {}
    for p in (*PHASES, CYCLE):
        vals = [(r["phases"][p]["mean_ms"], wi) for r, wi in zip(recs, w, strict=True)
                if r["phases"].get(p, {}).get("mean_ms") is not None]
        phases[p] = {"mean_ms": round(v, 4) if (v := _wavg(vals)) is not None else None}
    counts = all(r.get("requests") and r.get("accepted_drafts") is not None for r in recs)
    if counts:
        req = sum(r["requests"] for r in recs)
        acc = sum(r["accepted_drafts"] for r in recs)
        accept_len: float | None = acc / req + 1.0
    else:
        req = acc = None
        vals = [(r["accept_len"], wi) for r, wi in zip(recs, w, strict=True) if r.get("accept_len") is not None]
        accept_len = _wavg(vals)
    spec: dict[str, Any] = {"steps": None, "topk": None, "draft_tokens": None}
    for r in recs:
        for k, v in (r.get("spec") or {}).items():
            if v is not None:
                spec[k] = v
    per_position: list[float | None] = []
    if all(r.get("accept_hist") for r in recs) and recs:
        hist: dict[int, int] = {}
        for r in recs:
            for n, c in r["accept_hist"].items():
                hist[int(n)] = hist.get(int(n), 0) + int(c)
        steps = spec["steps"] or max(hist)
        per_position = per_position_rates(hist, steps)
    else:
        pos_recs = [(r["per_position"], wi) for r, wi in zip(recs, w, strict=True) if r.get("per_position")]
        if pos_recs:
            n = max(len(p) for p, _ in pos_recs)
            for i in range(n):
                vals = [(p[i], wi) for p, wi in pos_recs if i < len(p) and p[i] is not None]
                v = _wavg(vals)
                per_position.append(round(v, 4) if v is not None else None)
    cycle_ms = phases[CYCLE]["mean_ms"]
    cycles = [r.get("cycles") for r in recs]
    # the profiler's own measured read cost (records that carry it): host ms per window spent
    # waiting for the GPU and reading the timers, over the cycles it covered
    probe_us = None
    if recs and all(r.get("probe_read_ms") is not None and r.get("cycles") for r in recs):
        spent = sum(r["probe_read_ms"] + (r.get("probe_wait_ms") or 0.0) for r in recs)
        probe_us = round(1000.0 * spent / sum(r["cycles"] for r in recs), 2)
    modes = sorted({str(r.get("mode")) for r in recs})
    ranks = sorted({r["rank"] for r in recs if isinstance(r.get("rank"), int)})
    steady = steady_summary(recs)
    all_cycles = {"cycles": sum(c for c in cycles if c) if all(cycles) else None, "phases": phases,
                  "accept_len": round(accept_len, 4) if accept_len is not None else None,
                  "eff_tok_s": round(accept_len * 1000.0 / cycle_ms, 2) if (accept_len and cycle_ms) else None}
    basis = "all"
    if steady is not None and steady["phases"] and steady["cycles"]:
        basis = "steady"
        phases = {p: dict(v) for p, v in steady["phases"].items()}
        cycle_ms = phases[CYCLE]["mean_ms"]
        if steady["accept_len"] is not None:
            accept_len = steady["accept_len"]
    elif recs:
        why = ("no steady cycle (every cycle was next to a request boundary)" if steady is not None
               else "records without the steady/boundary split (eagle3_prof/1 or older blocks)")
        notes.append(f"{why}: phases, eff tok/s and break-even use all cycles, including request starts")
    return {
        "file": run.path,
        "kind": run.kind,
        "windows": len(recs),
        "cycles": sum(c for c in cycles if c) if all(cycles) else None,
        "requests": req,
        "accepted_drafts": acc,
        "accept_len": round(accept_len, 4) if accept_len is not None else None,
        "per_position": per_position,
        "phases": phases,
        "eff_tok_s": round(accept_len * 1000.0 / cycle_ms, 2) if (accept_len and cycle_ms) else None,
        "mode": "+".join(modes),
        "spec": spec,
        "sglang_version": next((r.get("sglang_version") for r in reversed(recs) if r.get("sglang_version")), None),
        "route": next((r.get("route") for r in reversed(recs) if r.get("route")), None),
        "legacy": any("legacy" in r for r in recs),
        "probe_read_us_per_cycle": probe_us,
        "rank": ranks[0] if len(ranks) == 1 else None,
        "basis": basis,  # what phases / accept_len / eff_tok_s above are made of
        "all_cycles": all_cycles,
        "steady": steady,
        "boundary": boundary_summary(recs),
        "by_batch": {str(k): v for k, v in by_batch_summary(recs).items()},
        "by_key": by_key_summary(recs),
        "control": control_summary(recs),
        "notes": notes,
    }


def read_client(path: str | Path) -> dict[str, Any]:
    """The client's decode rate and accept length from a result file of the same run:
    our ``bench`` document (``eagle3_bench/1``: per-request decode tok/s, accept length from the
    server's counters), a ladder of them (``eagle3_ladder/1``: ``levels``, one such client per
    concurrency) or SGLang ``bench_serving`` output (a JSON object or JSONL of them, the
    last line counts: decode tok/s = 1000 / median TPOT, the TPOT excluding the first token)."""
    from .bench import LADDER_SCHEMA
    from .bench import SCHEMA as BENCH_SCHEMA

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})", exit_code=2) from None
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


def _bench_client(doc: dict[str, Any], path: str | Path) -> dict[str, Any]:
    s = doc.get("summary") or {}
    dec = (s.get("decode_tok_s") or {})
    return {"file": str(path), "kind": "sgl-eagle3 bench", "decode_tok_s": dec.get("avg"),
            "decode_def": "per-request decode tok/s (first token excluded), mean over runs",
            "accept_len": s.get("accept_length"),
            "concurrency": (doc.get("params") or {}).get("concurrency"), "span": _bench_span(doc)}


def _check_client(doc: dict[str, Any], where: str) -> None:
    """The figures read_client uses: finite numbers >= 0 (counts for concurrency), one line each."""
    from ..documents.records import BenchResult
    from .bench import SCHEMA as BENCH_SCHEMA

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


_RANK_SUFFIX = re.compile(r"^(?P<base>.+)\.rank(?P<rank>\d+)$")


def rank_base(path: str | Path) -> tuple[str, int | None]:
    """(``EAGLE3_PROFILE_OUT`` path, rank) of a per-rank stream ``<out>.rank<N>``; (path, None) else."""
    m = _RANK_SUFFIX.match(str(path))
    return (m["base"], int(m["rank"])) if m else (str(path), None)


def rank_siblings(path: str | Path) -> list[Path]:
    """The other TP ranks' streams written beside ``path`` (``<path>.rank<N>``), by rank."""
    p = Path(rank_base(path)[0])
    found = [(rank_base(q)[1], q) for q in p.parent.glob(p.name + ".rank*")]
    return [q for r, q in sorted((r, q) for r, q in found if r is not None)]


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
