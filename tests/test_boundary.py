"""The boundary between the code that runs inside SGLang's processes and the workbench.

Inside SGLang (every scheduler, tokenizer and detokenizer process loads the plugin, and a
source-patched worker imports the probes and the layer override): ``INSIDE`` below and every
package module they import at module level. That closure may import only the standard library
at module level (a missing or slow third-party import there would break or slow every SGLang
process); the workbench (CLI, bench, sweep, analysis, tiny, patcher engine) may use anything.
The scan reads the sources (no import), so it also fails for a module nothing imports yet.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "sglang_eagle3_ext"
# what SGLang processes import: the plugin entry point, the probes and the layer override that
# patched files call, and what those two routes read (docs/architecture.md, "Two sides")
INSIDE = ["plugin", "probes", "probes._profiler", "probes.timers", "probes.window", "probes.metrics",
          "layers", "nccl", "settings", "patcher", "stepctl", "hold"]


def _path(mod: str) -> Path:
    p = PKG.joinpath(*mod.split("."))
    return p / "__init__.py" if p.is_dir() else p.with_suffix(".py")


def _module_level_imports(mod: str) -> tuple[set[str], set[str]]:
    """(package modules, top-level external names) imported at module level by ``mod``."""
    tree = ast.parse(_path(mod).read_text(encoding="utf-8"))
    here = mod.split(".")
    base = here if _path(mod).name == "__init__.py" else here[:-1]
    ours: set[str] = set()
    ext: set[str] = set()
    for node in tree.body:  # module level only: imports inside functions are lazy by design
        if isinstance(node, ast.Import):
            for a in node.names:
                (ours.add(a.name.split(".", 1)[1]) if a.name.startswith("sglang_eagle3_ext.")
                 else ext.add(a.name.split(".")[0]))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join([*parent, *(node.module.split(".") if node.module else [])])
                names = [target] if node.module else []
                for a in node.names:  # `from . import x` may name a submodule
                    sub = ".".join(filter(None, [target, a.name]))
                    if _path(sub).exists():
                        names.append(sub)
                ours.update(n for n in names if n and _path(n).exists())
            elif node.module and node.module.startswith("sglang_eagle3_ext"):
                ours.add(node.module.split(".", 1)[1])
            elif node.module and node.module != "__future__":
                ext.add(node.module.split(".")[0])
    return ours, ext


def test_inside_sglang_code_imports_only_the_standard_library_at_module_level():
    seen: set[str] = set()
    todo = list(INSIDE)
    bad: list[str] = []
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        ours, ext = _module_level_imports(mod)
        todo += sorted(ours - seen)
        bad += [f"{mod} imports {e}" for e in sorted(ext) if e not in sys.stdlib_module_names]
    assert not bad, bad
    # the closure really is what the routes load, not a vacuous set
    assert {"probes", "probes._profiler", "settings", "sglang_env", "errors"} <= seen


def test_the_scan_sees_a_third_party_import(tmp_path, monkeypatch):
    """A module-level `import yaml` in the closure is caught (the check can fail)."""
    fake = tmp_path / "sglang_eagle3_ext"
    (fake / "probes").mkdir(parents=True)
    (fake / "probes" / "__init__.py").write_text("import yaml\nfrom .. import settings\n")
    (fake / "settings.py").write_text("import os\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    ours, ext = _module_level_imports("probes")
    assert ours == {"settings"} and ext == {"yaml"}
