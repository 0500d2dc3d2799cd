"""The two rich consoles every command prints through (stdout for results, stderr for status)."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no rich markup), for scripts."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
