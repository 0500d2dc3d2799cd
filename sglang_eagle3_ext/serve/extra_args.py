"""The pass-through SGLang args (after ``--``) as a flag -> value map: the few values our rules
need to see (page size, backends, parallel sizes). One reading for flags.py and trees_launch.py."""

from __future__ import annotations


def extra_flags(extra: list[str]) -> dict[str, str | bool]:
    """`--flag value`, `--flag=value` and bare `--flag` from the pass-through args."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(extra):
        tok = extra[i]
        if tok.startswith("--"):
            if "=" in tok:
                k, v = tok.split("=", 1)
                out[k] = v
            elif i + 1 < len(extra) and not extra[i + 1].startswith("--"):
                out[tok] = extra[i + 1]
                i += 1
            else:
                out[tok] = True
        i += 1
    return out
