"""libcst source patcher: probes (and the aux-layer override) inserted into an SGLang tree.

``engine`` applies / reverts / reports; ``spec`` loads ``patches/*.yaml``; ``transform`` holds the
libcst code; ``manifest`` keeps pristine copies and hashes. The marker and its cheap check live
in ``runtime.marker`` (the plugin reads them inside SGLang); they are re-exported here.
"""

from __future__ import annotations

from ..runtime.marker import MARKER, is_patched

__all__ = ["MARKER", "is_patched"]
