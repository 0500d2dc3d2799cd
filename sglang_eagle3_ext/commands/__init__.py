"""One module per CLI command (parse -> call -> render); shared argument helpers below."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def split_preset_words(args: argparse.Namespace, prog: str,
                       add_options: Callable[[argparse.ArgumentParser], None]) -> tuple[str | None, list[str]]:
    """``[PRESET] [options] [-- SGLANG_ARGS]`` taken by an ``argparse.REMAINDER`` positional:
    options may follow the preset name (REMAINDER swallowed them), so they are parsed again here
    into ``args``; returns (preset, the SGLang args after ``--``)."""
    words = list(args.words or [])
    extra: list[str] = []
    if "--" in words:
        i = words.index("--")
        words, extra = words[:i], words[i + 1:]
    if not words:
        return None, extra
    from .flagnames import add_aliases, parse_args

    p = argparse.ArgumentParser(prog=prog, add_help=False)
    add_options(p)
    p.add_argument("--sglang-root")
    p.add_argument("preset", nargs="?")
    add_aliases(p, prog.split()[-1])  # SGLang's spellings after the preset name too
    parse_args(p, words, namespace=args)  # argparse errors exit 2 with usage, like the main parser
    return args.preset, extra
