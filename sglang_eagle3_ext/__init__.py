"""sglang-eagle3-ext: make EAGLE-3 speculative decoding in SGLang measurable and tunable.

``runtime/`` is what SGLang's processes import (stdlib only at module level); everything else
here is the workbench. The names from before that split stay importable (``_aliases``).
"""

from . import _aliases

__version__ = "0.1.0"

_aliases.install()
