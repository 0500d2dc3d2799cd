"""JSON files we read and write: one clear line for a missing, special, huge or malformed file, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from ..runtime.safeparse import DOC_LIMIT, Unreadable, json_loads, read_text


def read_json(path: str | Path, *, what: str = "a JSON document", limit: int = DOC_LIMIT) -> Any:
    """A JSON file through the bounded read (a regular file of at most ``limit`` bytes: a FIFO,
    /dev/zero, a folder are refused before any read; safeparse), or one clear UserError (exit 2):
    missing, unreadable, too big, not UTF-8, not JSON, NaN / Infinity, a 400-digit integer, too deep."""
    p = Path(path)
    try:
        text = read_text(p, what=what, limit=limit)
    except Unreadable as exc:
        raise UserError(str(exc), exit_code=2) from None
    try:
        return json_loads(text)
    except ValueError as exc:
        raise UserError(f"{p}: not JSON ({exc})", exit_code=2) from None


def write_json(path: str | Path, data: Any) -> None:
    """Atomic write: a crash never leaves half a result file (sweep --resume reads them); through a
    symlink, never onto a special file (outputs.py); outputs.WriteFailed (one line) on failure."""
    from ..documents.outputs import write_atomic

    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n", what="output")
