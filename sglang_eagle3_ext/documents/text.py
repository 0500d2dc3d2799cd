"""Text that came from a file or a server, made safe to print (no terminal escapes, no broken rows)."""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(value: Any) -> str:
    """Text from a file or a server, safe to print: control characters (terminal escape codes,
    newlines that would break a table row) shown as ``\\x1b``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))
