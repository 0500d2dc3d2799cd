"""Ctrl-C while the command modules import ends quietly (exit 130, no traceback); error lines and
file names print ``:word:`` as written (rich's emoji codes off)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

from sglang_eagle3_ext import cli

# A real SIGINT, sent by this process to itself the moment a command module starts importing
# (where a Ctrl-C in the first half second lands): no sleep, no race.
INTERRUPT_AT_IMPORT = """
import os, signal, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "sglang_eagle3_ext.commands.{which}":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the KeyboardInterrupt lands in these bytecodes
                pass
        return None
sys.meta_path.insert(0, Interrupt())
from sglang_eagle3_ext.cli import main
sys.exit(main({argv!r}))
"""


def _run(which: str, argv: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", INTERRUPT_AT_IMPORT.format(which=which, argv=argv)],
                          capture_output=True, text=True, timeout=120, env=env)


def test_ctrl_c_while_command_modules_import_is_exit_130_without_traceback():
    for which, argv in (("bench", ["compare", "x.json"]), ("tiny", ["doctor"])):
        p = _run(which, argv)
        assert p.returncode == 130, (which, p.returncode, p.stderr[-2000:])
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) <= 1, p.stderr


def test_keyboard_interrupt_in_parser_building_is_130(monkeypatch):
    def interrupted(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_load", interrupted)
    assert cli.main(["doctor"]) == 130


def test_error_lines_print_colons_as_written(tmp_path, capsys):
    """Was: "construct.py:100:" printed with a 100-emoji, a file x:fire:.json shown changed."""
    bad = tmp_path / "x:fire:.json"
    bad.write_text("{not json")
    assert cli.main(["compare", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "x:fire:.json" in err and "\N{FIRE}" not in err, err


def test_every_console_has_emoji_off():
    from sglang_eagle3_ext.commands import console

    for c in (console.out, console.err, console.WideConsole(width=80)):
        with c.capture() as cap:
            c.print("construct.py:100: :fire: :thumbs_up:", highlight=False)
        assert cap.get().strip() == "construct.py:100: :fire: :thumbs_up:"
