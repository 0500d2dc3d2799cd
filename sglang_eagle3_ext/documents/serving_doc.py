"""The open-loop bench document (``eagle3_serving/1``, `bench --request-rate ... --out`): read,
checked, and one rate's figures.

Per rate (``rates[i]``): ``request_rate`` (req/s, or ``"inf"``), ``summary`` (the figures, below),
``schedule`` (how well the client kept the arrival times), ``span`` (epoch seconds the schedule
ran: profile --bench lines the probes' windows up with it), ``requests`` (one entry each),
``errors``, ``warnings``. Every figure the readers use is checked to be a finite number >= 0
(counts whole), with one line naming the file, the rate and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from .jsonio import read_json
from .records import ServingResult, amount_error, count_error

SCHEMA = "eagle3_serving/1"

DEFINITIONS = {
    "ttft_ms": "request sent -> first chunk with generated text (SGLang bench_serving's TTFT)",
    "itl_ms": "gap between consecutive text chunks, a chunk of n tokens counted as n values of "
              "gap / n (bench_serving's per-token ITL against a speculative server); n from per-chunk usage",
    "tpot_ms": "per request (latency - ttft) / (completion tokens - 1), requests with 2+ tokens",
    "e2e_latency_ms": "request sent -> last stream line ([DONE])",
    "percentiles": "numpy's linear interpolation over every value of successful requests; std: population",
    "request_throughput": "completed requests / duration (first send -> last answer), req/s",
    "output_throughput": "completion tokens of completed requests / duration, tok/s",
    "goodput": "good = succeeded and met every SLO (observed <= ms; itl: the request's longest "
               "per-token ITL); request_goodput = good / duration; slo_attainment = good / sent",
    "accept_length": "completion tokens / verify calls, incl. the bonus token (sglext per request, "
                     "else SGLang's counter differences)",
    "accept_length_decode": "the same verifies without each request's first token (its prefill's): "
                            "tokens made by verifies per verify, what the probes count",
    "decode.per_stream_tok_s": "sum over completed requests of tokens after the first chunk / sum "
                               "of their first-to-last text chunk seconds",
    "late_ms": "how long after its arrival time (and a free slot) the client sent a request",
    "queued_ms": "how long a request waited for a --max-concurrency slot (TTFT starts after it)",
}

STATS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_latency_ms")
_AMOUNTS = ("duration_s", "request_throughput", "output_throughput", "concurrency", "accept_length",
            "accept_length_decode")
_COUNTS = ("sent", "completed", "failed", "total_output_tokens")


def _bad(where: str, what: str) -> UserError:
    return UserError(f"{where}: {what}", exit_code=2)


def check_rate(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, dict) or not isinstance(entry.get("summary"), dict):
        raise _bad(where, "each rate needs a 'summary' object")
    r = entry.get("request_rate")
    if r != "inf" and (amount_error(r) or not r):
        why = amount_error(r) if amount_error(r) and "below" in amount_error(r) else f"must be a number > 0 or \"inf\", got {r!r:.40}"
        raise _bad(where, f"request_rate {why}")
    s = entry["summary"]
    for k in _COUNTS:
        if k in s and count_error(s[k]):
            raise _bad(where, f"summary.{k} {count_error(s[k])}")
    for k in _AMOUNTS:
        if s.get(k) is not None and amount_error(s[k]):
            raise _bad(where, f"summary.{k} {amount_error(s[k])}")
    for k in STATS:
        v = s.get(k)
        if v is None:
            continue
        if not isinstance(v, dict):
            raise _bad(where, f"summary.{k} must be an object")
        for q, x in v.items():
            if x is not None and amount_error(x):
                raise _bad(where, f"summary.{k}.{q} {amount_error(x)}")
    for k in ("decode", "goodput"):
        v = s.get(k)
        if v is not None and not isinstance(v, dict):
            raise _bad(where, f"summary.{k} must be an object")
        for q in ("tokens", "seconds", "per_stream_tok_s", "request_goodput", "slo_attainment"):
            x = (v or {}).get(q)
            if x is not None and amount_error(x):
                raise _bad(where, f"summary.{k}.{q} {amount_error(x)}")
    span = entry.get("span")
    if span is not None and not (isinstance(span, list) and len(span) == 2
                                 and not any(amount_error(t) for t in span) and span[0] <= span[1]):
        raise _bad(where, "span must be [start, end] epoch seconds")
    return entry


def check(doc: Any, origin: str) -> dict[str, Any]:
    """A checked eagle3_serving/1 document (records.ServingResult plus every rate's figures)."""
    ServingResult.from_json(doc, origin)
    if not doc["rates"]:
        raise _bad(origin, "no rates in the document")
    for i, e in enumerate(doc["rates"]):
        check_rate(e, f"{origin} rate {i + 1}")
    return doc


def load_serving(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    data = read_json(p)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(f"{p}: not an open-loop bench result (schema {SCHEMA!r} expected)", exit_code=2)
    return check(data, str(p))


def rate_label(rate: Any) -> str:
    return "inf" if rate == "inf" else f"{rate:g}"
