"""JSON files we read and write: one clear line for a missing or malformed file, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError
from ..runtime.safeparse import json_loads


def read_json(path: str | Path) -> Any:
    """A JSON file, or one clear UserError (exit 2) for a missing or unreadable one."""
    p = Path(path)
    try:
        return json_loads(p.read_text())
    except FileNotFoundError as exc:
        raise UserError(f"{p}: no such file", exit_code=2) from exc
    except ValueError as exc:
        raise UserError(f"{p}: not JSON ({exc})", exit_code=2) from exc


def write_json(path: str | Path, data: Any) -> None:
    """Atomic write: a crash never leaves half a result file (sweep --resume reads them); through a
    symlink, never onto a special file (outputs.py); outputs.WriteFailed (one line) on failure."""
    from ..documents.outputs import write_atomic

    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n", what="output")
