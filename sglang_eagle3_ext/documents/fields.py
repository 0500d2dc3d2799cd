"""Typed field checks for the documents: each reader declares the shape of what it reads, and one
walk checks it, refusing with one line that names the file and the field
(``scan.json: cells[3].cycle_ms must be a finite number >= 0, got '2.0'``): never a KeyError,
TypeError or OverflowError later in a table or a sum.

A shape is one of
- a kind name: ``count`` (whole number 0 <= n < 2**53), ``amount`` (finite number >= 0, below
  2**53), ``signed`` (finite number), ``int`` (whole number), ``rate`` (0..1), ``steps`` / ``topk`` / ``draft_tokens``
  (runtime/bounds.py), ``bs`` (1..MAX_BATCH),
  ``text``, ``bool``, ``any``;
- ``Opt(shape)``: also null (``Req(Opt(shape))``: present, maybe null);
- a dict ``{key: shape}``: an object; the keys listed are checked where present, ``Req(shape)``
  ones must be present; other keys ride along unchecked;
- ``[shape]``: a list whose items are all ``shape``;
- ``MapOf(key_kind, shape)``: an object whose keys are ``key_kind`` written as text ("8"; "text":
  any key; a kind ending in "?" also takes the key "?", the probes' unknown) and whose values are
  all ``shape``;
- ``Tup((shape, ...))``: a list of exactly these; ``Pair(shape)`` = ``Tup((shape, shape))``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..runtime.bounds import MAX_BATCH, MAX_COUNT, MAX_DRAFT_TOKENS, MAX_STEPS, MAX_TOPK
from ..runtime.errors import UserError


@dataclass(frozen=True)
class Opt:
    shape: Any


@dataclass(frozen=True)
class Req:
    shape: Any


@dataclass(frozen=True)
class MapOf:
    key: str
    shape: Any


@dataclass(frozen=True)
class Tup:
    shapes: tuple[Any, ...]


def Pair(shape: Any) -> Tup:  # noqa: N802 - a shape constructor, read like the others
    return Tup((shape, shape))


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) < MAX_COUNT


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_TREE_LABEL = re.compile(r"^\d{1,3}x\d{1,3}x\d{1,3}$")

KINDS: dict[str, tuple[Any, str]] = {
    "count": (lambda v: _int(v) and 0 <= v < MAX_COUNT, "a count (a whole number >= 0)"),
    "amount": (lambda v: _num(v) and v >= 0, "a finite number >= 0"),
    "signed": (_num, "a finite number"),
    "int": (lambda v: _int(v) and abs(v) < MAX_COUNT, "a whole number"),
    "rate": (lambda v: _num(v) and 0 <= v <= 1, "a rate between 0 and 1"),
    "steps": (lambda v: _int(v) and 0 <= v <= MAX_STEPS, f"a step count 0..{MAX_STEPS}"),
    # a speculative state: a chain's step count, or a tree's label STEPSxTOPKxTOKENS (runtime/specstate.py)
    "state": (lambda v: (_int(v) and 0 <= v <= MAX_STEPS) or (isinstance(v, str) and _TREE_LABEL.match(v) is not None),
              f"a step count 0..{MAX_STEPS} or a tree STEPSxTOPKxTOKENS"),
    "bs": (lambda v: _int(v) and 1 <= v <= MAX_BATCH, f"a batch size 1..{MAX_BATCH}"),
    "topk": (lambda v: _int(v) and 0 <= v <= MAX_TOPK, f"a topk 0..{MAX_TOPK}"),
    "draft_tokens": (lambda v: _int(v) and 0 <= v <= MAX_DRAFT_TOKENS, f"a draft token count 0..{MAX_DRAFT_TOKENS}"),
    "text": (lambda v: isinstance(v, str), "text"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "any": (lambda v: True, "anything"),
}


def short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 48 else r[:45] + "..."


def bad(origin: str, name: str, why: str) -> UserError:
    return UserError(f"{origin}: {name} {why}" if name else f"{origin}: {why}", exit_code=2)


def _type_name(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "true/false"}.get(type(v), short(v))


def check(value: Any, shape: Any, origin: str, name: str = "") -> Any:
    """``value`` if it has ``shape``; else UserError(2) naming ``origin`` and the field path."""
    stack = [(value, shape, name)]
    while stack:
        v, sh, path = stack.pop()
        while isinstance(sh, (Opt, Req)):
            if isinstance(sh, Opt) and v is None:
                break
            sh = sh.shape
        if isinstance(sh, Opt):
            continue  # a null where null is allowed
        if isinstance(sh, str):
            ok, words = KINDS[sh]
            if not ok(v):
                raise bad(origin, path or "the value", f"must be {words}, got {short(v)}")
        elif isinstance(sh, dict):
            if not isinstance(v, dict):
                raise bad(origin, path or "the document", f"must be an object, got {_type_name(v)}")
            for k, sub in sh.items():
                if k in v:
                    stack.append((v[k], sub, f"{path}.{k}" if path else k))
                elif isinstance(sub, Req):
                    raise bad(origin, "", f"{path + '.' if path else ''}{k} is missing")
        elif isinstance(sh, list):
            if not isinstance(v, list):
                raise bad(origin, path, f"must be a list, got {_type_name(v)}")
            stack.extend((x, sh[0], f"{path}[{i}]") for i, x in enumerate(v))
        elif isinstance(sh, Tup):
            if not (isinstance(v, list) and len(v) == len(sh.shapes)):
                raise bad(origin, path, f"must be a list of {len(sh.shapes)}, got {short(v)}")
            stack.extend((x, s, f"{path}[{i}]") for i, (x, s) in enumerate(zip(v, sh.shapes, strict=True)))
        elif isinstance(sh, MapOf):
            if not isinstance(v, dict):
                raise bad(origin, path, f"must be an object, got {_type_name(v)}")
            unknown = sh.key.endswith("?")  # "bs?": a batch size, or "?" (the probes' unknown)
            kok, kwords = KINDS[sh.key.rstrip("?")]
            for k, x in v.items():
                if sh.key == "text" or (unknown and k == "?"):
                    pass  # any key (JSON keys are text)
                elif not (isinstance(k, str) and ((k.isdigit() and len(k) <= 20 and kok(int(k)))
                                                  or (sh.key.rstrip("?") == "state" and kok(k)))):
                    raise bad(origin, path, f"keys must be {kwords} written as text, got {short(k)}")
                stack.append((x, sh.shape, f"{path}.{k}"))
        else:  # pragma: no cover - a shape of ours
            raise TypeError(f"unknown shape {sh!r}")
    return value
