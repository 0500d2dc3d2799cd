"""The module names from before ``runtime/`` existed, kept as aliases of the modules there.

Three old names can still be asked for from outside this package: ``sglang_eagle3_ext.probes`` and
``sglang_eagle3_ext.layers`` (SGLang trees source-patched before the move import them) and
``sglang_eagle3_ext.plugin`` (installs made before it name the entry point
``sglang_eagle3_ext.plugin:register``). Each is a three-line module at its old path that calls
``become``: the old name then IS the runtime module (``sglang_eagle3_ext.probes is
sglang_eagle3_ext.runtime.probes``), so state such as the probes' trace exists once.

Only then, in a process that asked for an old name, ``become`` puts ``AliasFinder`` first on
``sys.meta_path`` so the old name's submodules (``sglang_eagle3_ext.probes.tree``) are the runtime
submodules too; a file alias alone would load them a second time under the old name. A process
that never asks (every SGLang process of a tree patched since the move, the CLI) never has the
finder consulted on its imports. Stdlib only: it runs inside SGLang's processes.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

PACKAGE = "sglang_eagle3_ext"
# top-level names an outside caller may still use (an old name or any of its submodules)
MOVED = frozenset({"layers", "plugin", "probes"})


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
    """First on ``sys.meta_path`` once an old name was imported; answers only for old names
    whose runtime module exists (any other name: None, as if the finder were not there)."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        to = new_name(name)
        if to is None or name.count(".") < 2:  # the top-level old names are real files
            return None
        try:
            if importlib.util.find_spec(to) is None:
                return None
        except (ImportError, ValueError):
            return None
        return ModuleSpec(name, _Alias(to))

    @staticmethod
    def invalidate_caches() -> None:
        return None


def install() -> None:
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())


def become(old: str) -> None:
    """Called by the module at an old name while it is being imported: from now on that name is
    the runtime module (the import system returns ``sys.modules[old]`` after the module ran)."""
    install()
    sys.modules[old] = importlib.import_module(new_name(old) or old)
