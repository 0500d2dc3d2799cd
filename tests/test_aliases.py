"""The module names from before ``runtime/`` existed are the runtime modules themselves.

Patched SGLang trees written before the move import ``sglang_eagle3_ext.probes`` (and
``.layers``); installs made before it name the entry point ``sglang_eagle3_ext.plugin:register``.
Each old name must give THE SAME module object as its new one (never a second copy: the probes'
trace and switches would split in two). Real imports in a fresh interpreter; the patched-tree
route itself runs in tests/test_patch_runtime.py (pre-move inserted text, real 0.5.23 file).
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import json
import subprocess
import sys

import pytest
import tomllib
from conftest import REPO

from sglang_eagle3_ext import _aliases
from sglang_eagle3_ext.runtime import layers, plugin, probes
from sglang_eagle3_ext.runtime.plugin import overview, procstate

PKG = REPO / "sglang_eagle3_ext"
PROBE_SUBMODULES = sorted(p.stem for p in (PKG / "runtime" / "probes").glob("*.py") if p.stem != "__init__")
# the layers import block as trees patched before the move carry it (transform.py at b26d707)
PRE_MOVE_LAYERS = (
    "try:  # {m}: aux-layer override; package absent -> SGLang's own layer ids\n"
    "    from sglang_eagle3_ext import layers as {a}  # {m}\n"
    "except Exception:  # {m}\n"
    "    {a} = None  # {m}\n"
)

_FRESH = """
import importlib, json, sys
old = sys.argv[1].split(",")
first = [importlib.import_module("sglang_eagle3_ext." + n) for n in old]  # old names first
same = {n: m is importlib.import_module("sglang_eagle3_ext.runtime." + n) for n, m in zip(old, first)}
mods = {id(m): m for k, m in list(sys.modules.items()) if k.startswith("sglang_eagle3_ext")}
files = [f for f in (getattr(m, "__file__", None) for m in mods.values()) if f]  # distinct objects
import sglang_eagle3_ext.probes as p, sglang_eagle3_ext.runtime.probes as q
p.reset(environ={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_TRACE": "1"})
p.cycle_begin()
print(json.dumps({"same": same, "twice": sorted({f for f in files if files.count(f) > 1}),
                  "trace": len(q.trace), "spec": p.__spec__.name, "name": p.__name__}))
"""


def test_old_names_are_the_runtime_modules_in_a_fresh_interpreter():
    names = ["probes", *(f"probes.{s}" for s in PROBE_SUBMODULES), "plugin", "plugin.hookplan", "layers"]
    proc = subprocess.run([sys.executable, "-c", _FRESH, ",".join(names)], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["same"] == dict.fromkeys(names, True)
    assert "probes.tree" in res["same"] and res["twice"] == []  # no file executed as two modules
    assert res["trace"] > 0  # recorded through the old name, read through the new one
    assert res["spec"] == res["name"] == "sglang_eagle3_ext.runtime.probes"


def test_old_names_after_the_new_ones_in_this_process():
    import sglang_eagle3_ext.layers as old_layers
    import sglang_eagle3_ext.plugin as old_plugin
    import sglang_eagle3_ext.probes as a
    import sglang_eagle3_ext.runtime.probes as b

    assert a is b is probes and old_plugin is plugin and old_layers is layers
    for sub in PROBE_SUBMODULES:
        assert (importlib.import_module(f"sglang_eagle3_ext.probes.{sub}")
                is importlib.import_module(f"sglang_eagle3_ext.runtime.probes.{sub}")), sub
    from sglang_eagle3_ext.layers import override_layer_ids
    assert override_layer_ids is layers.override_layer_ids


_SGLANG_PROCESS = """
import importlib, json, sys
import sglang_eagle3_ext.runtime.plugin as p  # what SGLang's load_plugins imports, new entry point
p.register()
def finder():
    return any(type(f).__name__ == "AliasFinder" for f in sys.meta_path)
before = finder()
import sglang_eagle3_ext.probes  # a tree patched before the move asks for the old name
after = finder()
missing = importlib.util.find_spec("sglang_eagle3_ext.probes.no_such_module")
print(json.dumps({"before": before, "after": after, "missing": missing is None}))
"""


def test_the_finder_is_installed_only_where_an_old_name_is_asked_for():
    """A process that loads the plugin by its new entry point never consults the alias finder on
    its imports; the first import of an old name installs it; it does not answer for modules
    that do not exist (issue 34.12: find_spec returned a spec for any name under an old one)."""
    proc = subprocess.run([sys.executable, "-c", _SGLANG_PROCESS], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"before": False, "after": True,
                                                                "missing": True}


def test_names_that_did_not_move_are_not_aliased():
    assert _aliases.new_name("sglang_eagle3_ext.cli") is None
    assert _aliases.new_name("sglang_eagle3_ext.settings") is None  # internal: no outside caller
    assert _aliases.new_name("sglang_eagle3_ext.runtime.probes") is None
    assert _aliases.new_name("sglang_eagle3_ext.probes.tree") == "sglang_eagle3_ext.runtime.probes.tree"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sglang_eagle3_ext.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sglang_eagle3_ext.probes.no_such_module")


def test_entry_point_old_and_new_values_load_register(monkeypatch):
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    value = meta["project"]["entry-points"]["sglang.srt.plugins"][procstate.ENTRY_POINT_NAME]
    assert value == procstate.ENTRY_POINT == "sglang_eagle3_ext.runtime.plugin:register"
    group = "sglang.srt.plugins"
    for v in (procstate.ENTRY_POINT, "sglang_eagle3_ext.plugin:register"):
        ep = importlib.metadata.EntryPoint(procstate.ENTRY_POINT_NAME, v, group)
        assert ep.load() is plugin.register, v
        monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None, ep=ep: [ep])
        assert overview.entry_point_present(), v  # doctor sees an install made before the move
    other = importlib.metadata.EntryPoint("x", "other.mod:register", group)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [other])
    assert not overview.entry_point_present()


def test_pre_move_layers_block_binds_the_override():
    """The guarded import a pre-move aux-layer patch put in a model file, run as written."""
    from sglang_eagle3_ext.patcher.transform import ALIASES, MARKER

    ns: dict = {}
    exec(PRE_MOVE_LAYERS.format(m=MARKER, a=ALIASES["layers"]), ns)  # noqa: S102 - our own text
    assert ns[ALIASES["layers"]] is layers
    assert ns[ALIASES["layers"]].override_layer_ids is layers.override_layer_ids


def _old_name_imports(source: str, module: str) -> list[str]:
    """Imports in ``source`` (module ``module``, dotted) that resolve to a pre-move name."""
    base = module.split(".")
    hits = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[: len(base) - node.level]
                mod = ".".join([*parent, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            names = [mod, *(f"{mod}.{a.name}" for a in node.names)]
        hits += [f"line {node.lineno}: {n}" for n in names if _aliases.new_name(n)]
    return hits


def test_our_code_imports_only_the_new_names():
    """The aliases are for old trees and installs; nothing of ours leans on them (an import of an
    old name would still work and so hide a half-done move)."""
    assert _old_name_imports("from . import probes\n", "sglang_eagle3_ext.cli") == [
        "line 1: sglang_eagle3_ext.probes"]  # the scan can fail
    bad = []
    for top in ("sglang_eagle3_ext", "tests", "tools", "benchmarks", "examples"):
        for f in sorted((REPO / top).rglob("*.py")):
            if "shims" in f.parts or f.name == "test_aliases.py":
                continue
            mod = ".".join(f.relative_to(REPO).with_suffix("").parts)
            bad += [f"{f.relative_to(REPO)} {h}" for h in _old_name_imports(f.read_text(encoding="utf-8"), mod)]
    assert not bad, bad
