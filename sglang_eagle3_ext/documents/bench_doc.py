"""The bench documents (eagle3_bench/1 bench.json, eagle3_ladder/1 ladder.json): read through the
bounded reader, checked field by field (every field a reader of ours uses: compare, sweep, scan's
client twin, profile --bench, benchmarks/transition.py), and one ladder level's figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..documents.jsonio import read_json
from ..documents.records import BenchResult, Ladder
from ..runtime.errors import UserError
from ..runtime.safeparse import MIB
from .fields import Opt, Req, check

SCHEMA = "eagle3_bench/1"
LADDER_SCHEMA = "eagle3_ladder/1"
LIMIT = 256 * MIB  # per-request records of a long ladder: ~1 KB each

_STAT = Opt({"avg": Req(Opt("amount")), "peak": Opt("amount"), "median": Opt("amount"),
             "min": Opt("amount"), "stdev": Opt("amount")})
SUMMARY = {"decode_tok_s": _STAT, "e2e_tok_s": _STAT, "ttft_s": _STAT, "throughput_tok_s": _STAT,
           "completion_tokens": Opt("count"), "accept_length": Opt("amount"), "accept_source": Opt("text"),
           "ok_runs": Opt("count"), "failed_requests": Opt("count")}
_RATES = ("ttft_s", "last_token_s", "decode_tok_s", "e2e_tok_s", "wall_s", "throughput_tok_s")
REQUEST = {**{k: Opt("amount") for k in (*_RATES, "spec_accept_length")},
           **{k: Opt("count") for k in ("prompt_index", "completion_tokens", "prompt_tokens", "first_chunk_tokens",
                                        "content_chunks", "spec_verify_ct")},
           "error": Opt("text"), "finish_reason": Opt("text")}
RUN = {**{k: Opt("amount") for k in (*_RATES, "accept_length")},
       **{k: Opt("count") for k in ("index", "completion_tokens", "verify_ct")},
       "accept_source": Opt("text"), "requests": Opt([REQUEST])}
BENCH = {"summary": Req(SUMMARY), "label": Opt("text"),
         "params": Opt({"concurrency": Opt("bs"), "runs": Opt("count"), "warmup": Opt("count"),
                        "max_tokens": Opt("count")}),
         "runs": Opt([RUN]), "warmup_runs": Opt([RUN]), "errors": Opt(["any"])}
LEVEL_SUMMARY = {**{k: Opt("amount") for k in ("per_stream_tok_s", "per_stream_tok_s_median", "throughput_tok_s",
                                               "ttft_s", "ttft_s_median", "accept_length")},
                 "accept_source": Opt("text"), "ok_runs": Opt("count"), "failed_requests": Opt("count")}
LEVEL = {"concurrency": Req("bs"), "summary": Req(LEVEL_SUMMARY), "bench": Opt(BENCH)}


def check_result(data: Any, origin: str) -> dict[str, Any]:
    """A bench document (top level, or one inside a sweep's config): UserError(2), one line."""
    if not isinstance(data, dict):
        raise UserError(f"{origin}: a bench result must be a JSON object", exit_code=2)
    return check(data, BENCH, origin)


def load_result(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    data = read_json(p, what="a bench result", limit=LIMIT)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(f"{p}: not a bench result (schema {SCHEMA!r} expected)", exit_code=2)
    BenchResult.from_json(data, str(p))  # schema version, top-level JSON types
    return check_result(data, str(p))


def level_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """The figures of one ladder level: per-stream decode, total throughput, TTFT, accept length."""
    s = doc["summary"]
    return {
        "concurrency": doc["params"]["concurrency"],
        "per_stream_tok_s": s["decode_tok_s"]["avg"],
        "per_stream_tok_s_median": s["decode_tok_s"]["median"],
        "throughput_tok_s": s["throughput_tok_s"]["avg"],
        "ttft_s": s["ttft_s"]["avg"],
        "ttft_s_median": s["ttft_s"]["median"],
        "accept_length": s["accept_length"],
        "accept_source": s["accept_source"],
        "ok_runs": s["ok_runs"],
        "failed_requests": s["failed_requests"],
    }


def check_ladder(data: Any, origin: str) -> dict[str, Any]:
    """A ladder document: schema, every level's concurrency, summary and bench typed."""
    if not isinstance(data, dict) or data.get("schema") != LADDER_SCHEMA:
        raise UserError(f"{origin}: not a concurrency ladder (schema {LADDER_SCHEMA!r} expected)", 2)
    Ladder.from_json(data, origin)  # schema version, top-level JSON types
    return check(data, {"levels": Req([LEVEL])}, origin)


def load_ladder(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    return check_ladder(read_json(p, what="a ladder", limit=LIMIT), str(p))
