"""The probes' files read back and checked: eagle3_prof/1|2|3 JSONL or a log with EAGLE3_PROF blocks."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..documents import kinds
from ..documents.prof_blocks import _block_record, _scan_blocks
from ..documents.records import MAX_COUNT, WindowRecord, amount_error, count_error
from ..runtime.errors import UserError
from ..runtime.probes.window import (
    CYCLE,
    PHASES,
)
from ..runtime.safeparse import LOG_LIMIT, Unreadable, json_loads, read_text
from .fields import MapOf, Opt, Tup
from .fields import check as check_shape


@dataclass
class ProfileRun:
    """Everything read from one file: its window records and what was converted or assumed."""

    path: str
    kind: str  # "jsonl" | "log"
    records: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


def _check_record(rec: Any, where: str) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise UserError(f"{where}: a JSONL line must be an object, got {type(rec).__name__}", exit_code=2)
    # schema name/version, required fields (cycles, phases, mode) and top-level JSON types
    WindowRecord.from_json(rec, where)
    phases = rec["phases"]
    try:
        for p in (*PHASES, CYCLE):
            float(phases[p]["mean_ms"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{where}: phases must hold mean_ms for draft/verify/extend/other/cycle ({exc})",
                        exit_code=2) from None
    for name, ph in phases.items():
        bad = [k for k, v in ph.items() if v is not None and not _is_num(v)] if isinstance(ph, dict) else [name]
        if bad:
            raise UserError(f"{where}: phases.{name}.{bad[0]} must be a number", exit_code=2)
    for k in ("per_position",):
        v = rec.get(k)
        if v is not None and not (isinstance(v, list) and all(x is None or _is_num(x) for x in v)):
            raise UserError(f"{where}: {k} must be a list of numbers", exit_code=2)
    hist = rec.get("accept_hist")
    if hist is not None and not (isinstance(hist, dict) and all(_is_num(x) for x in hist.values())):
        raise UserError(f"{where}: accept_hist must map lengths to counts", exit_code=2)
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
    check_shape({k: rec[k] for k in ("by_key", "control") if k in rec}, V3_SHAPE, where)


# /3: the per-configuration split and the step control (hold / policy) part, as read by
# accounting.by_key_summary / control_summary, policy_report and the scan (probes/window.py,
# runtime/stepctl.control and policy.PolicyDecider.window_control write them)
_PH = Opt(MapOf("text", Opt(MapOf("text", Opt("amount")))))
_CHOICES = MapOf("bs?", MapOf("state?", "count"))  # "?" = unknown (probes/window.py choices)
_BY_STEPS = MapOf("bs", MapOf("state", "count"))    # the policy's own: always known (chains and trees)
BY_KEY = MapOf("text", {
    "steps": Opt("steps"), "topk": Opt("topk"), "draft_tokens": Opt("draft_tokens"), "bs": Opt("bs"),
    "graph": Opt("bool"), "cycles": "count", "requests": Opt("count"), "accepted_drafts": Opt("count"),
    "tokens": Opt("count"), "accept_len": Opt("amount"), "accept_hist": Opt(MapOf("steps", "count")),
    "per_position": Opt([Opt("rate")]), "phases": _PH, "per_stream_tok_s": Opt("amount"),
    "throughput_tok_s": Opt("amount"), "parts": Opt([Tup(("int", "count", "amount", "count", "count"))])})
CONTROL = {
    "decider": Opt("text"), "block": Opt("int"), "candidates": Opt(["state"]), "choices": Opt(_CHOICES),
    "unmatched_accepts": Opt("count"),
    "policy": Opt({"explore": Opt(_BY_STEPS), "chosen": Opt(_BY_STEPS), "switches": Opt("count"),
                   "expected_per_stream_tok_s": Opt(MapOf("bs", MapOf("state", Opt("amount")))),
                   "rates": Opt([Opt("rate")]), "tiers": Opt(MapOf("bs", Opt("state"))), "source": Opt("text"),
                   "expected_def": Opt("text")})}
V3_SHAPE = {"by_key": Opt(BY_KEY), "control": Opt(CONTROL)}


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def load(path: str | Path) -> ProfileRun:
    """Read one file (JSONL from EAGLE3_PROFILE_OUT, or any text log with EAGLE3_PROF blocks).

    A file still being written may end in half a line: that last line (no newline after it) is
    skipped with a note; a bad line anywhere else refuses the file, naming the line and field.
    Records of two ranks in one file are refused (each rank writes its own stream)."""
    p = Path(path)
    try:  # bounded: at most LOG_LIMIT; /dev/zero or a folder refused before a read; a pipe given by
        # name (`profile <(grep ... server.log)`) is read, bounded, and never waited on forever
        text = read_text(p, what="a probe file or server log", limit=LOG_LIMIT, errors="replace", pipe=True)
    except Unreadable as exc:
        raise UserError(str(exc), exit_code=2) from None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if first.startswith("{"):
        other = kinds.identify(text)  # one whole document of ours (bench.json, scan.json, ...)
        if other is not None:
            raise UserError(kinds.not_probes(str(path), other), exit_code=2)
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
                raise UserError(f"{path}:{i}: not valid JSON ({getattr(exc, 'msg', exc)})", exit_code=2) from None
            records.append(_check_record(rec, f"{path}:{i}"))
            rank0 = _one_rank(rank0, rec, f"{path}:{i}")
        if not records:
            raise UserError(f"{path}: no complete eagle3_prof record yet (only a partial line)")
        return ProfileRun(str(path), "jsonl", records, notes)
    notes = []
    blocks = [b for b in _scan_blocks(text) if b.has_body]
    if not blocks:
        raise UserError(f"{path}: no EAGLE3_PROF block and no eagle3_prof JSONL record found", exit_code=2)
    records = []
    rank0 = None
    for i, b in enumerate(blocks, 1):
        where = f"{path}:{b.line}"
        try:
            rec = _block_record(b, i, str(path), notes)
        except ValueError as exc:  # int() of a number with thousands of digits
            raise UserError(f"{where}: EAGLE3_PROF block holds a number this tool cannot read ({exc})",
                            exit_code=2) from None
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


def warmup_windows(records: list[dict[str, Any]]) -> list[int]:
    """Indices of the records that open a server process's window count (``window`` 1): the
    process's own warm-up. A probe file a restarted server appended to (or a profiler resumed by
    its toggle signal, which counts from 1 again) holds one per start; every one of them is
    warm-up, not just the file's first line. Empty when nothing would be left without them."""
    starts = [i for i, r in enumerate(records) if r.get("window") == 1]
    return starts if len(starts) < len(records) else []


def count_records(path: Path) -> int:
    """How many lines of an existing probe file look like window records (0: none, absent or
    unreadable): `launch --profile-out` says when a server would append to earlier records."""
    try:
        if not path.is_file():  # a FIFO, a device or a folder is never opened here
            return 0
        with open(path, "rb") as f:
            head = f.read(LOG_LIMIT)  # bounded, as every probe file read
        return sum(1 for line in head.splitlines() if line.lstrip().startswith(b"{"))
    except OSError:
        return 0
