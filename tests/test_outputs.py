"""Result writes (issue 23, cases 2 and 3): `bench --out`, `adaptive write --out`, sweep outputs.

A bad destination is one line before any work (the stand-in server counts the requests: none);
a write that still fails prints the result on stdout and says where it could not go; a special
file (a FIFO here: the same rule as /dev/full, without touching the machine's /dev) is never
replaced; a symlink is written through, the link kept. The bench runs against the real-HTTP
stand-in (tests/standin_openai.py), 2 runs of 8 tokens.
"""

from __future__ import annotations

import json
import os
import stat

import pytest
from standin_openai import StandIn

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.documents import outputs
from sglang_eagle3_ext.runtime.errors import UserError


@pytest.fixture()
def standin():
    with StandIn(ttft_s=0.002, interval_s=0.001) as s:
        yield s


def _bench(url: str, out: str, *extra: str) -> list[str]:
    return ["bench", "--url", url, "--runs", "2", "--warmup", "0", "--max-tokens", "8",
            "--out", out, *extra]


def _bad_destinations(tmp_path):
    (tmp_path / "afile").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    return {
        "under a file": str(tmp_path / "afile" / "r.json"),
        "a folder": str(tmp_path),
        "a trailing slash": str(tmp_path / "new") + "/",
        "/proc": "/proc/self/nope/r.json",
        "a FIFO": str(tmp_path / "fifo"),
    }


@pytest.mark.parametrize("case", ["under a file", "a folder", "a trailing slash", "/proc", "a FIFO"])
def test_bad_out_is_one_line_before_any_request(standin, tmp_path, capsys, case):
    dest = _bad_destinations(tmp_path)[case]
    rc = cli.main(_bench(standin.url, dest))
    err = capsys.readouterr().err
    assert rc == 2 and "--out" in err and len(err.strip().splitlines()) == 1, err
    assert standin.requests == []  # checked before the work, not after
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)  # never replaced


def test_a_write_that_fails_after_the_bench_prints_the_result(standin, tmp_path, capsys, monkeypatch):
    """The folder was fine at the start and is a file by the end: the document goes to stdout."""
    from sglang_eagle3_ext.commands import bench as cmd

    folder = tmp_path / "res"
    real = cmd.run_with_progress

    def run_then_break_the_folder(*a, **k):
        result = real(*a, **k)
        folder.rmdir()
        folder.write_text("now a file")
        return result

    monkeypatch.setattr(cmd, "run_with_progress", run_then_break_the_folder)
    rc = cli.main(_bench(standin.url, str(folder / "r.json")))
    cap = capsys.readouterr()
    assert rc == 1
    assert "the result is on stdout instead" in cap.err and str(folder / "r.json") in cap.err
    doc = json.loads(cap.out[cap.out.index("{\n"):])  # the table, then the whole document
    assert doc["schema"] and len(doc["runs"]) == 2


def test_symlink_out_is_written_through_and_stays_a_link(standin, tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "17.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    assert cli.main(_bench(standin.url, str(link))) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["params"]["runs"] == 2
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file's mode is kept
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_special_files_are_refused_never_replaced(tmp_path):
    """write_atomic (what every result write uses) on a FIFO and on a link to one: refused, the
    node stays; as root also a character device node (a private /dev/null twin in tmp)."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "fifo")
    nodes = [tmp_path / "fifo", tmp_path / "link"]
    if os.geteuid() == 0:
        try:
            os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            nodes.append(tmp_path / "null")
        except OSError:
            pass
    for p in nodes:
        with pytest.raises(UserError, match="not a regular file"):
            outputs.check_destination(p)
        with pytest.raises(UserError, match="not a regular file"):
            outputs.write_atomic(p, "{}")
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode) and (tmp_path / "link").is_symlink()
    if (tmp_path / "null").exists():
        assert stat.S_ISCHR(os.lstat(tmp_path / "null").st_mode)


def test_new_file_mode_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        outputs.write_atomic(tmp_path / "a" / "b.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "b.json").stat().st_mode) == 0o640


def _sweep_results(tmp_path):
    """A finished steps x concurrency sweep (the committed H200 ladder sweep, when present)."""
    from conftest import REPO

    found = sorted(REPO.glob("docs/data/**/results.json"))
    for f in found:
        doc = json.loads(f.read_text())
        if any(c.get("ladder") for c in doc.get("configs", [])):
            return f
    pytest.skip("no committed ladder sweep in docs/data")


def test_adaptive_write_bad_out_is_one_line_before_reading(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    rc = cli.main(["adaptive", "write", "--from", str(tmp_path / "nothing-here"),
                   "--out", str(tmp_path / "afile" / "a.json")])
    err = capsys.readouterr().err
    # the --out line, not the (missing) --from: the destination is checked first
    assert rc == 2 and "--out" in err and "part of this path is a file" in err, err


def test_adaptive_write_failure_prints_the_config(tmp_path, capsys, monkeypatch):
    src = _sweep_results(tmp_path)
    from sglang_eagle3_ext.documents import outputs as o

    def full(path, data, what="--out"):
        raise o.WriteFailed(o.Path(path), "No space left on device", what)

    monkeypatch.setattr(o, "write_atomic", full)
    rc = cli.main(["adaptive", "write", "--from", str(src), "--out", str(tmp_path / "a.json"),
                   "--sglang-root", str(__import__("sglang_eagle3_ext.serve.releases").serve.releases.fetch("0.5.23"))])
    cap = capsys.readouterr()
    assert rc == 1 and "No space left on device" in cap.err and "a.json" in cap.err, cap.err
    assert json.loads(cap.out)  # the config itself, ready to paste into a file


def test_adaptive_launch_with_line_quotes_the_path(tmp_path, capsys):
    src = _sweep_results(tmp_path)
    out = tmp_path / "my configs" / "a;b.json"
    from sglang_eagle3_ext.serve import releases

    rc = cli.main(["adaptive", "write", "--from", str(src), "--out", str(out),
                   "--sglang-root", str(releases.fetch("0.5.23"))])
    text = capsys.readouterr().out
    assert rc == 0, text
    line = next(ln for ln in text.splitlines() if ln.startswith("launch with:"))
    import shlex

    words = shlex.split(line.split("  (starts at")[0])
    assert words[words.index("--adaptive") + 1] == str(out)


def test_sweep_bad_out_is_one_line_before_any_server(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    spec = tmp_path / "s.yaml"
    model = os.path.join(os.path.dirname(__file__), "data", "layers", "llama31_8b_target")  # config, no weights
    spec.write_text(f"name: s\nlaunch: {{model: {model}}}\nmatrix: {{steps: [1], topk: [1]}}\n")
    rc = cli.main(["sweep", str(spec), "--out", str(tmp_path / "afile" / "d")])
    err = capsys.readouterr().err
    assert rc == 2 and "part of this path is a file" in err and len(err.strip().splitlines()) == 1, err


def test_read_only_folder_is_one_line(tmp_path, monkeypatch):
    """A read-only mount (EROFS) cannot be made with chmod as root: the probe's mkstemp says so."""
    import errno

    def ro(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(outputs.tempfile, "mkstemp", ro)
    with pytest.raises(UserError, match="Read-only file system") as ei:
        outputs.check_destination(tmp_path / "r.json")
    assert ei.value.exit_code == 2
