"""Which target classes a release serves with EAGLE-3, and by which id rule; which EAGLE-3 draft
classes it loads and which EAGLE-3.1 fields they read. Read from the release's own
``sglang/srt/models/*.py`` with ``ast`` (nothing is imported), so the table never ages by hand.

Rules (what ``set_eagle3_layers_to_capture(layer_ids)`` stores as capture-loop indices):

- ``plus1``: ``[val + 1 for val in layer_ids]`` (config id k = output of layer k);
- ``first_id``: ``+1`` only when ``layer_ids[0] == 1``, else as is (DeepSeek rule, 0.5.13+);
- ``max_n``: as is when ``max(layer_ids) == num_layers``, else ``+1`` (gpt-oss, 0.5.17+);
- ``none``: the class is served but has no ``set_eagle3_layers_to_capture`` (no EAGLE-3);
- ``unknown``: the method does something this reader cannot name; ``why`` says what.

A wrapper that hands ``layer_ids`` unchanged to ``self.<attr>`` (Llama-4, Gemma-3, Kimi-K2.5) takes
the rule of the class built into that attribute in ``__init__`` (``via`` names it).
The pinned releases' tables are generated into ``capture_table.py``
(``python -m sglang_eagle3_ext.serve.capture_rules --write``); a test re-derives them from the
release sources and compares.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

METHOD = "set_eagle3_layers_to_capture"
RULES = ("plus1", "first_id", "max_n")
# EAGLE-3.1 draft fields, read by the draft model files of the releases that honour them.
EAGLE31_FIELDS = ("norm_before_fc", "fc_norm", "norm_output")


@dataclass(frozen=True)
class Capture:
    arch: str
    rule: str  # plus1 | first_id | max_n | none | unknown
    where: str = ""  # "deepseek_v2.py:DeepseekV2ForCausalLM:3458", the method that decides
    via: str = ""  # "language_model -> DeepseekV3ForCausalLM" for wrappers that delegate
    shift_defaults: bool = False  # defaults go through +1 too (MiniMax-M3 VL)
    why: str = ""  # for unknown: one line


@dataclass(frozen=True)
class DraftClass:
    arch: str
    where: str  # file
    reads: tuple[str, ...]  # EAGLE-3.1 fields its file reads


@dataclass
class _Class:
    name: str
    file: str
    node: ast.ClassDef
    bases: list[str]


@dataclass
class _Index:
    classes: dict[tuple[str, str], _Class]  # (file, name)
    imports: dict[str, dict[str, str]]  # file -> name -> source file
    entry: dict[str, str]  # served arch -> file that registers it
    texts: dict[str, str]


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):  # Generic[...] and friends
        return _base_name(node.value)
    return ""


def _entry_names(value: ast.expr) -> list[str]:
    """Names in ``EntryClass = A`` / ``[A, B]`` / ``[A] + [B]``."""
    if isinstance(value, ast.Name):
        return [value.id]
    if isinstance(value, (ast.List, ast.Tuple)):
        return [n for e in value.elts for n in _entry_names(e)]
    if isinstance(value, ast.BinOp):
        return _entry_names(value.left) + _entry_names(value.right)
    return []


_IMPORT_RE = re.compile(r"^\s*from\s+(?:sglang\.srt\.models\.|\.)(\w+)\s+import", re.M)


def _entry_snippet(text: str) -> list[str]:
    """EntryClass names of a file without parsing all of it: the statement up to balanced brackets."""
    out: list[str] = []
    for m in re.finditer(r"^EntryClass\s*=", text, re.M):
        lines, depth = [], 0
        for line in text[m.start():].splitlines():
            lines.append(line)
            depth += line.count("[") + line.count("(") - line.count("]") - line.count(")")
            if depth <= 0:
                break
        try:
            node = ast.parse("\n".join(lines)).body[0]
        except (SyntaxError, IndexError):
            continue
        if isinstance(node, ast.Assign):
            out += _entry_names(node.value)
    return out


@lru_cache(maxsize=16)
def _index(models: Path) -> _Index:
    """Every class, import and EntryClass of a models/ folder. Only files that define the method,
    or import (transitively) from one that does, are parsed whole: a class anywhere else cannot
    reach the method, so it is served without EAGLE-3 capture."""
    idx = _Index({}, {}, {}, {})
    for path in sorted(models.glob("*.py")):
        idx.texts[path.name] = path.read_text(encoding="utf-8", errors="replace")
    relevant = {f for f, t in idx.texts.items() if METHOD in t}
    grew = True
    while grew:
        grew = False
        for f, t in idx.texts.items():
            if f not in relevant and any(m + ".py" in relevant for m in _IMPORT_RE.findall(t)):
                relevant.add(f)
                grew = True
    for f, text in idx.texts.items():
        if f not in relevant:
            for name in _entry_snippet(text):
                idx.entry.setdefault(name, f)
            continue
        try:
            tree = ast.parse(text, filename=f)
        except SyntaxError:
            continue
        imp: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                mod = node.module
                if mod.startswith("sglang.srt.models.") or (node.level == 1 and "." not in mod):
                    src = mod.rsplit(".", 1)[-1] + ".py"
                    for a in node.names:
                        imp[a.asname or a.name] = src
        idx.imports[f] = imp
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                idx.classes[(f, node.name)] = _Class(node.name, f, node, [_base_name(b) for b in node.bases])
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
                for name in _entry_names(node.value):
                    idx.entry.setdefault(name, f)
    return idx


def _resolve(idx: _Index, name: str, file: str) -> _Class | None:
    """A class name as seen from ``file``: defined there, imported from a models file, or unique."""
    if (file, name) in idx.classes:
        return idx.classes[(file, name)]
    src = idx.imports.get(file, {}).get(name)
    if src and (src, name) in idx.classes:
        return idx.classes[(src, name)]
    hits = [c for (_, n), c in idx.classes.items() if n == name]
    return hits[0] if len(hits) == 1 else None


def _mro(idx: _Index, cls: _Class) -> list[_Class]:
    out, todo, seen = [], [cls], set()
    while todo:
        c = todo.pop(0)
        if (c.file, c.name) in seen:
            continue
        seen.add((c.file, c.name))
        out.append(c)
        todo[:0] = [b for b in (_resolve(idx, n, c.file) for n in c.bases) if b is not None]
    return out


def _method(c: _Class, name: str) -> ast.FunctionDef | None:
    for item in c.node.body:
        if isinstance(item, ast.FunctionDef) and item.name == name:
            return item
    return None


def _attr_class(idx: _Index, mro: list[_Class], attr: str) -> tuple[str, _Class | None]:
    """The class built into ``self.<attr>`` in ``__init__`` (first class in the MRO that builds it)."""
    for c in mro:
        init = _method(c, "__init__")
        if init is None:
            continue
        for node in ast.walk(init):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Attribute) and node.targets[0].attr == attr
                    and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "self"
                    and isinstance(node.value, ast.Call)):
                callee = _base_name(node.value.func)
                return callee, _resolve(idx, callee, c.file)
    return "", None


def _is_param(node: ast.AST, p: str) -> bool:
    return isinstance(node, ast.Name) and node.id == p


def _classify(fn: ast.FunctionDef) -> tuple[str, str, bool]:
    """(rule, delegate attr, shift_defaults) of one method body; rule '' when delegating."""
    args = fn.args.args
    if len(args) < 2:
        return "unknown", "", False
    p = args[1].arg
    if p == "layers_to_capture":  # an inner setter that takes loop indices
        return "raw", "", False
    plus1 = first = maxn = shift = False
    odd: list[str] = []
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == METHOD and isinstance(node.func.value, ast.Attribute)
                and _is_param(node.args[0] if node.args else None, p)):
            return "", node.func.value.attr, False
        if isinstance(node, ast.ListComp) and len(node.generators) == 1:
            gen = node.generators[0]
            if (_is_param(gen.iter, p) and isinstance(node.elt, ast.BinOp) and isinstance(node.elt.op, ast.Add)
                    and isinstance(node.elt.right, ast.Constant) and node.elt.right.value == 1):
                plus1 = True
        if isinstance(node, ast.Assign) and any(_is_param(t, p) for t in node.targets) \
                and isinstance(node.value, ast.List):
            shift = True  # defaults assigned to layer_ids, then shifted with the rest
        if isinstance(node, ast.Compare) and any(_is_param(n, p) for n in ast.walk(node)):
            text = ast.unparse(node)
            if text in (f"{p} is None", f"{p} is not None"):
                continue
            if text == f"{p}[0] == 1":
                first = True
            elif text.startswith(f"max({p}) == "):
                maxn = True
            else:
                odd.append(text)
    if odd or not plus1:
        return "unknown", odd[0] if odd else "no '[val + 1 for val in ids]' and no known rule", False
    if first and not maxn:
        return "first_id", "", shift
    if maxn and not first:
        return "max_n", "", shift
    if first or maxn:
        return "unknown", "both the first-id and the max rule", False
    return "plus1", "", shift


def _capture(idx: _Index, arch: str, cls: _Class, depth: int = 0) -> Capture:
    mro = _mro(idx, cls)
    owner = next((c for c in mro if _method(c, METHOD) is not None), None)
    if owner is None:
        return Capture(arch, "none", why=f"{cls.file}:{cls.name} has no {METHOD}")
    fn = _method(owner, METHOD)
    where = f"{owner.file}:{owner.name}:{fn.lineno}"
    rule, attr, shift = _classify(fn)
    if rule == "raw":
        return Capture(arch, "unknown", where, why=f"{where} takes capture-loop indices, not config ids")
    if rule == "unknown":
        return Capture(arch, "unknown", where, why=f"{where} maps the ids in a way this reader cannot "
                                                  f"name ({attr})")
    if rule:
        return Capture(arch, rule, where, shift_defaults=shift)
    callee, target = _attr_class(idx, mro, attr)
    if target is None or depth > 4:
        what = callee or "a class chosen at run time"
        return Capture(arch, "unknown", where, via=f"{attr} -> {what}",
                       why=f"{where} hands the ids to self.{attr}, built from {what}, whose source "
                           "is not in this release's models/")
    inner = _capture(idx, target.name, target, depth + 1)
    via = f"{attr} -> {target.name}" + (f"; {inner.via}" if inner.via else "")
    return Capture(arch, inner.rule, inner.where or where, via, inner.shift_defaults, inner.why)


@dataclass
class ReleaseTable:
    version: str
    targets: dict[str, Capture]  # every served class with an EAGLE-3 capture (rule != none)
    served: frozenset[str]  # every served architecture (EntryClass)
    drafts: dict[str, DraftClass]

    def get(self, arch: str) -> Capture | None:
        """The capture of a served class; None when the release does not serve ``arch``."""
        if arch in self.targets:
            return self.targets[arch]
        return Capture(arch, "none") if arch in self.served else None

    def to_json(self) -> dict:
        return {"targets": {a: [c.rule, c.where, c.via, c.shift_defaults, c.why]
                            for a, c in sorted(self.targets.items())},
                "served": " ".join(sorted(self.served)),
                "drafts": {a: [d.where, list(d.reads)] for a, d in sorted(self.drafts.items())}}

    @classmethod
    def from_json(cls, version: str, data: dict) -> ReleaseTable:
        return cls(version, {a: Capture(a, *v) for a, v in data["targets"].items()},
                   frozenset(data["served"].split()),
                   {a: DraftClass(a, v[0], tuple(v[1])) for a, v in data["drafts"].items()})


def _draft_fields(text: str) -> tuple[str, ...]:
    return tuple(f for f in EAGLE31_FIELDS if f'"{f}"' in text or f"'{f}'" in text)


@lru_cache(maxsize=16)
def derive(package_dir: str, version: str) -> ReleaseTable:
    """The table of one release from its source tree (``package_dir`` holds ``srt/models``)."""
    idx = _index((Path(package_dir) / "srt" / "models").resolve())
    targets: dict[str, Capture] = {}
    drafts: dict[str, DraftClass] = {}
    for arch, f in sorted(idx.entry.items()):
        cls = _resolve(idx, arch, f)
        if "Eagle3" in arch:
            src = cls.file if cls else f
            drafts[arch] = DraftClass(arch, src, _draft_fields(idx.texts.get(src, "")))
            continue
        if cls is None:
            continue
        cap = _capture(idx, arch, cls)
        if cap.rule != "none":
            targets[arch] = cap
    return ReleaseTable(version, targets, frozenset(idx.entry), drafts)


# --------------------------------------------------------------------------------------------
# Which table answers for a version: the live tree when given, else the pinned tables


def _pinned_tables() -> dict[str, ReleaseTable]:
    from .capture_table import TABLES

    return {v: ReleaseTable.from_json(v, d) for v, d in TABLES.items()}


@lru_cache(maxsize=1)
def pinned() -> dict[str, ReleaseTable]:
    return _pinned_tables()


def table_for(version: str, package_dir: str | None = None) -> tuple[ReleaseTable, str]:
    """(table, note): the release's own tree when ``package_dir`` is its source, else the pinned
    table of that version, else the nearest older pinned one (the note says so)."""
    from ..runtime.sglang_env import parse_version

    if package_dir and (Path(package_dir) / "srt" / "models").is_dir():
        return derive(str(package_dir), version), ""
    tables = pinned()
    if version in tables:
        return tables[version], ""
    older = [v for v in tables if parse_version(v) <= parse_version(version)]
    base = max(older, key=parse_version) if older else min(tables, key=parse_version)
    return tables[base], (f"SGLang {version} is not a pinned release and its source is not here: "
                          f"the capture table of SGLang {base} stands in for it")


def newer(a: str, b: str) -> bool:
    from ..runtime.sglang_env import parse_version

    return parse_version(a) > parse_version(b)


def first_release(pred) -> list[str]:
    """Pinned releases (oldest first) whose table satisfies ``pred(table)``."""
    from ..runtime.sglang_env import parse_version

    return [v for v in sorted(pinned(), key=parse_version) if pred(pinned()[v])]


# --------------------------------------------------------------------------------------------
# Generator for capture_table.py


def render_module(tables: dict[str, ReleaseTable]) -> str:
    import json

    lines = ['"""Generated by `python -m sglang_eagle3_ext.serve.capture_rules --write` from the pinned',
             "releases' models/*.py; do not edit (tests/test_layers_families.py re-derives it).\"\"\"",
             "", "import json", "", "TABLES = {"]
    for v, t in tables.items():
        lines.append(f"    {v!r}: json.loads({json.dumps(json.dumps(t.to_json(), sort_keys=True))}),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from . import releases

    argv = sys.argv[1:] if argv is None else argv
    tables = {v: derive(str(releases.fetch(v) / "sglang"), v) for v in releases.PINNED}
    text = render_module(tables)
    if "--write" in argv:
        (Path(__file__).parent / "capture_table.py").write_text(text, encoding="utf-8")
    else:
        for v, t in tables.items():
            for a, c in sorted(t.targets.items()):
                print(v, a, asdict(c))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
