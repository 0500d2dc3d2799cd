"""A sweep's results.json (eagle3_sweep/1): read through the bounded reader and checked field by
field (the configs' keys, status, bench documents, ladders and profile summaries that the report,
the analysis, compare and `adaptive write --from` read). The sweep driver (tune/sweep.py) writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from .bench_doc import BENCH, LEVEL_SUMMARY, LIMIT
from .fields import MapOf, Opt, Req, check
from .jsonio import read_json
from .records import SweepResults

SCHEMA = "eagle3_sweep/1"

PROFILE = {"phases": Opt(MapOf("text", Opt({"mean_ms": Opt("amount")}))), "accept_len": Opt("amount"),
           "per_position": Opt([Opt("rate")]), "basis": Opt("text")}
CONFIG = {"name": Req("text"), "slug": Opt("text"), "status": Req("text"), "baseline": Opt("bool"),
          "steps": Opt("steps"), "topk": Opt("topk"), "draft_tokens": Opt("draft_tokens"), "nccl": Opt("text"),
          "custom_all_reduce": Opt("bool"), "bench": Opt(BENCH), "error": Opt("text"), "log_tail": Opt(["text"]),
          "ladder": Opt({"levels": Req([{"concurrency": Req("bs"), "summary": Req(LEVEL_SUMMARY)}])}),
          "profile": Opt(PROFILE), "elapsed_s": Opt("amount")}


def check_results(data: Any, origin: str, *, folders: bool = False) -> dict[str, Any]:
    """The typed check of a results document: UserError(2), one line naming origin and field.
    ``folders``: every config names its folder (``slug``), as the sweep's own reader needs."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(f"{origin}: not a sweep results file ({SCHEMA})", exit_code=2)
    SweepResults.from_json(data, origin)  # schema version, top-level JSON types
    check(data, {"configs": Req([CONFIG]), "analysis": Opt({"tiers": Opt({"predicted": Opt([
        {"batch_size": Req("bs"), "steps": Req("steps"), "per_stream_tok_s": Opt("amount")}])})})}, origin)
    for i, c in enumerate(data["configs"]):
        slug = c.get("slug")
        if slug is None and folders:
            raise UserError(f"{origin}: configs[{i}].slug is missing (the config's folder under configs/)", 2)
        if slug is not None and (not slug or "/" in slug or slug in (".", "..")):  # a folder name
            raise UserError(f"{origin}: configs[{i}].slug {slug!r} is not a folder name", exit_code=2)
    return data


def load_results(path: str | Path, *, missing_ok: bool = True, folders: bool = True) -> dict[str, Any] | None:
    """A sweep's results.json, or None when it does not exist (``missing_ok``: a new sweep).
    ``folders``: every config must name its folder (the sweep's resume and report read there)."""
    p = Path(path)
    if missing_ok and not p.exists() and not p.is_symlink():
        return None
    try:
        data = read_json(p, what="a sweep results file", limit=LIMIT)
    except UserError as exc:
        raise UserError(f"{exc}; move it away to start over" if "not JSON" in str(exc) else str(exc), 2) from None
    return check_results(data, str(p), folders=folders)
