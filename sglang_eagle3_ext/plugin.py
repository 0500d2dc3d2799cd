"""Old name of ``sglang_eagle3_ext.runtime.plugin`` (see _aliases.py: the same module object)."""

from ._aliases import become

become(__name__)
