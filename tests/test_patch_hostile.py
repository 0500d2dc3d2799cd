"""`patch apply` on a symlinked worker file and on a full disk (issue 23, cases 16 and 17).

Full disk: every temp-file write of apply (pristine copies, the pending manifest, each patched
file, the final manifest) fails in turn with ENOSPC, raised at the real write point
(``manifest.crash_hook`` "temp written", inside atomic_write); each time the message says the tree
was rolled back, every byte is as before, no temp file is left and, on a first apply, no state
folder. A real 0.5.23 tree trimmed as in tests/test_patch_crash.py (the write order is the same
engine code for every release; the crash test covers 0.5.12.post1 too).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from test_patch_crash import _files, _trimmed_copy

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.patcher import engine
from sglang_eagle3_ext.patcher import manifest as mf
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.sglang_env import V2_FILE, locate


def _full_at(n: int):
    seen = 0

    def hook(what: str, path: Path) -> None:
        nonlocal seen
        if what == "temp written":
            seen += 1
            if seen == n:
                raise OSError(errno.ENOSPC, "No space left on device")
    return hook


def _temp_writes(op) -> int:
    n = 0

    def hook(what: str, path: Path) -> None:
        nonlocal n
        n += what == "temp written"

    mf.crash_hook = hook
    try:
        op()
    finally:
        mf.crash_hook = None
    return n


@pytest.mark.parametrize("setup", [None, "2,30,58"], ids=["first-apply", "switch"])
@pytest.mark.parametrize("version", ["0.5.23"])
def test_full_disk_at_every_write_rolls_back_and_says_so(tmp_path, version, setup):
    root = _trimmed_copy(version, tmp_path / "tree")
    pkg = root / "sglang"
    if setup:
        engine.apply(locate(root), aux_layers=setup)
    first = _files(pkg)

    def cmd():
        return engine.apply(locate(root), aux_layers="1,2,3")

    points = _temp_writes(cmd)
    assert points >= 4
    for n in range(1, points + 1):
        mf.crash_hook = None
        engine.revert(locate(root))
        if setup:
            engine.apply(locate(root), aux_layers=setup)
        before = _files(pkg)  # the manifest's applied_at differs per setup run
        assert before.keys() == first.keys(), n
        mf.crash_hook = _full_at(n)
        try:
            with pytest.raises(UserError) as ei:
                cmd()
        finally:
            mf.crash_hook = None
        msg = str(ei.value)
        assert "No space left on device" in msg and "rolled back" in msg, (n, msg)
        assert _files(pkg) == before, n  # every byte, state folder included
        assert not list(pkg.rglob("*.tmp")), n
        if setup is None:
            assert "no patch state left" in msg and not (pkg / mf.STATE_DIR).exists(), n
        else:
            assert engine.status(locate(root))["state"] == "patched", n


def test_full_disk_message_on_the_cli_is_one_line(tmp_path, capsys):
    root = _trimmed_copy("0.5.23", tmp_path / "tree")
    mf.crash_hook = _full_at(1)  # the first pristine copy
    try:
        assert cli.main(["patch", "apply", "--sglang-root", str(root)]) == 1
    finally:
        mf.crash_hook = None
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "rolled back" in err and "no patch state left" in err, err
    assert not (root / "sglang" / mf.STATE_DIR).exists()


def test_symlinked_worker_is_refused_and_the_link_kept(tmp_path, capsys):
    """Case 16: before, apply + revert gave back a regular file (bytes right, link gone). Now apply
    refuses (one line, nothing written) and the link is still a link to the same file."""
    root = _trimmed_copy("0.5.23", tmp_path / "tree")
    worker = root / "sglang" / V2_FILE
    real = tmp_path / "elsewhere" / worker.name
    real.parent.mkdir()
    worker.rename(real)
    worker.symlink_to(real)
    data = real.read_bytes()
    rc = cli.main(["patch", "apply", "--sglang-root", str(root)])
    err = capsys.readouterr().err
    assert rc == 1 and "symbolic link" in err and "nothing written" in err, err
    cli.main(["patch", "revert", "--sglang-root", str(root)])
    assert worker.is_symlink() and os.readlink(worker) == str(real) and real.read_bytes() == data
    assert not (root / "sglang" / mf.STATE_DIR).exists()


def test_a_file_that_became_a_link_after_patching_is_not_replaced_by_revert(tmp_path):
    root = _trimmed_copy("0.5.23", tmp_path / "tree")
    engine.apply(locate(root))
    worker = root / "sglang" / V2_FILE
    copy = tmp_path / "copy.py"
    copy.write_bytes(worker.read_bytes())
    worker.unlink()
    worker.symlink_to(copy)
    with pytest.raises(UserError, match="symbolic link"):
        engine.revert(locate(root))
    assert worker.is_symlink()
