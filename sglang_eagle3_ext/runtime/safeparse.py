"""The one bounded loader for YAML and JSON we read from users' files (presets, sweep files, NCCL
presets, patch specs; profile / compare / --prompts / model configs).

PyYAML's ``safe_load`` constructs no objects, but it still expands what a file asks for: an alias
bomb (each level ten aliases of the one before) is a few hundred bytes that our validation then
walks as billions of nodes, and 5000-deep nesting reaches ``RecursionError`` in the composer.
``yaml_load`` first walks the event stream (iterative, nothing built), counting the nesting depth
and the size of the document with every alias expanded, and refuses past ``MAX_DEPTH`` /
``MAX_NODES`` / ``MAX_BYTES`` with one line; a recursive alias (``&a [*a]``) is refused too. Only
then does ``yaml.safe_load`` build it. No libyaml needed.

``json_loads`` is ``json.loads`` whose deep nesting (``RecursionError`` in the decoder, or past
``MAX_DEPTH``) is a ``ValueError`` like any other malformed JSON, so each reader's "not JSON"
line covers it.

Standard library at module level (patch specs are read where the plugin runs); yaml is imported
when a YAML file is read.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import UserError

MAX_DEPTH = 64          # our files nest < 10 deep; model configs < 6
MAX_NODES = 100_000     # nodes with every alias expanded (a preset has < 100)
MAX_BYTES = 4 << 20


class TooDeep(ValueError):
    """JSON nested deeper than MAX_DEPTH."""


def json_loads(text: str | bytes) -> Any:
    try:
        data = json.loads(text)
    except RecursionError:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels") from None
    if json_depth(data) > MAX_DEPTH:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels")
    return data


def json_depth(data: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(data, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            d += 1
            deepest = max(deepest, d)
            if deepest > MAX_DEPTH:
                return deepest
            stack.extend((x, d) for x in node if isinstance(x, (dict, list)))
    return deepest


def check_yaml(text: str, origin: str) -> None:
    """UserError(2) when the YAML in ``text`` nests too deep, expands too far through aliases, or
    aliases itself; yaml.YAMLError (the caller's malformed-YAML line) for a syntax error."""
    import yaml
    from yaml import events as ev

    if len(text) > MAX_BYTES:
        raise UserError(f"{origin}: {len(text)} characters; a YAML file we read is at most "
                        f"{MAX_BYTES >> 20} MiB", exit_code=2)
    sizes: dict[str, int] = {}
    stack: list[list[Any]] = []  # [anchor, expanded nodes so far] per open collection

    def add(n: int) -> None:
        if stack:
            stack[-1][1] += n
            if stack[-1][1] > MAX_NODES:
                raise UserError(f"{origin}: expands to more than {MAX_NODES} values through its "
                                "aliases (&anchor / *alias); write the values out", exit_code=2)

    for e in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(e, (ev.SequenceStartEvent, ev.MappingStartEvent)):
            if len(stack) >= MAX_DEPTH:
                line = e.start_mark.line + 1 if e.start_mark else "?"
                raise UserError(f"{origin} line {line}: nested deeper than {MAX_DEPTH} levels",
                                exit_code=2)
            stack.append([e.anchor, 1])
        elif isinstance(e, (ev.SequenceEndEvent, ev.MappingEndEvent)):
            anchor, n = stack.pop()
            if anchor is not None:
                sizes[anchor] = n
            add(n)
        elif isinstance(e, ev.ScalarEvent):
            if e.anchor is not None:
                sizes[e.anchor] = 1
            add(1)
        elif isinstance(e, ev.AliasEvent):
            if e.anchor not in sizes:
                open_ = any(a == e.anchor for a, _ in stack)
                line = e.start_mark.line + 1 if e.start_mark else "?"
                why = "inside its own anchor (a recursive alias)" if open_ else "before any anchor of that name"
                raise UserError(f"{origin} line {line}: alias *{e.anchor} {why}", exit_code=2)
            add(sizes[e.anchor])


def yaml_load(text: str, origin: str) -> Any:
    """``yaml.safe_load`` after ``check_yaml``: one UserError line for a bomb or a deep file."""
    import yaml

    check_yaml(text, origin)
    return yaml.safe_load(text)
