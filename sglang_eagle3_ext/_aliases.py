"""The module names from before ``runtime/`` existed, kept as aliases of the modules there.

Source-patched SGLang trees written before the move import ``sglang_eagle3_ext.probes`` and
``sglang_eagle3_ext.layers``; installs made before it name the entry point
``sglang_eagle3_ext.plugin:register``. An old name is not a second copy: importing it returns
the runtime module itself (``sglang_eagle3_ext.probes is sglang_eagle3_ext.runtime.probes``,
submodules included), so state such as the probes' trace exists once. A finder, not files,
because a file alias of a package would load its submodules a second time under the old name.
Stdlib only: the package ``__init__`` installs this in every SGLang process that loads the plugin.
"""

from __future__ import annotations

import importlib
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

PACKAGE = "sglang_eagle3_ext"
# top-level modules that moved under runtime/ (an old name or any of its submodules)
MOVED = frozenset({"errors", "hold", "layers", "nccl", "plugin", "policy", "probes", "resources",
                   "safeparse", "settings", "sglang_env", "stepctl"})


def new_name(name: str) -> str | None:
    """``sglang_eagle3_ext.probes.tree`` -> ``sglang_eagle3_ext.runtime.probes.tree``; None for
    every name that did not move."""
    head, _, rest = name.partition(".")
    if head != PACKAGE or rest.split(".", 1)[0] not in MOVED:
        return None
    return f"{PACKAGE}.runtime.{rest}"


class _Alias:
    """Loader whose module is the runtime module itself (imported, or already there)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.real_spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system stamps the alias spec on the module; its own spec stays the truth
        # (relative imports inside it, reload, pickling by name)
        if self.real_spec is not None:
            module.__spec__ = self.real_spec


class AliasFinder:
    """First on ``sys.meta_path``; answers only for the moved names."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        to = new_name(name)
        return None if to is None else ModuleSpec(name, _Alias(to))

    @staticmethod
    def invalidate_caches() -> None:
        return None


def install() -> None:
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
