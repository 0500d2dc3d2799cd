"""The two rich consoles every command prints through (stdout for results, stderr for status).

Piped or redirected output (not a terminal, ``COLUMNS`` unset) gets a wide console, so tables keep
their natural width instead of rich's 80-column default; on a terminal rich sizes to it. Table
cells never end in '…' at any width: a cell that does not fit folds onto the next line (a number
may wrap, it is never cut).
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

from rich.console import Console
from rich.table import Table

from ..documents.text import clean

PIPE_WIDTH = 1000  # columns when not a terminal: wider than any table we print


def pipe_width(stream: IO[str] | None, environ: dict[str, str] | None = None) -> int | None:
    """None (rich's own sizing: the terminal, or $COLUMNS) on a terminal or with COLUMNS set;
    PIPE_WIDTH when the stream is a pipe or a file."""
    env = os.environ if environ is None else environ
    if (env.get("COLUMNS") or "").strip().isdigit():
        return None
    try:
        tty = bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):
        tty = False
    return None if tty else PIPE_WIDTH


def keep_whole(table: Table) -> Table:
    """Columns that would cut their text with '…' fold it instead (nothing printed is elided)."""
    for col in table.columns:
        if col.overflow == "ellipsis":
            col.overflow = "fold"
    return table


class WideConsole(Console):
    """rich's Console; every Table printed goes through keep_whole first. Emoji codes off: a
    ``:word:`` in a message (``construct.py:100:``, a file named ``x:fire:.json``) prints as
    written, never as an emoji, whatever ``markup`` says."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        kw.setdefault("emoji", False)
        super().__init__(*args, **kw)

    def print(self, *objects: Any, **kw: Any) -> None:  # type: ignore[override]
        for o in objects:
            if isinstance(o, Table):
                keep_whole(o)
        super().print(*objects, **kw)


out = WideConsole(soft_wrap=True, width=pipe_width(sys.stdout))
err = WideConsole(stderr=True, soft_wrap=True, width=pipe_width(sys.stderr))


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no rich markup), for scripts."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def plain(value: Any) -> Any:
    """A rich Text of ``clean(value)``: a table cell or title that never renders markup found in
    the input (a label ``[/]`` would raise, ``[red]`` would colour)."""
    from rich.text import Text

    return Text(clean(value))
