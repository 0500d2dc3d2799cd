"""Apply / revert / status / diff of the patch specs on one SGLang tree.

Safety rules (DESIGN.md): every anchor of every patch in the set is checked in memory first and
nothing is written unless all matched; files are written atomically under a lock; pristine
copies and a manifest (sha256 before/after) make revert exact; stale bytecode is removed; apply
is declarative (the result is always "pristine + the selected patches"), so applying twice is
a no-op; a file changed since patching is "drifted" and is never overwritten without --force.
"""

from __future__ import annotations

import difflib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..runtime.errors import UserError
from ..runtime.probemap import Patch, load_specs, select, version_matches
from ..runtime.sglang_env import SGLangEnv
from . import manifest as mf
from .transform import MARKER, FileResult, transform_source


@dataclass
class FilePlan:
    rel: str
    action: str  # "patch" | "unchanged" | "restore"
    current: bytes
    new: bytes
    result: FileResult | None = None


@dataclass
class Plan:
    env: SGLangEnv
    patches: list[Patch]
    options: dict[str, Any]
    files: list[FilePlan] = field(default_factory=list)
    previous: dict[str, Any] | None = None

    @property
    def changes(self) -> list[FilePlan]:
        return [f for f in self.files if f.current != f.new]


def _norm_aux(value: str | None, previous: dict[str, Any] | None) -> str | None:
    """``None`` keeps what was applied before; ``off`` removes the override. Parsed by the one
    aux-layer parser (layers.parse_layers); the target is unknown here, so no range check."""
    if value is None:
        return (previous or {}).get("aux_layers")
    if value.strip().lower() in ("off", "none", ""):
        return None
    from ..runtime.layers import format_layers, parse_layers

    return format_layers(parse_layers(value))


def _target_files(env: SGLangEnv, patches: list[Patch]) -> dict[str, list[Patch]]:
    """relpath -> patches touching it. Globs are narrowed to files that mention the method."""
    out: dict[str, list[Patch]] = {}
    for p in patches:
        if any(ch in p.file for ch in "*?["):
            needles = [f"def {m}".encode() for m in p.method]
            for path in sorted(env.package_dir.glob(p.file)):
                data = path.read_bytes()
                if any(n in data for n in needles):
                    out.setdefault(path.relative_to(env.package_dir).as_posix(), []).append(p)
        else:
            out.setdefault(p.file, []).append(p)
    return out


def _base_bytes(env: SGLangEnv, rel: str, current: bytes, entry: dict | None, errors: list[str]) -> bytes | None:
    """The original bytes of a file (from the pristine copy when it is patched by us)."""
    if entry is None:
        return current
    h = mf.sha256(current)
    if h == entry["before"]:
        return current
    if h in _ours(entry):  # patched by this set, or by one before it (an interrupted switch)
        pristine = mf.pristine_path(env.package_dir, rel)
        data = pristine.read_bytes() if pristine.is_file() else b""
        if mf.sha256(data) != entry["before"]:
            errors.append(f"{rel}: pristine copy {pristine} is missing or corrupted")
            return None
        return data
    errors.append(f"{rel}: drifted (changed since it was patched); restore it or run "
                  "`sgl-eagle3 patch revert --force`")
    return None


def _check_structure(env: SGLangEnv, specs: list[Patch], chosen: list[Patch]) -> None:
    """The version only confirms what the source shows: a patch left out by its version range
    alone, whose class and method are in this tree while no chosen patch covers that method, means
    the version number and the code disagree (a dev build, a relabelled or hand-built tree).
    Refuse with that reason instead of silently leaving a hook out."""
    from ..runtime.sglang_env import _method, _tree

    covered = {(p.file, m) for p in chosen for m in p.method}
    for q in specs:
        if q in chosen or q.requires_option or not q.cls or any(ch in q.file for ch in "*?["):
            continue
        if (q.family and not any(f in env.families for f in q.family)) or version_matches(env.version, q.versions):
            continue  # left out by its family, or not left out at all
        if any((q.file, m) in covered for m in q.method) or not env.path(q.file).is_file():
            continue
        tree = _tree(env.path(q.file))
        if any(_method(tree, q.cls, m) is not None for m in q.method):
            raise UserError(
                f"refused, nothing written: SGLang {env.version} is outside patch {q.name}'s range "
                f"({q.versions}), but its source has {q.cls}.{'/'.join(q.method)} in {q.file}, which "
                "that patch is for: the version number and the code disagree (a dev build or a "
                "relabelled tree?); install a release, or fix the version in _version.py/METADATA")


def plan(env: SGLangEnv, *, only: list[str] | None = None, aux_layers: str | None = None,
         specs_dir: Path | None = None) -> Plan:
    """Everything apply would write, computed in memory; raises UserError on any anchor problem."""
    previous = mf.read(env.package_dir)
    options = {"aux_layers": _norm_aux(aux_layers, previous)}
    specs = load_specs(specs_dir)
    chosen = select(specs, env, only=only, options=options)
    _check_structure(env, specs, chosen)
    if not chosen:
        unknown = [f for f in env.families if f.endswith("?")]
        why = (f"; its eagle worker has a layout this tool does not know ({', '.join(unknown)}: no "
               "EAGLEWorker/EAGLEWorkerV2 forward_batch_generation entry method); nothing was changed"
               if unknown else "; nothing was changed")
        raise UserError(f"no patch spec applies to SGLang {env.version} "
                        f"(families: {', '.join(env.families) or 'none found'}){why}")
    targets = _target_files(env, chosen)
    pl = Plan(env, chosen, options, previous=previous)
    errors: list[str] = []
    prev_files = (previous or {}).get("files", {})
    for p in chosen:
        if p.kind == "method-entry" and p.cls_regex and not any(p in ps for ps in targets.values()):
            errors.append(f"{p.file}: no {'/'.join(p.method)} found (patch {p.name})")
    for rel, patches in targets.items():
        path = env.path(rel)
        if _linked(env, rel, errors):
            continue
        if not path.is_file():
            errors.append(f"{rel}: file not found (patch {', '.join(x.name for x in patches)})")
            continue
        current = path.read_bytes()
        base = _base_bytes(env, rel, current, prev_files.get(rel), errors)
        if base is None:
            continue
        res = transform_source(rel, base.decode("utf-8"), patches, env.version, options)
        errors.extend(res.errors)
        if res.new_source is None:
            if not res.errors:  # e.g. a glob file whose only classes were skipped
                if res.notes:
                    pl.files.append(FilePlan(rel, "unchanged", current, base, res))
                continue
            continue
        try:
            compile(res.new_source, str(path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            errors.append(f"{rel}: patched text does not compile ({exc.msg}, line {exc.lineno})")
            continue
        new = res.new_source.encode("utf-8")
        pl.files.append(FilePlan(rel, "patch", current, new, res))
    for rel, entry in prev_files.items():  # patched before, not part of this set: back to pristine
        if rel in targets:
            continue
        path = env.path(rel)
        if _linked(env, rel, errors):
            continue
        current = path.read_bytes() if path.is_file() else b""
        base = _base_bytes(env, rel, current, entry, errors)
        if base is not None:
            pl.files.append(FilePlan(rel, "restore", current, base))
    if errors:
        raise UserError("refused, nothing written: " + "; ".join(errors))
    return pl


def _linked(env: SGLangEnv, rel: str, errors: list[str]) -> bool:
    """A symlinked file is refused, never written: a rename would put a regular file where the
    link was (the link lost), and writing through would change the file it names, which other
    installs may share. The fix is the user's: a copy in place of the link."""
    path = env.path(rel)
    if not path.is_symlink():
        return False
    errors.append(f"{rel}: is a symbolic link (to {os.readlink(path)}); patching it would replace "
                  "the link or change a file other installs may share: put a copy of the file in "
                  "place of the link, then apply again")
    return True


def apply(env: SGLangEnv, *, only: list[str] | None = None, aux_layers: str | None = None,
          dry_run: bool = False, specs_dir: Path | None = None) -> Plan:
    """Bring the tree to "pristine + selected patches". Returns the plan (what changed)."""
    if dry_run:
        return plan(env, only=only, aux_layers=aux_layers, specs_dir=specs_dir)
    with mf.locked(env.package_dir):
        pl = plan(env, only=only, aux_layers=aux_layers, specs_dir=specs_dir)
        files = {f.rel: f for f in pl.files if f.action == "patch"}
        names = [p.name for p in pl.patches]
        prev = pl.previous or {}
        _drop_orphans(env, set(prev.get("files", {})))
        if not pl.changes and prev.get("patches") == names and not prev.get("pending") and \
                prev.get("aux_layers") == pl.options["aux_layers"]:
            return pl
        prev_files = prev.get("files", {})
        sweep_temp(env, set(prev_files) | set(files))
        new_copies = set(files) - set(prev_files)
        written: list[FilePlan] = []
        try:
            _write_all(env, pl, files, prev_files, new_copies, names, written)
        except UserError as exc:  # a full disk, a read-only folder: put back what was written
            raise UserError(f"{exc}; {_roll_back(env, written, pl.previous, new_copies)}") from None
        for f in pl.files:
            if f.action == "restore":
                mf.remove(mf.pristine_path(env.package_dir, f.rel))
        return pl


def _write_all(env: SGLangEnv, pl: Plan, files: dict[str, FilePlan], prev_files: dict[str, Any],
               new_copies: set[str], names: list[str], written: list[FilePlan]) -> None:
    """The write phase of apply; ``written`` collects the files replaced (for a roll-back).

    Crash safety (docs/reference/patching.md): pristine copies first; then a "pending" manifest that lists
    every file this run may touch with every hash it may have meanwhile (original, the new patched
    bytes, and the bytes of the set applied before); then the files; then the final manifest. A
    kill at any point leaves each file original, patched by the old set or patched by the new one,
    all three known, so `revert` and a re-run of `apply` work."""
    for rel, f in files.items():
        if rel in new_copies:
            mf.atomic_write(mf.pristine_path(env.package_dir, rel), f.current)
    final: dict[str, dict[str, Any]] = {}
    for rel, f in files.items():
        before = prev_files[rel]["before"] if rel in prev_files else mf.sha256(f.current)
        final[rel] = {"before": before, "after": mf.sha256(f.new),
                      "patches": sorted({i.patch for i in f.result.inserted if i.patch != "(import)"}),
                      "insertions": len(f.result.inserted)}
    pending = {rel: {**e, "previous": _previous(prev_files.get(rel))} for rel, e in final.items()}
    for f in pl.files:
        if f.action == "restore":  # on its way back to the original bytes
            e = prev_files[f.rel]
            pending[f.rel] = {"before": e["before"], "after": e["before"],
                              "previous": _previous(e), "patches": e.get("patches", [])}
    head = {"sglang_version": env.version, "families": env.families,
            "applied_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "tool_version": __version__,
            "patches": names, "aux_layers": pl.options["aux_layers"]}
    # "pid": `patch status` tells a running apply (it holds the lock) from a killed one
    mf.write(env.package_dir, {**head, "pending": "apply", "pid": os.getpid(), "files": pending})
    for f in pl.changes:
        _write(env, f.rel, f.new)
        written.append(f)
    mf.write(env.package_dir, {**head, "files": final})


def _write(env: SGLangEnv, rel: str, data: bytes) -> None:
    path = env.path(rel)
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    mf.atomic_write(path, data, mode)
    mf.drop_bytecode(path)


def _roll_back(env: SGLangEnv, written: list[FilePlan], previous: dict[str, Any] | None,
               new_copies: set[str]) -> str:
    """Undo a failed apply's writes; returns what the user must be told (the tree's state)."""
    try:
        for f in reversed(written):
            _write(env, f.rel, f.current)
        for rel in new_copies:
            mf.remove(mf.pristine_path(env.package_dir, rel))
        if previous is not None:
            mf.write(env.package_dir, previous)
        else:  # first apply: the whole state folder goes (the lock is not in it)
            shutil.rmtree(mf.state_dir(env.package_dir), ignore_errors=True)
    except (UserError, OSError) as exc:  # the pending manifest (if written) still lists every file
        return (f"rolling back failed too ({exc}): the tree is part-way; free some space, then run "
                "`sgl-eagle3 patch revert` (or `patch apply` again)")
    if previous is None:
        return "rolled back: the SGLang tree is exactly as it was, no patch state left"
    return "rolled back: the SGLang tree and its patch state are exactly as they were"


def _ours(entry: dict[str, Any]) -> set[str]:
    """Every patched hash a file in this entry may have: its target and those of earlier sets
    that an interrupted run had not replaced yet (``previous``; a str in older manifests)."""
    prev = entry.get("previous") or []
    return ({entry["after"]} | set([prev] if isinstance(prev, str) else prev)) - {entry["before"]}


def _previous(entry: dict[str, Any] | None) -> list[str]:
    """The patched hashes a file may still have from the sets applied before this run."""
    return sorted(_ours(entry)) if entry else []


def _drop_orphans(env: SGLangEnv, keep: set[str]) -> None:
    """Pristine copies no manifest entry needs (a kill between two steps left them)."""
    pristine = mf.state_dir(env.package_dir) / "pristine"
    if not pristine.is_dir():
        return
    for p in pristine.rglob("*.orig"):
        if p.relative_to(pristine).as_posix().removesuffix(".orig") not in keep:
            mf.remove(p)


def _tmp_folders(env: SGLangEnv, rels: set[str]) -> set[Path]:
    folders = {env.path(r).parent for r in rels}
    pristine = mf.state_dir(env.package_dir) / "pristine"
    folders.add(mf.state_dir(env.package_dir))
    if pristine.is_dir():
        folders |= {d for d in pristine.rglob("*") if d.is_dir()} | {pristine}
    return folders


def sweep_temp(env: SGLangEnv, rels: set[str]) -> int:
    """Temp files left by a killed write next to our files or in the state folder."""
    return mf.sweep_temp(_tmp_folders(env, rels))


@dataclass
class RevertReport:
    restored: list[str] = field(default_factory=list)
    already_original: list[str] = field(default_factory=list)
    forced: list[str] = field(default_factory=list)
    left_alone: list[str] = field(default_factory=list)
    nothing: bool = False


def revert(env: SGLangEnv, *, force: bool = False) -> RevertReport:
    """Restore every patched file to its original bytes (hash-checked) and drop the state."""
    rep = RevertReport()
    with mf.locked(env.package_dir):
        man = mf.read(env.package_dir)
        if man is None:
            marked = _marked_files(env)
            sweep_temp(env, set(_spec_targets(env)))
            shutil.rmtree(mf.state_dir(env.package_dir), ignore_errors=True)
            if marked:
                raise UserError(f"no manifest, but {len(marked)} file(s) carry {MARKER} insertions "
                                f"({', '.join(marked)}); reinstall SGLang to restore them")
            rep.nothing = True
            return rep
        todo: list[tuple[str, bytes]] = []
        drifted: list[str] = []
        for rel, entry in man["files"].items():
            path = env.path(rel)
            if path.is_symlink():
                raise UserError(f"refused, nothing written: {rel} is now a symbolic link (to "
                                f"{os.readlink(path)}), it was a file when it was patched; not "
                                "replacing the link: restore the file, then revert")
            cur = path.read_bytes() if path.is_file() else None
            h = mf.sha256(cur) if cur is not None else None
            pristine = mf.pristine_path(env.package_dir, rel)
            orig = pristine.read_bytes() if pristine.is_file() else None
            if h == entry["before"]:
                rep.already_original.append(rel)
                continue
            if orig is None or mf.sha256(orig) != entry["before"]:
                raise UserError(f"refused, nothing written: pristine copy of {rel} is missing or corrupted")
            if h in _ours(entry):
                todo.append((rel, orig))
            else:
                drifted.append(rel)
                if force and cur is not None and MARKER.encode() in cur:
                    todo.append((rel, orig))
                    rep.forced.append(rel)
                elif force:
                    rep.left_alone.append(rel)  # replaced wholesale (an upgrade): not ours any more
        if drifted and not force:
            raise UserError(f"refused, nothing written: {len(drifted)} file(s) changed since they were "
                            f"patched ({', '.join(drifted)}); `patch status` shows them as drifted; "
                            "use --force to restore the originals anyway")
        sweep_temp(env, set(man["files"]))
        if todo:  # a kill from here on reads as "revert interrupted"; running revert again finishes
            mf.write(env.package_dir, {**man, "pending": "revert", "pid": os.getpid()})
        for rel, orig in todo:
            path = env.path(rel)
            mode = path.stat().st_mode & 0o7777 if path.exists() else None
            mf.atomic_write(path, orig, mode)
            mf.drop_bytecode(path)
            if rel not in rep.forced:
                rep.restored.append(rel)
        # the manifest goes first: a kill after it leaves only copies of original bytes behind
        mf.remove(mf.state_dir(env.package_dir) / "manifest.json")
        shutil.rmtree(mf.state_dir(env.package_dir), ignore_errors=True)
    return rep


def _spec_targets(env: SGLangEnv, specs_dir: Path | None = None) -> list[str]:
    try:
        return list(_target_files(env, load_specs(specs_dir)))
    except UserError:
        return []


def _marked_files(env: SGLangEnv, specs_dir: Path | None = None) -> list[str]:
    """Files any spec could touch in this tree that carry our marker (cheap byte search)."""
    out = []
    for rel in _spec_targets(env, specs_dir):
        p = env.path(rel)
        if p.is_file() and MARKER.encode() in p.read_bytes():
            out.append(rel)
    return out


def status(env: SGLangEnv, specs_dir: Path | None = None) -> dict[str, Any]:
    """The truth per file, from hashes (not from what the manifest hopes)."""
    man = mf.read(env.package_dir)
    files: list[dict[str, Any]] = []
    if man:
        for rel, entry in man["files"].items():
            p = env.path(rel)
            if not p.is_file():
                state = "missing"
            else:
                h = mf.sha256(p.read_bytes())
                state = ("original" if h == entry["before"] else "patched" if h == entry["after"]
                         else "patched (previous set)" if h in _ours(entry) else "drifted")
            files.append({"path": rel, "state": state, "patches": entry.get("patches", [])})
    else:
        for rel in _marked_files(env, specs_dir):
            files.append({"path": rel, "state": "marked, no manifest", "patches": []})
    states = {f["state"] for f in files}
    running = mf.lock_is_held(env.package_dir)
    if running:  # an apply/revert holds the lock right now: mid-way, not killed
        overall = "in progress"
    elif man and man.get("pending") and "drifted" not in states and "missing" not in states:
        # a kill mid-way: every file is one of the known states; say how to finish
        overall = "interrupted"
    elif not files:
        overall = "not patched"
    elif states == {"patched"}:
        overall = "patched"
    elif "drifted" in states or "missing" in states:
        overall = "drifted"
    elif states == {"original"}:
        overall = "not patched (stale manifest)"
    elif "marked, no manifest" in states:
        overall = "unmanaged"
    else:
        overall = "partial"
    try:
        applicable = [p.name for p in load_specs(specs_dir) if p.applies_to(env)]
    except UserError:
        applicable = []
    return {
        "sglang": {"version": env.version, "package_dir": str(env.package_dir), "families": env.families},
        "state": overall,
        "pending": None if running else (man or {}).get("pending"),  # "apply" | "revert": killed mid-way
        # a command working on the tree now: its action and pid (from its pending manifest)
        "running": None if not running else {
            "action": (man or {}).get("pending"),
            "pid": (man or {}).get("pid") if isinstance((man or {}).get("pid"), int) else None},
        "manifest": None if not man else {k: man.get(k) for k in (
            "sglang_version", "applied_at", "tool_version", "patches", "aux_layers")},
        "files": files,
        "applicable_patches": applicable,
    }


def status_summary(env: SGLangEnv) -> dict[str, Any]:
    """Short form for `doctor`."""
    st = status(env)
    man = st["manifest"] or {}
    return {
        "state": st["state"],
        "route": "source-patch" if st["state"] in ("patched", "partial", "drifted", "interrupted") else None,
        "patched_files": sum(1 for f in st["files"] if f["state"] == "patched"),
        "patches": man.get("patches", []),
        "aux_layers": man.get("aux_layers"),
        "drifted": [f["path"] for f in st["files"] if f["state"] in ("drifted", "missing")],
    }


def diff(env: SGLangEnv, *, only: list[str] | None = None, aux_layers: str | None = None) -> str:
    """Unified diff: pristine -> on disk when patched; else on disk -> what apply would write."""
    man = mf.read(env.package_dir)
    chunks: list[str] = []

    def one(rel: str, a: bytes, b: bytes, la: str, lb: str) -> None:
        chunks.extend(difflib.unified_diff(
            a.decode("utf-8", "replace").splitlines(keepends=True),
            b.decode("utf-8", "replace").splitlines(keepends=True),
            fromfile=f"{la}/{rel}", tofile=f"{lb}/{rel}", n=2))

    if man:
        for rel in man["files"]:
            p, q = mf.pristine_path(env.package_dir, rel), env.path(rel)
            one(rel, p.read_bytes() if p.is_file() else b"", q.read_bytes() if q.is_file() else b"",
                "pristine", "installed")
    else:
        for f in plan(env, only=only, aux_layers=aux_layers).changes:
            one(f.rel, f.current, f.new, "installed", "patched")
    return "".join(chunks)
