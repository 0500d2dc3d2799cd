"""The boundary between the code that runs inside SGLang's processes and the workbench.

Inside SGLang (every scheduler, tokenizer and detokenizer process loads the plugin, and a
source-patched worker imports the probes and the layer override): everything under
``sglang_eagle3_ext/runtime/``, plus the package ``__init__`` and ``_aliases`` (the old module
names) that every such import runs first. At module level those may import only the standard
library and each other (a missing or slow third-party import there would break or slow every
SGLang process); the workbench (CLI, bench, sweep, scan, analysis, tiny, patcher engine) lives
above ``runtime/`` and may use anything. Imports inside functions are lazy by design and not
checked. The scan reads the sources (no import), so it also fails for a module nothing imports.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "sglang_eagle3_ext"


def _runtime_modules() -> list[str]:
    """Every module under runtime/, as dotted names relative to the package ("runtime.probes")."""
    out = []
    for p in sorted((PKG / "runtime").rglob("*.py")):
        parts = list(p.relative_to(PKG).with_suffix("").parts)
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


# "" is the package __init__ (it installs the aliases): every route into runtime/ runs it first
ALIASES = ["", "_aliases"]


def inside() -> list[str]:
    return [*_runtime_modules(), *ALIASES]


def _path(mod: str) -> Path:
    p = PKG.joinpath(*mod.split(".")) if mod else PKG
    return p / "__init__.py" if p.is_dir() else p.with_suffix(".py")


def _module_level_imports(mod: str) -> tuple[set[str], set[str]]:
    """(package modules, top-level external names) imported at module level by ``mod``."""
    tree = ast.parse(_path(mod).read_text(encoding="utf-8"))
    here = mod.split(".") if mod else []
    base = here if _path(mod).name == "__init__.py" else here[:-1]
    ours: set[str] = set()
    ext: set[str] = set()

    def add(parts: list[str]) -> None:
        name = ".".join(parts)
        if _path(name).exists():
            ours.add(name)

    for node in tree.body:  # module level only: imports inside functions are lazy by design
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("sglang_eagle3_ext."):
                    ours.add(a.name.split(".", 1)[1])
                else:
                    ext.add(a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[: len(base) - (node.level - 1)]
                target = [*parent, *(node.module.split(".") if node.module else [])]
            elif node.module and (node.module + ".").startswith("sglang_eagle3_ext."):
                target = node.module.split(".")[1:]
            else:
                if node.module and node.module != "__future__":
                    ext.add(node.module.split(".")[0])
                continue
            if node.module:
                add(target)
            for a in node.names:  # `from . import x` may name a submodule
                add([*target, a.name])
    return ours, ext


def test_inside_sglang_code_imports_only_the_standard_library_at_module_level():
    seen: set[str] = set()
    todo = inside()
    bad: list[str] = []
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        ours, ext = _module_level_imports(mod)
        bad += [f"{mod or '__init__'} imports the workbench module {o}" for o in sorted(ours)
                if not (o == "runtime" or o.startswith("runtime.") or o in ALIASES)]
        todo += sorted(ours - seen)
        bad += [f"{mod or '__init__'} imports {e}" for e in sorted(ext) if e not in sys.stdlib_module_names]
    assert not bad, bad
    # the set really is what the routes load, not a vacuous one
    assert {"runtime.plugin", "runtime.probes", "runtime.probes._profiler", "runtime.probes.tree",
            "runtime.layers", "runtime.settings", "runtime.sglang_env", "runtime.errors",
            "runtime.marker", "runtime.stepctl", "runtime.policy", "_aliases"} <= seen


def test_the_scan_sees_a_third_party_import(tmp_path, monkeypatch):
    """A module-level `import yaml` under runtime/ is caught (the check can fail)."""
    fake = tmp_path / "sglang_eagle3_ext"
    (fake / "runtime" / "probes").mkdir(parents=True)
    (fake / "runtime" / "__init__.py").write_text("")
    (fake / "runtime" / "probes" / "__init__.py").write_text("import yaml\nfrom .. import settings\n")
    (fake / "runtime" / "settings.py").write_text("import os\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    ours, ext = _module_level_imports("runtime.probes")
    assert ours == {"runtime.settings"} and ext == {"yaml"}


def test_the_scan_sees_a_workbench_import(tmp_path, monkeypatch):
    """A module-level import of a workbench module (relative or absolute) from runtime/ fails."""
    fake = tmp_path / "sglang_eagle3_ext"
    (fake / "runtime").mkdir(parents=True)
    (fake / "__init__.py").write_text("from . import _aliases\n")
    (fake / "_aliases.py").write_text("import sys\n")
    (fake / "runtime" / "__init__.py").write_text("")
    (fake / "runtime" / "plugin.py").write_text(
        "from ..patcher import engine\nfrom sglang_eagle3_ext import bench\n")
    (fake / "patcher").mkdir()
    (fake / "patcher" / "__init__.py").write_text("")
    (fake / "patcher" / "engine.py").write_text("import libcst\n")
    (fake / "bench.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    assert _module_level_imports("runtime.plugin")[0] == {"", "patcher", "patcher.engine", "bench"}
    try:
        test_inside_sglang_code_imports_only_the_standard_library_at_module_level()
    except AssertionError as exc:
        assert "runtime.plugin imports the workbench module patcher.engine" in str(exc)
        assert "patcher.engine imports libcst" in str(exc)
    else:
        raise AssertionError("the scan passed a runtime module that imports the workbench")
