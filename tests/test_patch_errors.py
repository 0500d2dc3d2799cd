"""Bad state and bad surroundings of `patch` are one line, never a traceback, and never leave the
tree changed (defect 8 of issue 18): a damaged manifest, a folder we cannot write."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.patcher import engine
from sglang_eagle3_ext.patcher import manifest as mf
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.sglang_env import locate
from sglang_eagle3_ext.serve import releases


def _hashes(pkg):
    return {p.relative_to(pkg).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in pkg.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def shared_tree(tmp_path_factory):
    dst = tmp_path_factory.mktemp("tree") / "sglang-0.5.23"
    shutil.copytree(releases.fetch("0.5.23"), dst, ignore=shutil.ignore_patterns("__pycache__", ".complete"))
    before = _hashes(dst / "sglang" / "srt")
    yield dst
    assert _hashes(dst / "sglang" / "srt") == before


GOOD = {"before": "a" * 64, "after": "b" * 64}


@pytest.mark.parametrize("text", [
    b"\xff\xfe\x00garbage",                                           # UnicodeDecodeError
    b"{not json",                                                     # JSONDecodeError
    b"[]",                                                            # not an object
    json.dumps({"schema": mf.SCHEMA}).encode(),                      # no files table
    json.dumps({"schema": mf.SCHEMA, "files": []}).encode(),         # files not a mapping
    json.dumps({"schema": mf.SCHEMA, "files": {"x.py": {}}}).encode(),  # KeyError before
    json.dumps({"schema": mf.SCHEMA, "files": {"x.py": "s"}}).encode(),  # AttributeError
    json.dumps({"schema": mf.SCHEMA, "files": {"../x.py": GOOD}}).encode(),
    json.dumps({"schema": mf.SCHEMA, "files": {"x.py": GOOD}, "patches": "p"}).encode(),
    json.dumps({"schema": mf.SCHEMA, "files": {"x.py": GOOD}, "aux_layers": [1]}).encode(),
])
@pytest.mark.parametrize("cmd", [["status"], ["apply"], ["revert"], ["diff"]])
def test_damaged_manifest_is_one_line(shared_tree, capsys, text, cmd):
    root = shared_tree  # nothing may change it: every command must refuse
    state = root / "sglang" / mf.STATE_DIR
    state.mkdir(exist_ok=True)
    (state / "manifest.json").write_bytes(text)
    rc = cli.main(["patch", *cmd, "--sglang-root", str(root)])
    err = capsys.readouterr().err
    assert rc == 1 and "manifest" in err and len(err.strip().splitlines()) == 1, err


def test_unwritable_file_rolls_back_everything(release_copy, monkeypatch):
    """A read-only srt/speculative (faked at os.replace: tests run as root, where chmod does not
    stop writes): apply fails with one line and leaves the tree and the state exactly as before."""
    root = release_copy("0.5.23")
    pkg = root / "sglang"
    before = _hashes(pkg)
    real = os.replace

    def replace(src, dst, *a, **k):
        if str(dst).endswith("srt/speculative/eagle_worker_v2.py"):
            raise PermissionError(13, "Permission denied")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(UserError, match="Permission denied.*rolled back"):
        engine.apply(locate(root), aux_layers="2,30,58")
    assert _hashes(pkg) == before
    assert not (pkg / mf.STATE_DIR).exists()
    assert not list(pkg.rglob("*.tmp"))


def test_unwritable_file_on_switch_keeps_the_previous_state(release_copy, monkeypatch):
    root = release_copy("0.5.23")
    pkg = root / "sglang"
    engine.apply(locate(root), aux_layers="2,30,58")
    before = _hashes(pkg)
    real = os.replace

    def replace(src, dst, *a, **k):
        if str(dst).endswith("srt/models/qwen3.py"):
            raise PermissionError(13, "Permission denied")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(UserError, match="rolled back"):
        engine.apply(locate(root), aux_layers="1,2,3")
    assert _hashes(pkg) == before
    assert engine.status(locate(root))["state"] == "patched"
