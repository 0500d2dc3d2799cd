"""One writer at a time on an SGLang tree: `patch revert` racing two `patch apply` (issue 23, case 1).

Before the fix the lock was a file in the state folder, and revert removed that folder: a waiting
apply then held a lock on a deleted file while a later apply locked a new one, two writers at once
(the manifest ended up listing 1 file while 29 carried the marker). The lock is now an flock on
the package folder itself (manifest.locked).

The commands are real processes (forked children of this test, each in its own process group
created by the fork, never pytest's), working on a real 0.5.23 tree trimmed to the files the
patcher reads (tests/test_patch_crash.py). A child proves it is the only writer by creating
``writer`` with O_EXCL in a shared folder when it gets the lock (``manifest.lock_hook``
"locked") and removing it when it lets go ("unlocking"); a second writer finds the file there and
exits 99. Pauses are real SIGSTOP/SIGCONT: a child stops itself while it holds the lock, the test
starts the next one meanwhile and lets the first go on with SIGCONT. Only pids this test forked
are ever signalled.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_patch_crash import _py_hashes, _trimmed_copy

from sglang_eagle3_ext.patcher import engine
from sglang_eagle3_ext.patcher import manifest as mf
from sglang_eagle3_ext.patcher.transform import MARKER
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.sglang_env import locate

TWO_WRITERS = 99
_LIVE: set[int] = set()  # forked and not reaped yet: the only pids this test may signal


def _reap_all() -> None:
    for pid in list(_LIVE):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        _LIVE.discard(pid)


def _child(root: Path, op: Callable[[object], object], marks: Path, tag: str, *,
           stop: bool = False, hold_s: float = 0.0, times: int = 1) -> int:
    """Fork a child that runs ``op`` ``times`` times under the writer check; returns its pid."""
    pid = os.fork()
    if pid:
        _LIVE.add(pid)
        return pid
    code = 0
    try:
        def hook(what: str, path: Path) -> None:
            if what == "waiting":
                (marks / f"{tag}.waiting").touch()
            elif what == "locked":
                try:
                    fd = os.open(marks / "writer", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                except FileExistsError:
                    os._exit(TWO_WRITERS)
                os.write(fd, tag.encode())
                os.close(fd)
                if stop:
                    os.kill(os.getpid(), signal.SIGSTOP)  # the test sends SIGCONT
                time.sleep(hold_s)
            elif what == "unlocking":
                os.unlink(marks / "writer")

        mf.lock_hook = hook
        for i in range(times):
            op(i)
    except UserError:
        code = 2
    except BaseException:  # noqa: BLE001 - any other failure of the child is a distinct code
        code = 3
    os._exit(code)


def _wait(pid: int, *, stopped: bool = False, timeout: float = 20.0) -> int:
    """Wait for a forked child to stop (``stopped``) or to exit; its exit code or -1 when stopped."""
    deadline = time.monotonic() + timeout
    flags = os.WNOHANG | (os.WUNTRACED if stopped else 0)
    while time.monotonic() < deadline:
        got, status = os.waitpid(pid, flags)
        if got:
            if os.WIFSTOPPED(status):
                return -1
            _LIVE.discard(pid)
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    _reap_all()
    raise AssertionError(f"child {pid} did not {'stop' if stopped else 'exit'} in {timeout} s")


def _until(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.01)


def _consistent(root: Path, orig: dict[str, str]) -> None:
    """Every file carrying our marker is in the manifest, and a plain revert gives the original."""
    pkg = root / "sglang"
    st = engine.status(locate(root))
    listed = {f["path"] for f in st["files"]}
    marked = {p.relative_to(pkg).as_posix() for p in (pkg / "srt").rglob("*.py")
              if MARKER.encode() in p.read_bytes()}
    assert marked <= listed, (st["state"], marked - listed)
    assert st["state"] in ("patched", "not patched"), st["state"]
    engine.revert(locate(root))
    assert _py_hashes(pkg) == orig
    assert not (pkg / mf.STATE_DIR).exists()


@pytest.fixture()
def tree(tmp_path):
    root = _trimmed_copy("0.5.23", tmp_path / "tree")
    marks = tmp_path / "marks"
    marks.mkdir()
    return root, marks, _py_hashes(root / "sglang")


def test_revert_paused_with_the_lock_then_two_applies(tree):
    """R (revert) holds the lock, stopped; A (apply) waits; R goes on and removes the state
    folder; A gets the lock, stopped; B (apply) comes now. B must wait for A, not write beside it."""
    root, marks, orig = tree
    engine.apply(locate(root), aux_layers="2,30,58")
    r = _child(root, lambda i: engine.revert(locate(root)), marks, "R", stop=True)
    a = b = None
    try:
        assert _wait(r, stopped=True) == -1
        a = _child(root, lambda i: engine.apply(locate(root), aux_layers="1,2,3"), marks, "A", stop=True)
        _until(marks / "A.waiting")
        time.sleep(0.2)  # A is in its lock loop now
        os.kill(r, signal.SIGCONT)
        assert _wait(r) == 0
        assert _wait(a, stopped=True) == -1  # A holds the lock (R removed the state folder)
        assert not (root / "sglang" / mf.STATE_DIR / "manifest.json").exists()
        b = _child(root, lambda i: engine.apply(locate(root), aux_layers="4,5,6"), marks, "B")
        _until(marks / "B.waiting")
        time.sleep(0.3)  # before the fix B had locked a new lock file and found A writing by now
        os.kill(a, signal.SIGCONT)
        assert _wait(a) == 0
        assert _wait(b) == 0, "B found another writer holding the lock (exit 99)"
    finally:
        _reap_all()
    st = engine.status(locate(root))
    assert st["state"] == "patched" and st["manifest"]["aux_layers"] == "4,5,6"
    _consistent(root, orig)


def test_revert_and_two_applies_in_a_loop_without_pauses(tree):
    """Three processes at once, each six times: revert, apply (aux on/off), apply (another aux):
    every lock is taken by one writer at a time, and the tree ends consistent."""
    root, marks, orig = tree
    engine.apply(locate(root))
    ops = {
        "R": lambda i: engine.revert(locate(root)),
        "A": lambda i: engine.apply(locate(root), aux_layers="2,30,58" if i % 2 else "off"),
        "B": lambda i: engine.apply(locate(root), aux_layers="1,2,3" if i % 2 else None),
    }
    pids = {tag: _child(root, op, marks, tag, hold_s=0.01, times=6) for tag, op in ops.items()}
    try:
        codes = {tag: _wait(pid, timeout=60) for tag, pid in pids.items()}
    finally:
        _reap_all()
    assert codes == {"R": 0, "A": 0, "B": 0}, codes
    _consistent(root, orig)


def test_status_during_a_running_apply_says_in_progress(tree, capsys):
    """`patch status` while an apply holds the lock (stopped after its pending manifest, so mid-way):
    "apply in progress (pid N)", not "was killed" (issue 23, case 17)."""
    from sglang_eagle3_ext import cli

    root, marks, orig = tree
    pid = os.fork()
    if pid:
        _LIVE.add(pid)
    if pid == 0:
        code = 0
        try:
            def hook(what: str, path: Path) -> None:
                if what == "replaced" and path.name == "manifest.json":
                    os.kill(os.getpid(), signal.SIGSTOP)
                    mf.crash_hook = None

            mf.crash_hook = hook
            engine.apply(locate(root), aux_layers="2,30,58")
        except BaseException:  # noqa: BLE001
            code = 3
        os._exit(code)
    try:
        assert _wait(pid, stopped=True) == -1
        assert cli.main(["patch", "status", "--sglang-root", str(root)]) == 0
        text = capsys.readouterr().out
        assert f"apply in progress (pid {pid})" in text, text
        assert "killed" not in text
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        assert _wait(pid) == 0
    finally:
        _reap_all()
    assert engine.status(locate(root))["state"] == "patched"
    _consistent(root, orig)
