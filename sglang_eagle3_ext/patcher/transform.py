"""libcst transforms: find the anchors a patch spec names and insert tiny guarded probe calls.

Speed: stdlib ``ast`` (20x faster) finds the top-level classes a patch needs; only those
classes' text is parsed with libcst, so a 3,600-line model file costs a few milliseconds.
Per class, ``_Planner`` walks the original libcst tree, checks every anchor count and records
which statements go before/after which original nodes; ``_Inserter`` rebuilds only the blocks
that receive insertions. Everything else is kept byte for byte (libcst round-trips exactly).
"""

from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst.helpers import get_full_name_for_node

from ..runtime.probemap import Anchor, Patch
from . import MARKER  # the one definition (patcher/__init__.py, stdlib only)

# The one name our inserted code binds in a module, per runtime module of ours.
ALIASES = {"probes": "_sglang_eagle3_probes", "layers": "_sglang_eagle3_layers"}

_IMPORT_BLOCK = {
    "probes": (
        "try:  # {m}: probe runtime; package absent -> every probe call is skipped\n"
        "    from sglang_eagle3_ext.runtime import probes as {a}  # {m}\n"
        "    {a}.set_spec_config(route=\"source-patch\")  # {m}\n"
        "except Exception:  # {m}\n"
        "    {a} = None  # {m}\n"
    ),
    "layers": (
        "try:  # {m}: aux-layer override; package absent -> SGLang's own layer ids\n"
        "    from sglang_eagle3_ext.runtime import layers as {a}  # {m}\n"
        "except Exception:  # {m}\n"
        "    {a} = None  # {m}\n"
    ),
}


@dataclass
class Inserted:
    """One insertion, for the dry-run plan: what, and the line it has in the patched file."""

    patch: str
    what: str
    code: str
    line: int = 0


@dataclass
class FileResult:
    path: str
    new_source: str | None = None
    inserted: list[Inserted] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def guarded(alias: str, call: str) -> str:
    return f"if {alias} is not None: {call}  # {MARKER}\n"


def _stmt(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def _calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    class _V(cst.CSTVisitor):
        def __init__(self) -> None:
            self.found: list[cst.Call] = []

        def visit_Call(self, n: cst.Call) -> None:
            self.found.append(n)

        # nested scopes are other code paths
        def visit_FunctionDef(self, n: cst.FunctionDef) -> bool:
            return n is node

        def visit_ClassDef(self, n: cst.ClassDef) -> bool:
            return n is node

        def visit_Lambda(self, n: cst.Lambda) -> bool:
            return False

    v = _V()
    node.visit(v)
    return iter(v.found)


def _block_body(block: Any) -> list[cst.BaseStatement] | None:
    return list(block.body) if isinstance(block, cst.IndentedBlock) else None


def _child_blocks(stmt: cst.BaseStatement) -> Iterator[cst.IndentedBlock]:
    """Blocks nested in a compound statement (not in nested defs/classes)."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine)):
        return
    if isinstance(stmt, cst.If):
        yield stmt.body  # type: ignore[misc]
        if stmt.orelse is not None:
            if isinstance(stmt.orelse, cst.If):
                yield from _child_blocks(stmt.orelse)
            else:
                yield stmt.orelse.body  # type: ignore[misc]
        return
    for attr in ("body", "orelse", "finalbody"):
        sub = getattr(stmt, attr, None)
        if sub is None:
            continue
        if isinstance(sub, (cst.Else, cst.Finally)):
            sub = sub.body
        if isinstance(sub, cst.IndentedBlock):
            yield sub
    for h in getattr(stmt, "handlers", ()) or ():
        if isinstance(h.body, cst.IndentedBlock):
            yield h.body


def _walk(block: cst.IndentedBlock, parent: cst.CSTNode | None = None
          ) -> Iterator[tuple[cst.BaseStatement, cst.IndentedBlock, cst.CSTNode | None]]:
    """(statement, its block, the statement owning that block) for every statement under ``block``."""
    for s in block.body:
        yield s, block, parent
        for b in _child_blocks(s):
            yield from _walk(b, s)


def _returns(block: cst.IndentedBlock) -> list[cst.SimpleStatementLine]:
    return [s for s, _, _ in _walk(block)
            if isinstance(s, cst.SimpleStatementLine) and any(isinstance(x, cst.Return) for x in s.body)]


def _first_after_docstring(body: list[cst.BaseStatement]) -> cst.BaseStatement | None:
    for i, s in enumerate(body):
        if i == 0 and isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 \
                and isinstance(s.body[0], cst.Expr) and isinstance(s.body[0].value,
                                                                   (cst.SimpleString, cst.ConcatenatedString)):
            continue
        return s
    return None


def _params(fn: cst.FunctionDef) -> list[str]:
    return [p.name.value for p in fn.params.params]


class _Planner:
    def __init__(self, module: cst.Module, relpath: str, version: str, options: dict[str, Any],
                 res: FileResult, modules_used: list[str]) -> None:
        self.module = module
        self.relpath = relpath
        self.version = version
        self.options = options
        self.before: dict[int, list[cst.BaseStatement]] = {}
        self.after: dict[int, list[cst.BaseStatement]] = {}
        self.modules_used = modules_used
        self.res = res
        self.n_errors = len(res.errors)
        self._other_branch: Any = None  # set by _decode_branch

    # -- helpers ---------------------------------------------------------------------------

    def err(self, where: str, msg: str) -> None:
        self.res.errors.append(f"{self.relpath}: {where}: {msg}")

    def add(self, table: dict, anchor: cst.CSTNode, code: str, patch: Patch, what: str) -> None:
        table.setdefault(id(anchor), []).append(_stmt(code))
        self.res.inserted.append(Inserted(patch.name, what, code.split("  # ")[0].strip()))
        if patch.module not in self.modules_used:
            self.modules_used.append(patch.module)

    def method(self, cls: cst.ClassDef, patch: Patch) -> cst.FunctionDef | None:
        """The one method of ``cls`` named by the spec (alternatives allowed); errors otherwise."""
        where = cls.name.value
        found = [s for s in _block_body(cls.body) or [] if isinstance(s, cst.FunctionDef)
                 and s.name.value in patch.method]
        names = "/".join(patch.method)
        if len(found) != 1:
            self.err(f"class {where}", f"method {names} found {len(found)} times, expected 1 "
                     f"(patch {patch.name})")
            return None
        return found[0]

    # -- kinds -----------------------------------------------------------------------------
    def run(self, patch: Patch, classes: list[cst.ClassDef]) -> None:
        getattr(self, "_" + patch.kind.replace("-", "_"))(patch, classes)

    def _decode_probes(self, patch: Patch, classes: list[cst.ClassDef]) -> None:
        cls = classes[0]
        fn = self.method(cls, patch)
        if fn is None:
            return
        where = f"{cls.name.value}.{fn.name.value}"
        a = ALIASES[patch.module]
        branch = self._decode_branch(fn, patch, where)
        if branch is None:
            return
        stmts = list(_walk(branch))
        # phase anchors: exact counts first, for every phase, before recording anything
        located: dict[str, tuple[cst.BaseStatement, cst.IndentedBlock, cst.CSTNode | None]] = {}
        for anc in patch.anchors:
            hit = self._locate_call(anc, branch, stmts, where)
            if hit is not None:
                located[anc.phase] = hit
        rets = _returns(branch)
        if len(rets) != 1 or branch.body[-1] is not rets[0]:
            self.err(where, f"decode branch must end in its only return statement "
                     f"(found {len(rets)} returns) (patch {patch.name})")
        accept_field = None
        if patch.accept:
            accept_field = patch.accept_field(self.version)
            tgt = patch.accept.get("target", "verify_output")
            after_phase = patch.accept.get("after", "verify")
            if accept_field is None:
                self.err(where, f"anchor 'accept': no field listed for SGLang {self.version} "
                         f"(patch {patch.name})")
            else:
                uses = [n for n in _attr_uses(fn, tgt, accept_field)]
                if not uses:
                    self.err(where, f"anchor 'accept': {tgt}.{accept_field} not used in the method "
                             f"(field renamed?) (patch {patch.name})")
                hit = located.get(after_phase)
                if hit is not None and tgt not in _assigned_names(hit[0]):
                    self.err(where, f"anchor 'accept': the {after_phase} statement does not assign "
                             f"{tgt} (patch {patch.name})")
        if len(located) != len(patch.anchors) or len(self.res.errors) > self.n_errors:
            return
        other = self._other_branch
        if isinstance(other, cst.IndentedBlock) and other.body:
            # the prefill / extend path: tells the probes the decode cycles around it are boundaries
            self.add(self.before, other.body[0], guarded(a, f'{a}.mark_boundary("extend")'), patch,
                     "mark_boundary (non-decode branch)")
        else:
            self.res.notes.append(f"{self.relpath}: {where}: no non-decode branch to mark "
                                  f"(patch {patch.name}); boundaries come from batch size and gaps only")
        self.add(self.before, branch.body[0], guarded(a, f"{a}.cycle_begin()"), patch, "cycle_begin")
        for anc in patch.anchors:
            stmt = located[anc.phase][0]
            self.add(self.before, stmt, guarded(a, f'{a}.phase_begin("{anc.phase}")'), patch,
                     f"phase_begin {anc.phase} ({anc.call})")
            self.add(self.after, stmt, guarded(a, f'{a}.phase_end("{anc.phase}")'), patch,
                     f"phase_end {anc.phase}")
            if patch.accept and accept_field and anc.phase == patch.accept.get("after", "verify"):
                tgt = patch.accept.get("target", "verify_output")
                self.add(self.after, stmt, guarded(
                    a, f"{a}.record_accept({tgt}.{accept_field}, bonus_included=False)"),
                    patch, f"record_accept {tgt}.{accept_field} (drafts, bonus excluded)")
        self.add(self.before, rets[0], guarded(a, f"{a}.cycle_end()"), patch, "cycle_end")

    def _decode_branch(self, fn: cst.FunctionDef, patch: Patch, where: str) -> cst.IndentedBlock | None:
        found: list[tuple[str, cst.IndentedBlock]] = []
        others: list[Any] = []  # the non-decode branch next to each decode branch found
        for s in _block_body(fn.body) or []:
            if not isinstance(s, cst.If):
                continue
            names = [get_full_name_for_node(c.func) or "" for c in _calls(s.test)]
            for alt in patch.decode_branch:
                if "if" in alt and any(n.endswith(alt["if"]) for n in names):
                    found.append((f"if {alt['if']}()", s.body))  # type: ignore[arg-type]
                    others.append(s.orelse.body if isinstance(s.orelse, cst.Else) else None)
                elif "else_of" in alt and any(n.endswith(alt["else_of"]) for n in names):
                    if isinstance(s.orelse, cst.Else):
                        found.append((f"else of {alt['else_of']}()", s.orelse.body))  # type: ignore[arg-type]
                        others.append(s.body)
        self._other_branch = others[0] if len(others) == 1 else None
        wanted = " or ".join(f"if {d['if']}()" if "if" in d else f"else of {d['else_of']}()"
                             for d in patch.decode_branch)
        if len(found) != 1:
            self.err(where, f"anchor 'decode branch' ({wanted}) found {len(found)} times, expected 1 "
                     f"(patch {patch.name})")
            return None
        if not isinstance(found[0][1], cst.IndentedBlock):
            self.err(where, f"decode branch is a one-line suite (patch {patch.name})")
            return None
        return found[0][1]

    def _locate_call(self, anc: Anchor, branch: cst.IndentedBlock, stmts: list, where: str):
        def ok(c: cst.Call) -> bool:
            if get_full_name_for_node(c.func) != anc.call:
                return False
            kws = {arg.keyword.value for arg in c.args if arg.keyword is not None}
            return not (kws & set(anc.exclude_kwargs))

        total = [c for c in _calls(branch) if ok(c)]
        hits = [(s, b, p) for s, b, p in stmts if isinstance(s, cst.SimpleStatementLine)
                and any(ok(c) for c in _calls(s))]
        label = f"anchor '{anc.phase}' ({anc.call}(...)"
        label += f" without {', '.join(anc.exclude_kwargs)}=)" if anc.exclude_kwargs else ")"
        if len(total) != anc.count or len(hits) != anc.count:
            self.err(where, f"{label} found {len(total)} times in the decode branch, "
                     f"expected {anc.count}")
            return None
        if anc.count != 1:
            self.err(where, f"{label}: only count 1 can be probed")
            return None
        stmt, block, parent = hits[0]
        if anc.wrap == "with":
            if not isinstance(parent, cst.With) or len(block.body) != 1:
                self.err(where, f"{label} is not the only statement of a with-block")
                return None
            # the with-statement itself, located in its own block
            for s, b, p in stmts:
                if s is parent:
                    return s, b, p
            return None
        return stmt, block, parent

    def _method_entry(self, patch: Patch, classes: list[cst.ClassDef]) -> None:
        """Insert ``patch.statement`` at the top of the method (after its docstring)."""
        a = ALIASES[patch.module]
        n = 0
        for cls in classes:
            fns = [s for s in _block_body(cls.body) or [] if isinstance(s, cst.FunctionDef)
                   and s.name.value in patch.method]
            if not fns and patch.cls_regex:
                continue
            if len(fns) != 1:
                self.err(f"class {cls.name.value}", f"method {'/'.join(patch.method)} found "
                         f"{len(fns)} times, expected 1 (patch {patch.name})")
                continue
            fn = fns[0]
            where = f"{cls.name.value}.{fn.name.value}"
            params = _params(fn)
            if len(params) < 2 or params[1] != patch.param:
                if patch.cls_regex:  # e.g. an inner *Model taking loop indices: not ours
                    self.res.notes.append(f"{self.relpath}: {where}({', '.join(params[1:])}) "
                                          f"skipped: first argument is not {patch.param}")
                    continue
                self.err(where, f"anchor 'parameter {patch.param}' not found "
                         f"(signature: {', '.join(params)}) (patch {patch.name})")
                continue
            first = _first_after_docstring(_block_body(fn.body) or [])
            if first is None:
                self.err(where, f"method has no statement to insert before (patch {patch.name})")
                continue
            code = patch.statement.format(mod=a, param=patch.param,  # type: ignore[union-attr]
                                          **{k: repr(v) for k, v in self.options.items() if v})
            self.add(self.before, first, f"{code}  # {MARKER}\n", patch, f"{where}: {code.split(' if ')[0]}")
            n += 1
        if n == 0 and len(self.res.errors) == self.n_errors and not patch.cls_regex:
            self.err(f"class {patch.cls}", f"no method to patch (patch {patch.name})")

    def _after_assign(self, patch: Patch, classes: list[cst.ClassDef]) -> None:
        """Insert ``patch.statement`` right after the one ``<name> = <value>`` in the method."""
        cls = classes[0]
        fn = self.method(cls, patch)
        if fn is None:
            return
        where = f"{cls.name.value}.{fn.name.value}"
        hits = []
        for s, _, _ in _walk(fn.body):  # type: ignore[arg-type]
            if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 \
                    and isinstance(s.body[0], cst.Assign) \
                    and self.module.code_for_node(s.body[0].value) == patch.value:
                hits.append(s)
        if len(hits) != 1:
            self.err(where, f"anchor 'assignment = {patch.value}' found {len(hits)} times, expected 1 "
                     f"(patch {patch.name})")
            return
        targets = hits[0].body[0].targets  # type: ignore[union-attr]
        if len(targets) != 1 or not isinstance(targets[0].target, cst.Name):
            self.err(where, f"anchor 'assignment = {patch.value}': target is not a plain name")
            return
        code = patch.statement.format(mod=ALIASES[patch.module],  # type: ignore[union-attr]
                                      target=targets[0].target.value)
        self.add(self.after, hits[0], f"{code}  # {MARKER}\n", patch, f"{where}: {code}")


def _attr_uses(fn: cst.CSTNode, name: str, attr: str) -> list[cst.Attribute]:
    import libcst.matchers as m

    return list(m.findall(fn, m.Attribute(value=m.Name(name), attr=m.Name(attr))))


def _assigned_names(stmt: cst.BaseStatement) -> set[str]:
    import libcst.matchers as m

    out: set[str] = set()
    if isinstance(stmt, cst.SimpleStatementLine):
        for x in stmt.body:
            if isinstance(x, cst.Assign):
                for t in x.targets:
                    out |= {n.value for n in m.findall(t.target, m.Name())}
    return out


def _sub_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Statement-structure children only (blocks, else/except/finally wrappers, statements)."""
    out: list[cst.CSTNode] = []
    if isinstance(node, (cst.Module, cst.IndentedBlock)):
        out.extend(node.body)
    elif isinstance(node, cst.If):
        out.append(node.body)
        if node.orelse is not None:
            out.append(node.orelse)
    elif isinstance(node, (cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler)):
        out.append(node.body)
    elif not isinstance(node, cst.SimpleStatementLine):
        for attr in ("body", "orelse", "finalbody"):
            sub = getattr(node, attr, None)
            if isinstance(sub, cst.CSTNode):
                out.append(sub)
        out.extend(getattr(node, "handlers", ()) or ())
    return out


def _keep_ids(root: cst.CSTNode, targets: set[int]) -> set[int]:
    """ids of every node on a path from ``root`` to a target statement, so the transformer can
    skip all other subtrees (a full libcst visit is the slow part of a patch)."""
    keep: set[int] = set()

    def walk(n: cst.CSTNode) -> bool:
        hit = id(n) in targets
        for c in _sub_nodes(n):
            hit = walk(c) or hit
        if hit:
            keep.add(id(n))
        return hit

    walk(root)
    return keep


class _Inserter(cst.CSTTransformer):
    def __init__(self, root: cst.CSTNode, before: dict[int, list], after: dict[int, list]) -> None:
        self.before, self.after = before, after
        self.keep = _keep_ids(root, set(before) | set(after))

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.keep

    def _splice(self, original: Any, updated: Any) -> Any:
        if not any(id(s) in self.before or id(s) in self.after for s in original.body):
            return updated
        body: list = []
        for o, u in zip(original.body, updated.body, strict=True):
            body.extend(self.before.get(id(o), ()))
            body.append(u)
            body.extend(self.after.get(id(o), ()))
        return updated.with_changes(body=body)

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        return self._splice(original, updated)

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return self._splice(original, updated)


def file_matches(patch: Patch, relpath: str) -> bool:
    return fnmatch.fnmatchcase(relpath, patch.file)


def _import_line(tree: ast.Module) -> int:
    """0-based line index after which the guarded import goes: after the last top-level import
    before the first def/class (so after ``from __future__``), else after the docstring."""
    after = 0
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            break
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            after = n.end_lineno or n.lineno
    if after == 0 and tree.body and isinstance(tree.body[0], ast.Expr) \
            and isinstance(tree.body[0].value, ast.Constant) and isinstance(tree.body[0].value.value, str):
        after = tree.body[0].end_lineno or 0
    return after


def _target_classes(tree: ast.Module, patch: Patch) -> list[ast.ClassDef]:
    out = [n for n in tree.body if isinstance(n, ast.ClassDef)
           and (n.name == patch.cls if patch.cls else re.search(patch.cls_regex or "$^", n.name))]
    if patch.cls_regex:  # a glob over many files: only classes that define the method
        out = [c for c in out if any(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                                     and f.name in patch.method for f in c.body)]
    return out


def transform_source(relpath: str, source: str, patches: list[Patch], version: str,
                     options: dict[str, Any]) -> FileResult:
    """Plan and apply every patch of ``patches`` to one file's text; nothing is written here."""
    res = FileResult(relpath)
    if MARKER in source:
        res.errors.append(f"{relpath}: already carries {MARKER} insertions but is not in the "
                          "manifest; restore the original file first")
        return res
    bom = "\ufeff" if source.startswith("\ufeff") else ""  # kept byte for byte, invisible to parsers
    source = source[len(bom):]
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        res.errors.append(f"{relpath}: cannot parse ({exc.msg}, line {exc.lineno})")
        return res
    lines = source.splitlines(keepends=True)
    # slice = (start, end, header): the one method a patch works in, wrapped in a bare
    # "class <Name>:" header so it parses alone; the whole class when the method count is wrong
    # (the planner then reports the count).
    groups: dict[tuple[int, int, str], list[Patch]] = {}
    for p in patches:
        classes = _target_classes(tree, p)
        if p.cls and len(classes) != 1:
            res.errors.append(f"{relpath}: class {p.cls}: found {len(classes)} times, expected 1 "
                              f"(patch {p.name})")
            continue
        for c in classes:
            fns = [f for f in c.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and f.name in p.method]
            node: ast.AST = fns[0] if len(fns) == 1 else c
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1  # type: ignore[attr-defined]
            end = node.end_lineno or node.lineno  # type: ignore[attr-defined]
            header = f"class {c.name}:\n" if node is not c else ""
            groups.setdefault((start, end, header), []).append(p)
    modules_used: list[str] = []
    pieces: list[tuple[int, int, str]] = []
    for (start, end, header), ps in sorted(groups.items()):
        text = header + "".join(lines[start:end])
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError as exc:
            res.errors.append(f"{relpath}: line {start + 1}: libcst cannot parse it ({exc.message})")
            continue
        planner = _Planner(module, relpath, version, options, res, modules_used)
        for p in ps:
            planner.run(p, [module.body[-1]])  # type: ignore[list-item]
        if planner.before or planner.after:
            new = module.visit(_Inserter(module, planner.before, planner.after)).code
            pieces.append((start, end, new[len(header):]))
    if res.errors or not pieces:
        return res
    out = list(lines)
    for start, end, new in sorted(pieces, reverse=True):
        out[start:end] = [new]
    at = _import_line(tree)
    block = "".join(_IMPORT_BLOCK[m].format(m=MARKER, a=ALIASES[m]) for m in modules_used)
    if at and not out[at - 1].endswith("\n"):
        block = "\n" + block
    out[at:at] = [block]
    res.new_source = bom + "".join(out)
    for m in modules_used:
        res.inserted.insert(0, Inserted("(import)", f"guarded import of sglang_eagle3_ext.runtime.{m}",
                                        f"from sglang_eagle3_ext.runtime import {m} as"))
    _number(res)
    return res


def _number(res: FileResult) -> None:
    """Give each insertion its line in the patched text (n-th equal statement -> n-th line)."""
    marked = [(i + 1, ln) for i, ln in enumerate(res.new_source.splitlines()) if MARKER in ln]  # type: ignore[union-attr]
    used: set[int] = set()
    for ins in res.inserted:
        for no, ln in marked:
            if no not in used and ins.code in ln:
                ins.line = no
                used.add(no)
                break
