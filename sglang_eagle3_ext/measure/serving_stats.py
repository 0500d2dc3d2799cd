"""Latency figures of an open-loop run, defined as SGLang's bench_serving defines them.

Source: SGLang 0.5.16 and 0.5.23 ``sglang/benchmark/serving.py`` (``calculate_metrics``,
``async_request_openai_chat_completions``) and 0.5.23 ``sglang/benchmark/goodput.py``:

- TTFT: request sent -> first chunk with generated text (``content`` or ``reasoning_content``).
- E2E latency: request sent -> the last stream line (``[DONE]``).
- TPOT, per request with more than one output token: ``(latency - ttft) / (output_len - 1)``,
  ``output_len`` the server's ``usage.completion_tokens``.
- ITL: the gap between consecutive text chunks, from the second on. A chunk carrying n tokens
  (a speculative verify streams its accepted tokens together) counts as n values of gap / n:
  bench_serving does this for ``sglang-oai-chat`` against a speculative server (``accept_length``
  reported: ``retokenized_itls``, n = the chunk's text re-tokenized) and for ``--backend sglang``
  (n = the meta_info token count); we take n from the per-chunk usage (the server's own count,
  ``continuous_usage_stats``), 1 when the server sends none (its plain-chunk path).
- mean, median, std (population), p90 / p95 / p99 (``np.percentile``'s default linear
  interpolation) and max over all values of successful requests. An empty list gives no figure
  here (bench_serving prints 0).
- Request throughput = completed / duration; output throughput = their completion tokens /
  duration; duration = first send -> last answer.
- Goodput (goodput.py): a request is good when it succeeded and met EVERY given SLO
  (observed <= SLO ms). ``request_goodput`` = good / duration; ``slo_attainment`` = good / all
  requests sent (failed ones included); per metric the same with that SLO alone. SLO keys as
  bench_serving's: ``ttft``, ``tpot`` (0 for a one-token answer) and ``e2el``; plus ours,
  ``itl``: the request's longest per-token ITL (as above) <= MS, i.e. no token of it waited
  longer than that (bench_serving has no per-request ITL SLO).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

from ..runtime.errors import UserError
from ..runtime.probes.window import percentile
from . import quantiles

SLO_KEYS = ("ttft", "tpot", "itl", "e2el")
_SLO_ALIASES = {"e2e": "e2el"}
MAX_SLO_MS = 1e9
STAT_KEYS = ("mean", "p50", "p90", "p95", "p99", "std", "max", "n")


def dist_stats(values: Sequence[float], scale: float = 1000.0) -> dict[str, float | None]:
    """mean / p50 / p90 / p95 / p99 / std / max (x ``scale``: seconds -> ms) and n."""
    return weighted_stats([(v, 1) for v in values], scale)


def weighted_stats(pairs: Iterable[tuple[float, int]], scale: float = 1000.0) -> dict[str, float | None]:
    """The same figures over a multiset given as (value, count) pairs: exactly what numpy gives
    over the expanded list, without expanding it (an ITL list has one value per token)."""
    items = sorted((v, w) for v, w in pairs if w > 0)
    n = sum(w for _, w in items)
    if not n:
        return {k: (0 if k == "n" else None) for k in STAT_KEYS}
    mean = sum(v * w for v, w in items) / n
    var = sum(w * (v - mean) ** 2 for v, w in items) / n
    out: dict[str, float | None] = {"mean": mean, "p50": weighted_percentile(items, n, 50),
                                    "p90": weighted_percentile(items, n, 90),
                                    "p95": weighted_percentile(items, n, 95),
                                    "p99": weighted_percentile(items, n, 99),
                                    "std": math.sqrt(var), "max": items[-1][0]}
    res: dict[str, float | None] = {k: (round(v * scale, 4) if v is not None else None) for k, v in out.items()}
    res["n"] = n
    return res


def weighted_percentile(items: Sequence[tuple[float, int]], n: int, q: float) -> float:
    """np.percentile(expanded, q) (linear) of sorted (value, count) pairs with n values in all."""
    pos = (n - 1) * q / 100.0
    lo = int(pos)
    frac = pos - lo
    v_lo = _at(items, lo)
    return v_lo if frac == 0 else v_lo + (_at(items, min(lo + 1, n - 1)) - v_lo) * frac


def _at(items: Sequence[tuple[float, int]], k: int) -> float:
    """The k-th value (0-based) of the expanded sorted list."""
    acc = 0
    for v, w in items:
        acc += w
        if k < acc:
            return v
    return items[-1][0]


def plain_percentile(values: Sequence[float], q: float) -> float | None:
    return percentile(sorted(values), q) if values else None


# ---------------------------------------------------------------- per request


def iter_itls(times: Sequence[float], tokens: Sequence[int] | None) -> Iterator[tuple[float, int]]:
    """(per-token ITL in s, tokens) for each text chunk after the first. ``tokens``: the cumulative
    completion tokens at each chunk (per-chunk usage) or None (one token per chunk). Computed from
    the stream's chunk log when read: nothing per chunk is kept (quantiles.py)."""
    if tokens is None:
        for a, b in zip(times, islice(times, 1, None), strict=False):  # the next one: one shorter
            yield b - a, 1
        return
    for a, b, c, d in zip(times, islice(times, 1, None), tokens, islice(tokens, 1, None), strict=False):
        n = d - c if d - c > 1 else 1
        yield (b - a) / n, n


def chunk_itls(times: Sequence[float], tokens: Sequence[int] | None) -> list[tuple[float, int]]:
    return list(iter_itls(times, tokens))


def tpot_s(latency_s: float, ttft_s: float, output_len: int) -> float | None:
    return (latency_s - ttft_s) / (output_len - 1) if output_len > 1 else None


# ---------------------------------------------------------------- SLOs and goodput


def parse_slo(text: str | None) -> dict[str, float] | None:
    """``ttft=500,itl=50`` (``:`` works too, bench_serving's ``--goodput ttft:500``) -> {key: ms}."""
    if text is None:
        return None
    out: dict[str, float] = {}
    for part in str(text).replace(" ", ",").split(","):
        if not part:
            continue
        sep = "=" if "=" in part else ":"
        key, _, val = part.partition(sep)
        key = _SLO_ALIASES.get(key.strip().lower(), key.strip().lower())
        if key not in SLO_KEYS or not val:
            raise UserError(f"--slo {text!r}: give KEY=MS pairs, KEY one of {', '.join(SLO_KEYS)} "
                            "(e.g. ttft=500,itl=50)", exit_code=2)
        try:
            ms = float(val)
        except ValueError:
            raise UserError(f"--slo {part!r}: {val!r} is not a number of milliseconds", exit_code=2) from None
        if not 0 < ms <= MAX_SLO_MS:  # NaN fails too
            raise UserError(f"--slo {part!r}: milliseconds, more than 0 and at most {MAX_SLO_MS:g}",
                            exit_code=2)
        if key in out:
            raise UserError(f"--slo {text!r}: {key} given twice", exit_code=2)
        out[key] = ms
    if not out:
        raise UserError(f"--slo {text!r}: no SLO given (e.g. ttft=500,itl=50)", exit_code=2)
    return out


def observed_ms(ttft_s: float, latency_s: float, output_len: int, itl_max_s: float | None) -> dict[str, float]:
    """What each SLO is checked against, in ms (goodput.py; tpot 0 for a one-token answer)."""
    tp = tpot_s(latency_s, ttft_s, output_len)
    return {"ttft": ttft_s * 1000.0, "tpot": (tp or 0.0) * 1000.0, "e2el": latency_s * 1000.0,
            "itl": (itl_max_s or 0.0) * 1000.0}


def meets(obs: dict[str, float], slo: dict[str, float]) -> dict[str, bool]:
    return {k: obs[k] <= v for k, v in slo.items()}


def goodput(met: Sequence[dict[str, bool] | None], slo: dict[str, float], sent: int,
            duration_s: float | None) -> dict[str, Any]:
    """``met``: per successful request, which SLOs it met (None entries: failed requests)."""
    ok = [m for m in met if m is not None]
    good = sum(1 for m in ok if all(m.values()))
    return {"slo_ms": dict(slo), "good": good,
            "request_goodput": round(good / duration_s, 4) if duration_s else None,
            "slo_attainment": round(good / sent, 4) if sent else None,
            "attainment_by_metric": {k: round(sum(1 for m in ok if m[k]) / sent, 4) if sent else None
                                     for k in slo},
            "definition": "good = succeeded and met every SLO (observed <= ms); goodput = good / "
                          "duration; attainment = good / requests sent (bench_serving goodput.py)"}


# ---------------------------------------------------------------- one rate


def summarize_rate(reqs: Sequence[dict[str, Any]], recs: Sequence[Any], duration_s: float,
                   slo: dict[str, float] | None) -> dict[str, Any]:
    """The per-rate figures from the request entries (open_loop._request_entry) and their stream
    records (the chunk logs, for ITL: kept out of the document)."""
    ok = [(e, r) for e, r in zip(reqs, recs, strict=True) if e.get("ttft_ms") is not None]
    tokens = sum(e["tokens"] for e, _ in ok)

    def itl_pairs() -> Iterator[tuple[float, int]]:  # read again on each pass, never stored
        for _, r in ok:
            yield from iter_itls(r.times, r.cum if r.counted else None)
    # the client's decode rate: tokens after the first chunk over the time after it, summed over
    # requests (per stream, weighted by decode time; profile --bench compares it with the probes)
    dec = [(r.completion_tokens - r.first_chunk_tokens, r.last_token_s - r.ttft_s) for _, r in ok
           if r.last_token_s is not None and r.completion_tokens > r.first_chunk_tokens
           and r.last_token_s > r.ttft_s]
    dec_tok = sum(t for t, _ in dec)
    dec_s = sum(s for _, s in dec)
    out: dict[str, Any] = {
        "sent": len(reqs), "completed": len(ok), "failed": len(reqs) - len(ok),
        "duration_s": round(duration_s, 4),
        "request_throughput": round(len(ok) / duration_s, 4),
        "output_throughput": round(tokens / duration_s, 4),
        "total_output_tokens": tokens,
        "total_input_tokens": sum(e["prompt_tokens"] or 0 for e, _ in ok),
        # bench_serving's "concurrency": the mean number of requests in flight
        "concurrency": round(sum(r.latency_s for _, r in ok) / duration_s, 4),
        "ttft_ms": dist_stats([r.ttft_s for _, r in ok]),
        "itl_ms": quantiles.stats(itl_pairs),
        "tpot_ms": dist_stats([t for _, r in ok
                               if (t := tpot_s(r.latency_s, r.ttft_s, r.completion_tokens)) is not None]),
        "e2e_latency_ms": dist_stats([r.latency_s for _, r in ok]),
        "goodput": goodput([e.get("met") for e in reqs], slo, len(reqs), duration_s) if slo else None,
        "decode": {"tokens": dec_tok, "seconds": round(dec_s, 4),
                   "per_stream_tok_s": round(dec_tok / dec_s, 2) if dec_s > 0 else None},
        "expected_accept_len": expected_accept(ok),
    }
    return out


def expected_accept(ok: Sequence[tuple[dict[str, Any], Any]]) -> dict[str, float] | None:
    """Pooled expectation of the requests served, where every one carries its own
    (``meta.expect.accept_len`` per steps or tree key, at its length): all tokens over all
    expected verifies, the way SGLang's counter pools them."""
    exps = [(e["tokens"], ((e.get("meta") or {}).get("expect") or {}).get("accept_len")) for e, _ in ok]
    if not exps or not all(isinstance(x, dict) and x for _, x in exps):
        return None
    keys = set.intersection(*(set(x) for _, x in exps))
    out = {}
    for k in sorted(keys, key=lambda s: (len(s), s)):
        vals = [(t, x[k]) for t, x in exps]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1 for _, v in vals):
            verifies = sum(t / v for t, v in vals)
            out[k] = round(sum(t for t, _ in vals) / verifies, 4) if verifies else None
    return out or None
