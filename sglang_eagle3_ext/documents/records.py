"""Typed views of the JSON records passed between stages, with a checked, versioned round trip.

Six kinds (docs/reference/architecture.md, "Records"): the probes' window record (``eagle3_prof/1|2|3``),
the bench result (``eagle3_bench/1``), the concurrency ladder (``eagle3_ladder/1``), the sweep
results (``eagle3_sweep/1``), the scan result (``eagle3_scan/1``) and the open-loop bench
(``eagle3_serving/1``). ``from_json(obj, origin)`` checks the schema name and version, the
required fields and the JSON type of every known field, and raises ``UserError`` (exit 2) with one
line naming ``origin`` (a file, or ``file:line``) and the field. ``to_json`` gives back the same
dict: unknown fields ride along in ``extra``, so ``to_json(from_json(x)) == x``.

Workbench side only: the probes and the plugin run inside SGLang and write plain dicts with the
standard library; they never import this module (tests/test_records.py scans them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from ..runtime.errors import UserError

# JSON type names -> (check, words for the message)
_TYPES: dict[str, tuple[Any, str]] = {
    # finite: NaN / Infinity (which Python's json reads) are no figure of ours
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
               "a number"),
    "text": (lambda v: isinstance(v, str), "text"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "list": (lambda v: isinstance(v, list), "a list"),
}


def _spec(json_type: str, *, required: bool = False, nullable: bool = True) -> Any:
    """A dataclass field that says how its JSON value is checked."""
    meta = {"json": json_type, "required": required, "nullable": nullable}
    return field(default=None, metadata=meta)


T = TypeVar("T", bound="Record")

MAX_COUNT = 2**53  # beyond a float's exact integers a count is garbage (and overflows float sums)


def count_error(v: Any) -> str | None:
    """Why ``v`` is not a count (a whole number 0 <= v < 2**53), or None."""
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_COUNT:
        return None
    return f"must be a count (a whole number >= 0), got {_short(v)}"


def amount_error(v: Any) -> str | None:
    """Why ``v`` is not a finite number >= 0 (a time, a rate, an accept length), or None."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 \
            and abs(v) < MAX_COUNT:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= MAX_COUNT:
        return f"must be below {float(MAX_COUNT):.3g} (no real figure is that large), got {_short(v)}"
    return f"must be a finite number >= 0, got {_short(v)}"


@dataclass
class Record:
    """Common part: schema version, fields present in the source, and fields we do not model."""

    NAME: ClassVar[str] = ""
    VERSIONS: ClassVar[tuple[int, ...]] = ()
    KIND: ClassVar[str] = "record"
    COUNTS: ClassVar[frozenset[str]] = frozenset()  # number fields that must be counts
    NONNEG: ClassVar[bool] = False                  # every other number field finite and >= 0

    version: int = 0
    present: frozenset[str] = frozenset()
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def accepted(cls) -> tuple[str, ...]:
        return tuple(f"{cls.NAME}/{v}" for v in cls.VERSIONS)

    @classmethod
    def from_json(cls: type[T], obj: Any, origin: str) -> T:
        if not isinstance(obj, dict):
            raise UserError(f"{origin}: a {cls.KIND} must be a JSON object, got {type(obj).__name__}",
                            exit_code=2)
        schema = obj.get("schema")
        name, _, ver = schema.rpartition("/") if isinstance(schema, str) else ("", "", "")
        if name != cls.NAME:
            raise UserError(f"{origin}: schema is {schema!r}, expected one of {', '.join(cls.accepted())}",
                            exit_code=2)
        if not (ver.isdigit() and int(ver) in cls.VERSIONS):
            raise UserError(f"{origin}: schema {schema!r} is a version this tool does not read "
                            f"(it reads {', '.join(cls.accepted())})", exit_code=2)
        kw: dict[str, Any] = {}
        for f in _model_fields(cls):
            meta = f.metadata
            if f.name not in obj:
                if meta["required"]:
                    raise UserError(f"{origin}: record lacks {f.name!r}", exit_code=2)
                continue
            v = obj[f.name]
            ok, words = _TYPES[meta["json"]]
            if not ((v is None and meta["nullable"]) or ok(v)):
                raise UserError(f"{origin}: {f.name} must be {words}, got {_short(v)}", exit_code=2)
            if v is not None and meta["json"] == "number":
                why = count_error(v) if f.name in cls.COUNTS else amount_error(v) if cls.NONNEG else None
                if why:
                    raise UserError(f"{origin}: {f.name} {why}", exit_code=2)
            kw[f.name] = v
        known = {f.name for f in _model_fields(cls)} | {"schema"}
        extra = {k: v for k, v in obj.items() if k not in known}
        return cls(version=int(ver), present=frozenset(kw), extra=extra, **kw)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": f"{self.NAME}/{self.version}"}
        for f in _model_fields(type(self)):
            if f.name in self.present:
                out[f.name] = getattr(self, f.name)
        out.update(self.extra)
        return out


def _model_fields(cls: type) -> list[Any]:
    return [f for f in fields(cls) if "json" in f.metadata]


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


@dataclass
class WindowRecord(Record):
    """One profiling window from the probes (probes/window.py ``build_record``); /2 adds the split,
    /3 the per-configuration split (``by_key``) and the step ``control``."""

    NAME: ClassVar[str] = "eagle3_prof"
    VERSIONS: ClassVar[tuple[int, ...]] = (1, 2, 3)
    KIND: ClassVar[str] = "window record"
    COUNTS: ClassVar[frozenset[str]] = frozenset(
        {"cycles", "window", "requests", "accepted_drafts", "tokens", "rank", "tp_size", "idle_cycles"})
    NONNEG: ClassVar[bool] = True

    cycles: float | None = _spec("number", required=True)
    phases: dict[str, Any] | None = _spec("object", required=True, nullable=False)
    mode: str | None = _spec("text", required=True)
    window: float | None = _spec("number")
    requests: float | None = _spec("number")
    accepted_drafts: float | None = _spec("number")
    tokens: float | None = _spec("number")
    accept_len: float | None = _spec("number")
    accept_len_def: str | None = _spec("text")
    accept_hist: dict[str, Any] | None = _spec("object")
    per_position: list[Any] | None = _spec("list")
    per_position_def: str | None = _spec("text")
    eff_tok_s: float | None = _spec("number")
    throughput_tok_s: float | None = _spec("number")
    route: str | None = _spec("text")
    sglang_version: str | None = _spec("text")
    spec: dict[str, Any] | None = _spec("object")
    rank: float | None = _spec("number")
    tp_size: float | None = _spec("number")
    idle_cycles: float | None = _spec("number")
    time: str | None = _spec("text")
    probe_wait_ms: float | None = _spec("number")
    probe_read_ms: float | None = _spec("number")
    steady: dict[str, Any] | None = _spec("object")  # /2
    boundary: dict[str, Any] | None = _spec("object")  # /2
    by_batch: dict[str, Any] | None = _spec("object")  # /2
    by_key: dict[str, Any] | None = _spec("object")  # /3: "s{steps}.k{topk}.d{dt}.b{bs}.{g|e|u}" -> cell
    control: dict[str, Any] | None = _spec("object")  # /3: decider, block, candidates, choices


@dataclass
class BenchResult(Record):
    """One bench run set (bench.py ``build_result``)."""

    NAME: ClassVar[str] = "eagle3_bench"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    KIND: ClassVar[str] = "bench result"

    summary: dict[str, Any] | None = _spec("object", required=True, nullable=False)
    label: str | None = _spec("text")
    url: str | None = _spec("text")
    model: str | None = _spec("text")
    time: str | None = _spec("text")
    counting: str | None = _spec("text")
    params: dict[str, Any] | None = _spec("object")
    errors: list[Any] | None = _spec("list")
    runs: list[Any] | None = _spec("list")
    warmup_runs: list[Any] | None = _spec("list")


@dataclass
class Ladder(Record):
    """One bench per concurrency level (bench.py ``run_ladder``)."""

    NAME: ClassVar[str] = "eagle3_ladder"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    KIND: ClassVar[str] = "ladder"

    levels: list[Any] | None = _spec("list", required=True, nullable=False)
    label: str | None = _spec("text")
    url: str | None = _spec("text")
    model: str | None = _spec("text")
    time: str | None = _spec("text")
    params: dict[str, Any] | None = _spec("object")
    definitions: dict[str, Any] | None = _spec("object")


@dataclass
class SweepResults(Record):
    """A sweep's results.json (sweep.py ``run``)."""

    NAME: ClassVar[str] = "eagle3_sweep"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    KIND: ClassVar[str] = "sweep results file"

    configs: list[Any] | None = _spec("list", required=True, nullable=False)
    name: str | None = _spec("text")
    sweep_file: str | None = _spec("text")
    started: str | None = _spec("text")
    updated: str | None = _spec("text")
    skipped: list[Any] | None = _spec("list")
    analysis: dict[str, Any] | None = _spec("object")


@dataclass
class ScanResult(Record):
    """A scan's scan.json (scan.py ``run_scan``): one server, every candidate step count held in turn."""

    NAME: ClassVar[str] = "eagle3_scan"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    KIND: ClassVar[str] = "scan result"

    cells: list[Any] | None = _spec("list", required=True, nullable=False)
    candidates: list[Any] | None = _spec("list", required=True, nullable=False)
    levels: list[Any] | None = _spec("list", required=True, nullable=False)
    sglang_version: str | None = _spec("text")
    model: str | None = _spec("text")
    draft: str | None = _spec("text")
    block: float | None = _spec("number")
    started: str | None = _spec("text")
    finished: str | None = _spec("text")
    baseline: dict[str, Any] | None = _spec("object")
    client: dict[str, Any] | None = _spec("object")
    best: dict[str, Any] | None = _spec("object")
    adaptive: dict[str, Any] | None = _spec("object")


@dataclass
class ServingResult(Record):
    """An open-loop bench (open_loop.py ``run_open_loop``): one entry per request rate."""

    NAME: ClassVar[str] = "eagle3_serving"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    KIND: ClassVar[str] = "open-loop bench result"

    rates: list[Any] | None = _spec("list", required=True, nullable=False)
    label: str | None = _spec("text")
    url: str | None = _spec("text")
    model: str | None = _spec("text")
    started: str | None = _spec("text")
    time: str | None = _spec("text")
    params: dict[str, Any] | None = _spec("object")
    definitions: dict[str, Any] | None = _spec("object")


KINDS: tuple[type[Record], ...] = (WindowRecord, BenchResult, Ladder, SweepResults, ScanResult,
                                   ServingResult)


def from_json(obj: Any, origin: str, kind: type[T]) -> T:
    """``kind.from_json``: a checked typed view of ``obj`` read from ``origin``."""
    return kind.from_json(obj, origin)


def to_json(rec: Record) -> dict[str, Any]:
    """The plain JSON dict again (equal to what ``from_json`` read)."""
    return rec.to_json()
