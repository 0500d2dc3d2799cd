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


# "" is the package __init__ (every route into runtime/ runs it first); the three old names an old
# patched tree or an old entry point imports, and the alias machinery they call
ALIASES = ["", "_aliases", "probes", "layers", "plugin"]


def inside() -> list[str]:
    return [*_runtime_modules(), *(m for m in ALIASES if _path(m).exists())]


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
            "runtime.marker", "runtime.stepctl", "runtime.policy", "runtime.probemap", "_aliases"} <= seen


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


# ------------------------------------------------------------------------------------------------
# The house by role (docs/reference/architecture.md): the arrows between the folders, checked over EVERY
# import (module level, inside functions, under TYPE_CHECKING): a lazy import still ties the two
# modules together for a reader and for a change.

def _all_modules(pkg: Path | None = None) -> list[str]:
    pkg = pkg or PKG
    out = []
    for p in sorted(pkg.rglob("*.py")):
        parts = list(p.relative_to(pkg).with_suffix("").parts)
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _every_import(mod: str) -> tuple[set[str], set[str]]:
    """(package modules, top-level external names) that ``mod`` imports anywhere in its text."""
    path = _path(mod)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = mod.split(".") if mod else []
    base = here if path.name == "__init__.py" else here[:-1]
    ours: set[str] = set()
    ext: set[str] = set()

    def add(parts: list[str]) -> None:
        while parts and not _path(".".join(parts)).exists():
            parts = parts[:-1]  # `from .x import name`: the module is x
        ours.add(".".join(parts))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("sglang_eagle3_ext."):
                    add(a.name.split(".")[1:])
                else:
                    ext.add(a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = [*base[: len(base) - (node.level - 1)], *(node.module.split(".") if node.module else [])]
            elif node.module and (node.module + ".").startswith("sglang_eagle3_ext."):
                target = node.module.split(".")[1:]
            elif node.module == "sglang_eagle3_ext":
                target = []
            else:
                if node.module and node.module != "__future__":
                    ext.add(node.module.split(".")[0])
                continue
            for a in node.names:
                add([*target, a.name])
    ours.discard(mod)
    return ours, ext


def _graph() -> dict[str, set[str]]:
    return {m: _every_import(m)[0] for m in _all_modules()}


def _role(mod: str) -> str:
    return mod.split(".")[0] if "." in mod else mod


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _arrow_problems(graph: dict[str, set[str]]) -> list[str]:
    """The three rules of the house (docs/reference/architecture.md), as one list of offending imports."""
    bad = []
    for mod, deps in sorted(graph.items()):
        role = _role(mod)
        for d in sorted(deps):
            to = _role(d)
            if role == "runtime" and to != "runtime":
                bad.append(f"runtime: {mod} imports {d or '__init__'} (runtime/ imports only runtime/)")
            if role == "documents" and to not in ("documents", "runtime"):
                bad.append(f"documents: {mod} imports {d} (documents/ sits below every role)")
            if role == "serve" and to in ("measure", "tune"):
                bad.append(f"serve: {mod} imports {d} (launch takes documents, never the measuring side)")
    return bad


def test_no_import_circle_anywhere_in_the_package():
    graph = _graph()
    assert len(graph) > 80 and "tune.scan" in graph["commands.scan"]  # the real tree, really read
    assert _cycles(graph) == []


def test_the_arrows_between_the_roles():
    assert _arrow_problems(_graph()) == []


def test_only_commands_render_with_rich():
    """rich is the CLI's: measuring and tuning code returns rows, commands/ turns them into tables."""
    users = sorted(m for m in _all_modules() if "rich" in _every_import(m)[1])
    assert users and all(m.startswith("commands.") for m in users), users


def test_no_module_is_a_big_room():
    """One concern a module: none over 600 lines (docs/reference/architecture.md names any exception)."""
    sizes = {m: len(_path(m).read_text(encoding="utf-8").splitlines()) for m in _all_modules()}
    assert {m: n for m, n in sizes.items() if n > 600} == {}


def test_the_role_rules_can_fail(tmp_path, monkeypatch):
    """A circle through a lazy import, runtime/ reaching the workbench lazily, serve/ reaching
    tune/, documents/ reaching measure/: each is found."""
    fake = tmp_path / "sglang_eagle3_ext"
    for d in ("runtime", "serve", "tune", "documents", "measure"):
        (fake / d).mkdir(parents=True)
        (fake / d / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "runtime" / "plugin.py").write_text("def f():\n    from ..tune import scan\n")
    (fake / "tune" / "scan.py").write_text("from ..serve import flags\n")
    (fake / "serve" / "flags.py").write_text("def g():\n    from ..tune.scan import x\n")
    (fake / "documents" / "doc.py").write_text("from ..measure import bench\n")
    (fake / "measure" / "bench.py").write_text("import rich\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    graph = _graph()
    assert _cycles(graph) == [["serve.flags", "tune.scan"]]
    assert _arrow_problems(graph) == [
        "documents: documents.doc imports measure.bench (documents/ sits below every role)",
        "runtime: runtime.plugin imports tune.scan (runtime/ imports only runtime/)",
        "serve: serve.flags imports tune.scan (launch takes documents, never the measuring side)"]
    assert "rich" in _every_import("measure.bench")[1]
