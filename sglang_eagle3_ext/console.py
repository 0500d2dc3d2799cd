"""The two rich consoles every command prints through (stdout for results, stderr for status)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from rich.console import Console

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no rich markup), for scripts."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(value: Any) -> str:
    """Text from a file or a server, safe to print: control characters (terminal escape codes,
    newlines that would break a table row) shown as ``\\x1b``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def plain(value: Any) -> Any:
    """A rich Text of ``clean(value)``: a table cell or title that never renders markup found in
    the input (a label ``[/]`` would raise, ``[red]`` would colour)."""
    from rich.text import Text

    return Text(clean(value))
