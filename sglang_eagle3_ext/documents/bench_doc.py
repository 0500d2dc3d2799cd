"""The bench documents (eagle3_bench/1 bench.json, eagle3_ladder/1 ladder.json): read and checked, and one ladder level's figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..documents.jsonio import read_json
from ..documents.records import BenchResult, Ladder
from ..runtime.errors import UserError

SCHEMA = "eagle3_bench/1"
LADDER_SCHEMA = "eagle3_ladder/1"


def load_result(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    data = read_json(p)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(f"{p}: not a bench result (schema {SCHEMA!r} expected)", exit_code=2)
    BenchResult.from_json(data, str(p))  # required fields and their JSON types
    return data


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


def load_ladder(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    data = read_json(p)
    if not isinstance(data, dict) or data.get("schema") != LADDER_SCHEMA:
        raise UserError(f"{p}: not a concurrency ladder (schema {LADDER_SCHEMA!r} expected)", 2)
    Ladder.from_json(data, str(p))  # required fields and their JSON types
    return data
