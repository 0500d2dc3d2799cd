"""Crash safety, proven exhaustively: `patch apply`, aux on / off / switch and `revert` are killed
after every write they make, and then (a) `status` tells the truth, (b) a plain `revert` gives back
a byte-identical tree with no temp file and no state folder, (c) re-running the killed command
finishes it (no --force anywhere).

The kill is real: the command runs in a forked child whose ``manifest.crash_hook`` calls
``os._exit`` at the Nth crash point (a temp file written, a file replaced, a file removed), so no
``finally``/``except`` of ours runs, exactly like SIGKILL at that instant.

Sources: real pinned SGLang releases 0.5.23 (V2c + accept hook) and 0.5.12.post1 (V1c + V2, V1
accept field renamed), trimmed to the files the patcher reads (srt/speculative, srt/plugins, the
scheduler mixin, version files, dist-info) and three model files, so every write point of every
command is visited in a few seconds. The other releases use the same engine code paths.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from sglang_eagle3_ext.patcher import engine
from sglang_eagle3_ext.patcher import manifest as mf
from sglang_eagle3_ext.runtime.sglang_env import locate
from sglang_eagle3_ext.serve import releases

RELEASES = ("0.5.23", "0.5.12.post1")
MODELS = ("llama.py", "qwen2.py", "qwen3.py")
KILLED = 137


def _trimmed_copy(version: str, dst: Path) -> Path:
    src = releases.fetch(version)
    pkg = src / "sglang"
    (dst / "sglang" / "srt" / "models").mkdir(parents=True)
    for d in src.glob("sglang-*.dist-info"):
        shutil.copytree(d, dst / d.name)
    for f in pkg.glob("*.py"):
        shutil.copy2(f, dst / "sglang" / f.name)
    for sub in ("srt/speculative", "srt/plugins"):
        if (pkg / sub).is_dir():
            shutil.copytree(pkg / sub, dst / "sglang" / sub,
                            ignore=shutil.ignore_patterns("__pycache__"))
    for rel in ["srt/managers/scheduler_output_processor_mixin.py"] + [f"srt/models/{m}" for m in MODELS]:
        if (pkg / rel).is_file():
            (dst / "sglang" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pkg / rel, dst / "sglang" / rel)
    return dst


def _files(pkg: Path) -> dict[str, bytes]:
    """Every file under the package (state folder and temp files included), by relative path."""
    return {p.relative_to(pkg).as_posix(): p.read_bytes()
            for p in pkg.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _py_hashes(pkg: Path) -> dict[str, str]:
    return {p.relative_to(pkg).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (pkg / "srt").rglob("*.py")}


def _restore(pkg: Path, snap: dict[str, bytes]) -> None:
    for p in sorted(pkg.rglob("*"), reverse=True):
        if "__pycache__" in p.parts:
            continue
        rel = p.relative_to(pkg).as_posix()
        if p.is_file() and rel not in snap:
            p.unlink()
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    for rel, data in snap.items():
        q = pkg / rel
        if not q.is_file() or q.read_bytes() != data:
            q.parent.mkdir(parents=True, exist_ok=True)
            q.write_bytes(data)


def _count_points(op: Callable[[], object]) -> int:
    n = 0

    def hook(what: str, path: Path) -> None:
        nonlocal n
        n += 1

    mf.crash_hook = hook
    try:
        op()
    finally:
        mf.crash_hook = None
    return n


def _killed_at(op: Callable[[], object], point: int) -> int:
    """Run ``op`` in a forked child killed (os._exit) at crash point ``point``; its exit code."""
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        code = 0
        try:
            seen = 0

            def hook(what: str, path: Path) -> None:
                nonlocal seen
                seen += 1
                if seen == point:
                    os._exit(KILLED)

            mf.crash_hook = hook
            op()
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


SCENARIOS = {
    # name: (setup calls from pristine, the command that gets killed)
    "apply": ((), lambda env: engine.apply(env)),
    "aux-on": ((None,), lambda env: engine.apply(env, aux_layers="2,30,58")),
    "aux-off": (("2,30,58",), lambda env: engine.apply(env, aux_layers="off")),
    "aux-switch": (("2,30,58",), lambda env: engine.apply(env, aux_layers="1,2,3")),
    "revert": (("2,30,58",), lambda env: engine.revert(env)),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("version", RELEASES)
def test_kill_after_every_write_is_recoverable(tmp_path, version, scenario):
    root = _trimmed_copy(version, tmp_path / "tree")
    pkg = root / "sglang"
    env = locate(root)
    orig = _py_hashes(pkg)
    setup, cmd = SCENARIOS[scenario]
    for aux in setup:
        engine.apply(env, aux_layers=aux)
    init_files, init = _files(pkg), _py_hashes(pkg)
    points = _count_points(lambda: cmd(locate(root)))
    final_files, final = _files(pkg), _py_hashes(pkg)
    final_state = engine.status(locate(root))["state"]
    assert points >= 3 and final != init
    for n in range(1, points + 1):
        _restore(pkg, init_files)
        assert _killed_at(lambda: cmd(locate(root)), n) == KILLED, f"point {n} of {points} not reached"
        crashed = _files(pkg)
        now = _py_hashes(pkg)
        # (a) status tells the truth: every changed file is listed, each with its real state
        st = engine.status(locate(root))
        listed = {f["path"]: f["state"] for f in st["files"]}
        for rel, h in now.items():
            if h != orig[rel]:
                assert listed.get(rel, "").startswith("patched"), (n, rel, st["state"])
                assert h in (init[rel], final[rel]), (n, rel)
            elif rel in listed:
                assert listed[rel] == "original", (n, rel, listed[rel])
        assert st["state"] != "drifted", n
        if st["state"] == "patched":
            assert now in (init, final), n
        if st["state"].startswith("not patched"):
            assert now == orig, n
        # (b) a plain revert restores every byte, sweeps temp files, removes the state
        rep = engine.revert(locate(root))
        assert _py_hashes(pkg) == orig, n
        assert not list(pkg.rglob("*.tmp")), n
        assert not (pkg / mf.STATE_DIR).exists(), n
        assert rep.forced == [] and rep.left_alone == []
        # (c) running the killed command again finishes it
        _restore(pkg, crashed)
        cmd(locate(root))
        assert _py_hashes(pkg) == final, n
        assert engine.status(locate(root))["state"] == final_state, n
        assert not list(pkg.rglob("*.tmp")), n
        assert _files(pkg).keys() == final_files.keys(), n


def test_a_second_kill_during_recovery_is_recoverable(tmp_path):
    """Switch 2,30,58 -> 1,2,3 killed half-way, then a switch to 4,5,6 killed after every write:
    files may now hold any of three patched versions; revert and a re-run still work (0.5.23)."""
    root = _trimmed_copy("0.5.23", tmp_path / "tree")
    pkg = root / "sglang"
    orig = _py_hashes(pkg)
    engine.apply(locate(root), aux_layers="2,30,58")
    start = _files(pkg)
    first = _count_points(lambda: engine.apply(locate(root), aux_layers="1,2,3"))
    _restore(pkg, start)
    assert _killed_at(lambda: engine.apply(locate(root), aux_layers="1,2,3"), first // 2) == KILLED
    crashed = _files(pkg)

    def second():
        return engine.apply(locate(root), aux_layers="4,5,6")

    points = _count_points(second)
    final = _py_hashes(pkg)
    for n in range(1, points + 1):
        _restore(pkg, crashed)
        assert _killed_at(second, n) == KILLED
        st = engine.status(locate(root))
        assert st["state"] == "interrupted" or (st["state"] == "patched" and _py_hashes(pkg) == final), n
        again = _files(pkg)
        engine.revert(locate(root))
        assert _py_hashes(pkg) == orig and not list(pkg.rglob("*.tmp")), n
        _restore(pkg, again)
        second()
        assert _py_hashes(pkg) == final and engine.status(locate(root))["state"] == "patched", n
