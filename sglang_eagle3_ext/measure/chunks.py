"""Checked reads of the parts of a chat-completion stream chunk that bench uses.

A server's chunk is input like any file: each accessor returns the value when it has the type
the OpenAI stream format gives it (SGLang ``entrypoints/openai/protocol.py``), ``None`` when it
is absent, and raises ``BadStream`` (the request fails with that line) for anything else, e.g.
``data: [1]``, ``"usage": "x"``, ``"completion_tokens": "12"`` or ``1e400``.
Counters that cannot be true are refused after the stream (``impossible_counts``).
"""

from __future__ import annotations

import math
from typing import Any

from .httpio import BadStream

MAX_COUNT = 2**53  # a token or verify count beyond a float's exact integers is not a count


def _kind(v: Any) -> str:
    names = {dict: "an object", list: "a list", str: "text", bool: "true/false", type(None): "null"}
    return names.get(type(v), "a number")


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def obj(parent: dict[str, Any], key: str, where: str) -> dict[str, Any] | None:
    v = parent.get(key)
    if v is None or isinstance(v, dict):
        return v
    raise BadStream(f"{where}{key} is {_kind(v)}, not an object")


def text(parent: dict[str, Any], key: str, where: str) -> str | None:
    v = parent.get(key)
    if v is None or isinstance(v, str):
        return v
    raise BadStream(f"{where}{key} is {_kind(v)}, not text")


def count(parent: dict[str, Any], key: str, where: str) -> int | None:
    v = parent.get(key)
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_COUNT:
        return v
    raise BadStream(f"{where}{key} is {_short(v)}, not a count (a whole number >= 0)")


def number(parent: dict[str, Any], key: str, where: str) -> float | None:
    v = parent.get(key)
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0:
        return float(v)
    raise BadStream(f"{where}{key} is {_short(v)}, not a number >= 0")


def chunk_object(chunk: Any) -> dict[str, Any]:
    if not isinstance(chunk, dict):
        raise BadStream(f"a stream chunk is {_kind(chunk)} ({_short(chunk)}), not a JSON object")
    return chunk


def choices(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    v = chunk.get("choices")
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(c, dict) for c in v):
        raise BadStream(f"choices is {_kind(v)} ({_short(v)}), not a list of objects")
    return v


def spec_details(chunk: dict[str, Any]) -> dict[str, Any] | None:
    """``sglext.spec_tokens_details`` (an object, or a list of them: one per choice)."""
    ext = obj(chunk, "sglext", "")
    if ext is None:
        return None
    spec = ext.get("spec_tokens_details")
    if isinstance(spec, list):
        spec = spec[0] if spec else None
    if spec is None or isinstance(spec, dict):
        return spec
    raise BadStream(f"sglext.spec_tokens_details is {_kind(spec)}, not an object")


CHAT_WORDS = ("usage.completion_tokens", "max_tokens", "sglext spec_verify_ct")
GENERATE_WORDS = ("meta_info.completion_tokens", "sampling_params.max_new_tokens", "meta_info.spec_verify_ct")


def impossible_counts(tokens: int, first: int, verify: int | None, max_tokens: int,
                      words: tuple[str, str, str] = CHAT_WORDS) -> str | None:
    """Why the request's counters cannot be true, or None. A request never gets more tokens than
    it asked for (SGLang caps output at max_new_tokens: ``managers/schedule_batch.py``
    ``_cap_finished_len_at_max_new_tokens``, 0.5.23), and every verify yields at least one token
    (accept length >= 1, SGLang's own ``completion_tokens / spec_verify_ct``)."""
    count, cap, verifies = words
    if tokens > max_tokens:
        return (f"counters cannot be true: {count} {tokens} > {cap} {max_tokens} "
                "(figures of this request dropped)")
    if first > tokens:
        return (f"counters cannot be true: the first chunk's {count} says {first} tokens, the last "
                f"{tokens} (figures of this request dropped)")
    if verify is not None and verify > tokens:
        return (f"counters cannot be true: {verifies} {verify} > completion tokens {tokens} "
                f"(accept length {tokens / verify:.2f} < 1; figures of this request dropped)")
    return None
