"""The marker every line we insert into an SGLang source file carries, and the cheap check for it.

Its one definition: the patcher writes it, ``patch status`` / ``revert`` and the plugin look for
it (the plugin asks ``is_patched`` before registering hooks on a patched worker). Its value must
never change: trees patched by any earlier version are recognised by it.
"""

from __future__ import annotations

from pathlib import Path

MARKER = "sglang-eagle3-ext"


def is_patched(path: str | Path) -> bool:
    """True when the file carries our inserted code (marker check; no parsing, no manifest)."""
    try:
        return MARKER.encode() in Path(path).read_bytes()
    except OSError:
        return False
