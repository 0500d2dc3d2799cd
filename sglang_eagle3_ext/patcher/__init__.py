"""libcst source patcher: probes (and the aux-layer override) inserted into an SGLang tree.

``engine`` applies / reverts / reports; ``spec`` loads ``patches/*.yaml``; ``transform`` holds the
libcst code; ``manifest`` keeps pristine copies and hashes. Only ``is_patched`` is cheap enough
for hot callers (the plugin asks it before registering hooks on a patched worker).
"""

from __future__ import annotations

from pathlib import Path

MARKER = "sglang-eagle3-ext"  # the one definition: every inserted line and patched file carries it


def is_patched(path: str | Path) -> bool:
    """True when the file carries our inserted code (marker check; no parsing, no manifest)."""
    try:
        return MARKER.encode() in Path(path).read_bytes()
    except OSError:
        return False
