"""The source patcher on the real source of every pinned SGLang release (no import of SGLang).

Every check of "where did the probes go" reads the patched file back with stdlib ``ast`` (not
the libcst code that wrote it, and not a string search).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from pathlib import Path

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.patcher import engine, is_patched
from sglang_eagle3_ext.patcher import manifest as mf
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.sglang_env import locate

ALIAS = "_sglang_eagle3_probes"
V1 = "srt/speculative/eagle_worker.py"
V2 = "srt/speculative/eagle_worker_v2.py"
SCHED = "srt/managers/scheduler_output_processor_mixin.py"

# (file, class, entry method, {phase: anchor callee}, V1 accept field or None), per release,
# written from reference/sglang-version-map.md sections 2.2/2.3 (not from patches/*.yaml).
V1B = (V1, "EAGLEWorker", "forward_batch_speculative_generation",
       {"draft": "self.draft", "verify": "self.verify", "extend": "self.forward_draft_extend_after_decode"})
V1C = (V1, "EAGLEWorker", "forward_batch_generation",
       {"draft": "self.draft", "verify": "self.verify", "extend": "self.forward_draft_extend_after_decode"})
V2BETA = (V2, "EAGLEWorkerV2", "forward_batch_generation", {"draft": "self.draft", "verify": "self.verify"})
V2X = (V2, "EAGLEWorkerV2", "forward_batch_generation",
       {"draft": "self.draft_worker.draft", "verify": "self.verify",
        "extend": "self.draft_worker._draft_extend_for_decode"})
EXPECT = {
    "0.4.10.post2": [(*V1B, "accept_length_per_req_cpu")],
    "0.5.3.post2": [(*V1C, "accept_length_per_req_cpu"), (*V2BETA, None)],
    "0.5.9": [(*V1C, "accept_length_per_req_cpu"), (*V2X, None)],
    "0.5.12.post1": [(*V1C, "num_correct_drafts_per_req_cpu"), (*V2X, None)],
    "0.5.13": [(*V2X, None)],
    "0.5.16": [(*V2X, None)],
    "0.5.19": [(*V2X, None)],
    "0.5.23": [(*V2X, None)],
}


def _probe(stmt: ast.stmt) -> tuple[str, object] | None:
    """('phase_begin', 'draft') for `if ALIAS is not None: ALIAS.phase_begin("draft")`."""
    if not (isinstance(stmt, ast.If) and ast.unparse(stmt.test) == f"{ALIAS} is not None"):
        return None
    call = stmt.body[0].value  # type: ignore[attr-defined]
    name = ast.unparse(call.func).removeprefix(ALIAS + ".")
    arg = call.args[0] if call.args else None
    return name, (arg.value if isinstance(arg, ast.Constant) else ast.unparse(arg) if arg else None)


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    c = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(f for f in c.body if isinstance(f, ast.FunctionDef) and f.name == name)


def _blocks(node: ast.AST):
    for n in ast.walk(node):
        for attr in ("body", "orelse", "finalbody"):
            b = getattr(n, attr, None)
            if isinstance(b, list) and b and isinstance(b[0], ast.stmt):
                yield b


def _calls(stmt: ast.stmt) -> list[str]:
    return [ast.unparse(c.func) for c in ast.walk(stmt) if isinstance(c, ast.Call)]


def check_decode_probes(src: str, cls: str, meth: str, phases: dict[str, str], accept: str | None) -> None:
    tree = ast.parse(src)
    fn = _method(tree, cls, meth)
    # decode branch = the block that starts with cycle_begin; it must end with cycle_end + return
    branches = [b for b in _blocks(fn) if _probe(b[0]) == ("cycle_begin", None)]
    assert len(branches) == 1
    br = branches[0]
    assert _probe(br[-2]) == ("cycle_end", None) and isinstance(br[-1], ast.Return)
    seen = []
    for phase, callee in phases.items():
        # the statement right after phase_begin(phase) contains the anchor call (maybe in a with)
        hits = [(b, i) for b in _blocks(fn) for i, s in enumerate(b)
                if _probe(s) == ("phase_begin", phase)]
        assert len(hits) == 1, (phase, hits)
        b, i = hits[0]
        assert callee in _calls(b[i + 1]), (phase, ast.unparse(b[i + 1])[:200])
        assert _probe(b[i + 2]) == ("phase_end", phase)
        seen.append(b[i + 1].lineno)
        if accept and phase == "verify":
            assert _probe(b[i + 3]) == ("record_accept", f"verify_output.{accept}")
            assert "bonus_included=False" in ast.unparse(b[i + 3])
    assert seen == sorted(seen), "phases must be in draft -> verify -> extend order"
    # the non-decode (prefill / extend) branch of the same `if` starts with mark_boundary
    marks = [b for b in _blocks(fn) if _probe(b[0]) == ("mark_boundary", "extend")]
    assert len(marks) == 1, "mark_boundary must open the one non-decode branch"
    owner = next(n for n in ast.walk(fn) if isinstance(n, ast.If) and (n.body is marks[0] or n.orelse is marks[0]))
    assert br in (owner.body, owner.orelse) and br is not marks[0]
    if "extend" not in phases:  # V2-beta: re-extend inlined in verify, no extend phase inserted
        assert not [s for b in _blocks(fn) for s in b if _probe(s) == ("phase_begin", "extend")]
    # the guarded import binds the alias to None when our package is absent
    tries = [n for n in tree.body if isinstance(n, ast.Try) and "sglang_eagle3_ext" in ast.unparse(n)]
    assert len(tries) == 1 and ast.unparse(tries[0].handlers[0].body[0]) == f"{ALIAS} = None"


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("version", list(EXPECT))
def test_apply_status_revert_roundtrip(release_copy, version):
    root = release_copy(version)
    before = _tree_bytes(root)
    env = locate(root)
    pl = engine.apply(env)
    files = {f.rel for f in pl.changes}
    expected_files = {e[0] for e in EXPECT[version]}
    expected_files |= {SCHED} if V2 in files and env.version_tuple < (0, 5, 12) else set()
    assert files == expected_files
    for rel in files:
        src = env.path(rel).read_text()
        compile(src, rel, "exec")
        assert is_patched(env.path(rel))
    for rel, cls, meth, phases, accept in EXPECT[version]:
        check_decode_probes(env.path(rel).read_text(), cls, meth, phases, accept)
    # V2 accept counts: on_verify_complete_cpu (0.5.12+) or the scheduler's CPU list before that
    if V2 in files:
        tree = ast.parse(env.path(V2).read_text())
        if env.version_tuple >= (0, 5, 12):
            first = _method(tree, "EAGLEWorkerV2", "on_verify_complete_cpu").body[0]
            assert _probe(first) == ("record_accept", "num_correct_drafts_per_req")
        else:
            mtree = ast.parse(env.path(SCHED).read_text())
            cls = next(n for n in mtree.body if isinstance(n, ast.ClassDef))
            found = [(b[i - 1], s) for b in _blocks(cls) for i, s in enumerate(b) if _probe(s)]
            assert len(found) == 1
            prev, probe = found[0]
            assert ast.unparse(prev.value) == "result.accept_lens.tolist()"  # type: ignore[attr-defined]
            assert _probe(probe)[0] == "record_accept" and "bonus_included=True" in ast.unparse(probe)
    st = engine.status(env)
    assert st["state"] == "patched" and {f["path"] for f in st["files"]} == files
    assert all(f["state"] == "patched" for f in st["files"])
    assert engine.status_summary(env)["route"] == "source-patch"
    # apply twice = no-op (no write: mtimes unchanged)
    mtimes = {rel: env.path(rel).stat().st_mtime_ns for rel in files}
    assert engine.apply(env).changes == []
    assert mtimes == {rel: env.path(rel).stat().st_mtime_ns for rel in files}
    rep = engine.revert(env)
    assert sorted(rep.restored) == sorted(files)
    assert _tree_bytes(root) == before  # byte-identical, and the state folder is gone
    assert engine.status(env)["state"] == "not patched"


@pytest.mark.parametrize("version", ["0.5.23"])
def test_aux_layers_override_at_every_outer_model(release_copy, version):
    root = release_copy(version)
    before = _tree_bytes(root)
    env = locate(root)
    engine.apply(env, aux_layers="2,30,58")
    outer, inner_skipped = 0, 0
    for path in sorted((env.package_dir / "srt/models").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8-sig"))
        for c in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for f in c.body:
                if not (isinstance(f, ast.FunctionDef) and f.name == "set_eagle3_layers_to_capture"):
                    continue
                body = [s for s in f.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                first = ast.unparse(body[0])
                is_outer = c.name.endswith(("ForCausalLM", "ForConditionalGeneration")) \
                    and f.args.args[1].arg == "layer_ids"
                if is_outer:
                    outer += 1
                    assert first == ("layer_ids = _sglang_eagle3_layers.override_layer_ids(self, layer_ids, "
                                     "'2,30,58') if _sglang_eagle3_layers is not None else layer_ids"), path
                else:  # inner *Model classes take loop indices: untouched
                    inner_skipped += 1
                    assert "_sglang_eagle3_layers" not in first
    assert outer >= 5
    assert engine.status(env)["manifest"]["aux_layers"] == "2,30,58"
    # a new value re-patches from the pristine copies; 'off' drops the model files again
    engine.apply(env, aux_layers="3,31,59")
    assert "'3,31,59'" in env.path("srt/models/llama.py").read_text()
    pl = engine.apply(env, aux_layers="off")
    assert {f.rel for f in pl.files if f.action == "restore"} >= {"srt/models/llama.py"}
    assert not is_patched(env.path("srt/models/llama.py"))
    engine.revert(env)
    assert _tree_bytes(root) == before


@pytest.mark.parametrize("mutation", ["remove", "duplicate"])
def test_missing_or_duplicated_anchor_is_refused_untouched(release_copy, mutation):
    root = release_copy("0.5.12.post1")
    env = locate(root)
    v1 = env.path(V1)
    text = v1.read_text()
    if mutation == "remove":  # the verify call of the V1 decode branch disappears
        text = text.replace("= self.verify(batch)", "= self.check_it(batch)")
    else:  # the re-extend call appears twice in the decode branch
        text = text.replace("next_draft_input = self.forward_draft_extend_after_decode(batch)",
                            "next_draft_input = self.forward_draft_extend_after_decode(batch)\n"
                            "                    self.forward_draft_extend_after_decode(batch)")
    v1.write_text(text)
    before = _tree_bytes(root)
    with pytest.raises(UserError) as ei:
        engine.apply(env)
    msg = str(ei.value)
    assert "nothing written" in msg and V1 in msg and "EAGLEWorker.forward_batch_generation" in msg
    if mutation == "remove":
        assert "anchor 'verify' (self.verify(...)) found 0 times" in msg
    else:
        assert "anchor 'extend' (self.forward_draft_extend_after_decode(...)) found 2 times" in msg
    assert _tree_bytes(root) == before  # the V2 file, whose anchors matched, is untouched too
    assert not mf.state_dir(env.package_dir).exists()


def test_drift_is_reported_and_revert_refuses_without_force(release_copy):
    root = release_copy("0.5.23")
    env = locate(root)
    original = env.path(V2).read_bytes()
    pyc = env.path("srt/speculative/__pycache__/eagle_worker_v2.cpython-311.pyc")
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(b"stale")
    engine.apply(env)
    assert not pyc.exists()  # stale bytecode of the touched file removed
    man = json.loads((mf.state_dir(env.package_dir) / "manifest.json").read_text())
    entry = man["files"][V2]
    assert entry["before"] == hashlib.sha256(original).hexdigest()
    assert entry["after"] == hashlib.sha256(env.path(V2).read_bytes()).hexdigest()
    assert man["sglang_version"] == "0.5.23" and "probes-v2c" in man["patches"]
    with env.path(V2).open("a") as f:
        f.write("# hand edit\n")
    assert engine.status(env)["state"] == "drifted"
    assert engine.status_summary(env)["drifted"] == [V2]
    with pytest.raises(UserError, match="drifted"):
        engine.apply(env)
    with pytest.raises(UserError, match="changed since they were patched"):
        engine.revert(env)
    assert env.path(V2).read_bytes().endswith(b"# hand edit\n")
    rep = engine.revert(env, force=True)
    assert rep.forced == [V2] and env.path(V2).read_bytes() == original


def test_only_selects_and_validates(release_copy, capsys):
    root = release_copy("0.5.9")
    env = locate(root)
    pl = engine.apply(env, only=["probes-v2a"])
    assert [f.rel for f in pl.changes] == [V2]
    assert cli.main(["patch", "apply", "--sglang-root", str(root), "--only", "nope"]) == 2
    assert "unknown patch nope" in capsys.readouterr().err
    assert cli.main(["patch", "apply", "--sglang-root", str(root), "--only", "probes-v2c"]) == 2
    assert "does not apply to SGLang 0.5.9" in capsys.readouterr().err
    assert cli.main(["patch", "apply", "--sglang-root", str(root), "--aux-layers", "a,b"]) == 2


def test_cli_dry_run_status_diff_revert(release_copy, capsys):
    root = release_copy("0.5.16")
    r = ["--sglang-root", str(root)]
    before = _tree_bytes(root)
    assert cli.main(["patch", "apply", "--dry-run", *r]) == 0
    out = capsys.readouterr().out
    assert "would patch srt/speculative/eagle_worker_v2.py" in out and "nothing written" in out
    assert _tree_bytes(root) == before
    assert cli.main(["patch", "diff", *r]) == 0
    assert '+            if _sglang_eagle3_probes is not None: _sglang_eagle3_probes.cycle_begin()' \
        in capsys.readouterr().out
    assert cli.main(["patch", "apply", *r]) == 0
    capsys.readouterr()
    assert cli.main(["patch", "status", "--json", *r]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["state"] == "patched" and st["manifest"]["patches"] == ["accept-v2-hook", "probes-v2c"]
    assert cli.main(["patch", "revert", *r]) == 0
    assert "reverted: 1 file(s)" in capsys.readouterr().out
    assert cli.main(["patch", "revert", *r]) == 0
    assert "nothing to revert" in capsys.readouterr().out
    assert _tree_bytes(root) == before


def test_unmanaged_marker_is_refused(release_copy):
    root = release_copy("0.5.13")
    env = locate(root)
    with env.path(V2).open("a") as f:
        f.write("# sglang-eagle3-ext leftover\n")
    assert engine.status(env)["state"] == "unmanaged"
    with pytest.raises(UserError, match="already carries"):
        engine.apply(env)
    os.chmod(env.path(V2), 0o644)


def test_status_says_which_route_records(release_copy, capsys):
    """0.5.16 has plugins: unpatched -> the plugin records; patched -> the patch, plugin hooks off."""
    root = str(release_copy("0.5.16"))
    assert cli.main(["patch", "status", "--sglang-root", root]) == 0
    assert "with EAGLE3_PROFILE=1 the plugin records them" in capsys.readouterr().out
    assert cli.main(["patch", "apply", "--sglang-root", root]) == 0
    capsys.readouterr()
    assert cli.main(["patch", "status", "--sglang-root", root]) == 0
    assert "exactly one route records" in capsys.readouterr().out


def test_unknown_worker_layout_is_refused_and_untouched(tmp_path, capsys):
    """A future SGLang whose eagle worker has no known entry method: one line, exit 1, no write."""
    pkg = tmp_path / "sglang"
    (pkg / "srt" / "speculative").mkdir(parents=True)
    worker = pkg / "srt" / "speculative" / "eagle_worker_v2.py"
    worker.write_text("class EAGLEWorkerV2:\n    def run_cycle(self, batch):\n        return batch\n")
    (pkg / "version.py").write_text('__version__ = "0.5.99"\n')
    before = worker.read_bytes()
    assert cli.main(["patch", "apply", "--sglang-root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "layout this tool does not know" in err and "nothing was changed" in err
    assert worker.read_bytes() == before
    assert not (pkg / ".sglang-eagle3-ext").exists()
