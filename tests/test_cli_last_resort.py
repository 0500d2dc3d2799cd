"""cli.main: a bug of ours (an exception that is not a UserError) is still one line and exit 1;
SGLANG_EAGLE3_DEBUG=1 shows the real traceback."""

from __future__ import annotations

import pytest

from sglang_eagle3_ext import cli
from sglang_eagle3_ext.commands import doctor


def test_unexpected_error_is_one_line(monkeypatch, capsys):
    monkeypatch.delenv("SGLANG_EAGLE3_DEBUG", raising=False)
    monkeypatch.setattr(doctor, "run", lambda args: {}["boom"])
    assert cli.main(["doctor"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "unexpected KeyError" in err and "test_cli_last_resort.py" in err


def test_debug_shows_the_traceback(monkeypatch):
    monkeypatch.setenv("SGLANG_EAGLE3_DEBUG", "1")
    monkeypatch.setattr(doctor, "run", lambda args: {}["boom"])
    with pytest.raises(KeyError):
        cli.main(["doctor"])
