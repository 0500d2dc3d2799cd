"""The SGLang version of a tree without dist-info (a bare unpack, a source checkout) comes from
``_version.py``, never from version.py's ``0.0.0.dev0`` fallback (defect 6 of issue 18); a tree
whose version cannot be trusted is refused with the reason, in one line."""

from __future__ import annotations

import shutil

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.patcher import engine
from sglang_eagle3_ext.runtime.errors import UserError
from sglang_eagle3_ext.runtime.sglang_env import locate


def _strip_dist_info(root):
    for d in root.glob("sglang-*.dist-info"):
        shutil.rmtree(d)


@pytest.mark.parametrize("version,accept", [("0.5.23", "accept-v2-hook"), ("0.5.12.post1", "accept-v2-hook")])
def test_no_dist_info_reads_version_py_and_keeps_the_accept_hook(release_copy, version, accept):
    root = release_copy(version)
    _strip_dist_info(root)
    env = locate(root)
    assert env.version == version
    names = [p.name for p in engine.plan(env).patches]
    assert accept in names


def test_dev_build_version_works(release_copy):
    """A dev build of SGLang main: setuptools-scm writes e.g. 0.5.24.dev3+gabc into _version.py."""
    root = release_copy("0.5.23")
    _strip_dist_info(root)
    vf = root / "sglang" / "_version.py"
    vf.write_text(vf.read_text().replace("'0.5.23'", "'0.5.24.dev3+gabc1234'"))
    env = locate(root)
    assert env.version == "0.5.24.dev3+gabc1234"
    assert "accept-v2-hook" in [p.name for p in engine.plan(env).patches]


def test_bare_checkout_without_version_is_refused_with_the_reason(release_copy, capsys):
    root = release_copy("0.5.23")
    _strip_dist_info(root)
    (root / "sglang" / "_version.py").unlink()
    with pytest.raises(UserError, match="cannot tell the SGLang version"):
        locate(root)
    assert cli.main(["patch", "apply", "--sglang-root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "_version.py" in err and len(err.strip().splitlines()) == 1


def test_scm_fallback_version_is_refused(release_copy):
    root = release_copy("0.5.23")
    _strip_dist_info(root)
    vf = root / "sglang" / "_version.py"
    vf.write_text(vf.read_text().replace("'0.5.23'", "'0.0.0.dev0'"))
    with pytest.raises(UserError, match="fallback"):
        locate(root)


def test_old_plain_version_py_still_read(release_copy):
    root = release_copy("0.4.10.post2")
    _strip_dist_info(root)
    assert locate(root).version == "0.4.10.post2"


@pytest.mark.parametrize("cmd", [["patch", "status"], ["patch", "apply"], ["doctor"]])
def test_worker_with_syntax_error_is_one_line(release_copy, capsys, cmd):
    root = release_copy("0.5.23")
    w = root / "sglang" / "srt" / "speculative" / "eagle_worker_v2.py"
    w.write_text(w.read_text() + "\ndef broken(:\n")
    rc = cli.main([*cmd, "--sglang-root", str(root)])
    err = capsys.readouterr().err
    assert rc != 0 and "not valid Python" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("release", ["0.5.23", "0.5.12.post1"])
def test_version_and_structure_disagree_is_refused_with_the_reason(release_copy, capsys, release):
    """A tree whose version says 0.5.11 but whose V2 worker has on_verify_complete_cpu (0.5.12+):
    before, 0.5.23 silently lost the accept hook and 0.5.12.post1 failed on an unrelated anchor."""
    root = release_copy(release)
    _strip_dist_info(root)
    vf = root / "sglang" / "_version.py"
    vf.write_text(vf.read_text().replace(f"'{release}'", "'0.5.11'"))
    assert locate(root).version == "0.5.11"
    assert cli.main(["patch", "apply", "--sglang-root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "version number and the code disagree" in err and "on_verify_complete_cpu" in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (root / "sglang" / ".sglang-eagle3-ext").exists()
