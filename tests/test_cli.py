"""The CLI surface: every command is listed and every --help renders (argparse %-formats help)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sglang_eagle3_ext import cli


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as ei:
        cli.main(["--help"])
    assert ei.value.code == 0
    text = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert name in text


@pytest.mark.parametrize("name", cli.COMMANDS)
def test_every_command_help_renders(name, capsys):
    with pytest.raises(SystemExit) as ei:
        cli.main([name, "--help"])
    assert ei.value.code == 0
    text = capsys.readouterr().out
    # offered exactly where a command reads an SGLang tree
    assert ("--sglang-root" in text) == (name in cli.SGLANG_ROOT_COMMANDS)
    if name == "demo":  # every demo option says what it does
        for opt in ("--max-tokens", "--port", "--seed"):
            assert text.split(opt, 1)[1].split("\n  -", 1)[0].split(None, 1)[1].strip(), opt


def test_version_and_no_command():
    r = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("sgl-eagle3 ")
    r = subprocess.run([sys.executable, "-m", "sglang_eagle3_ext"], capture_output=True, text=True)
    assert r.returncode == 2 and "COMMAND" in r.stdout
