"""The quick start (docs/guide/quickstart.md, README "Quick start") runs as written: its CPU
rehearsal block, in the README's own environment (no torchvision stub: SGLang is installed but its
server does not import), against committed Llama-3.1-8B configs and a real H200 scan; and the
rehearsal is the GPU block plus `--dry-run`, so the two cannot drift apart. Real CLI subprocesses,
nothing stood in. The GPU block itself needs a GPU and real weights: the lead runs it there."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
from conftest import REPO

from sglang_eagle3_ext.runtime import settings

PAGE = (REPO / "docs/guide/quickstart.md").read_text()
README = (REPO / "README.md").read_text()
GPU_ONLY = {"bench", "stop"}  # need a running server


def _block(text: str, heading: str) -> list[str]:
    body = text.split(heading, 1)[1].split("```console", 1)[1].split("```", 1)[0]
    return [ln[2:] for ln in body.replace("\\\n", " ").splitlines() if ln.startswith("$ ")]


def _exports(lines: list[str]) -> dict[str, str]:
    words = shlex.split(lines[0])
    assert words[0] == "export", lines[0]
    return dict(w.split("=", 1) for w in words[1:])


def _commands(lines: list[str]) -> list[list[str]]:
    cmds = []
    for ln in lines[1:]:
        words = shlex.split(ln.split("  #", 1)[0])
        assert words[0] == "sgl-eagle3", ln
        cmds.append(words[1:])
    return cmds


GPU = _block(PAGE, "## The commands")
REHEARSAL = _block(PAGE, "## Rehearse on a CPU box first")


def test_the_gpu_path_is_the_one_the_issue_names():
    cmds = _commands(GPU)
    names = [c[0] for c in cmds]
    assert names == ["doctor", "layers", "scan", "launch", "bench", "stop"], names
    scan = cmds[2]
    assert "--baseline" in scan and "--model" in scan and "--draft" in scan
    assert not any(w.endswith(".yaml") for w in scan)  # no preset: just the user's two folders
    assert "--policy" in cmds[3]


def test_rehearsal_is_the_gpu_block_plus_dry_run():
    gpu, dry = _commands(GPU), _commands(REHEARSAL)
    assert set(_exports(GPU)) == set(_exports(REHEARSAL)) == {"MODEL", "DRAFT"}
    wanted = [c for c in gpu if c[0] not in GPU_ONLY]
    assert len(dry) == len(wanted)
    for g, d in zip(wanted, dry, strict=True):
        if g[0] in ("scan", "launch"):
            assert d[-1] == "--dry-run", d
            d = d[:-1]
        if "--policy" in g:  # the rehearsal's scan result is a committed one
            i = g.index("--policy")
            g = g[:i + 1] + g[i + 2:]
            d = d[:i + 1] + d[i + 2:]
        assert g == d


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith((*settings.PREFIXES, "EAGLE3_"))}
    # the user's cache folder, as the README tour: doctor's answer on SGLang's import is kept there
    env.update(PYTHONPATH=str(REPO), COLUMNS="160")
    env.update(_exports(REHEARSAL))
    return env


@pytest.mark.parametrize("argv", _commands(REHEARSAL), ids=lambda a: a[0])
def test_rehearsal_runs_as_written(argv):
    env = _env()
    words = [w.replace("$MODEL", env["MODEL"]).replace("$DRAFT", env["DRAFT"]) for w in argv]
    for w in words:
        if "/" in w and not w.startswith("-") and not w.startswith("scan-"):
            assert (REPO / w).exists(), w  # every path in the rehearsal is in the repository
    before = set(os.listdir(REPO))
    p = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", *words], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (words, p.stdout[-3000:], p.stderr[-3000:])
    assert "Traceback" not in p.stderr and "error:" not in p.stderr
    made = set(os.listdir(REPO)) - before
    assert not [n for n in made if n.startswith("scan-")], made  # a dry run leaves no folder behind
    if argv[0] == "scan":
        assert "--speculative-num-steps 5" in p.stdout and "plain server for --baseline" in p.stdout
        assert "SGLANG_EAGLE3_HOLD_STEPS=5,4,3,2,1" in p.stdout
    if argv[0] == "launch":
        assert "--speculative-adaptive" in p.stdout and "SGLANG_EAGLE3_POLICY=" in p.stdout
    if argv[0] == "layers":
        assert "OK: consistent" in p.stdout


def test_page_marks_where_the_gpu_output_goes():
    opened = PAGE.count("<!-- GPU OUTPUT:")
    assert opened >= 4 and opened == PAGE.count("<!-- /GPU OUTPUT -->")


def test_readme_has_a_quick_start_and_keeps_two_setup_commands():
    qs = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "docs/guide/quickstart.md" in qs
    for cmd in ("pip install -e .", "sgl-eagle3 doctor", "sgl-eagle3 layers check", "--baseline",
                "sgl-eagle3 launch --model", "--policy"):
        assert cmd in qs, cmd
    setup = README.split("## Set up", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    assert len([ln for ln in setup.splitlines() if ln.strip()]) == 2
