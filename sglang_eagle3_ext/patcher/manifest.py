"""Patch state kept inside the SGLang tree: manifest, pristine copies, lock, atomic writes.

Layout (next to the code it describes, so an ``--sglang-root`` copy carries its own state)::

    <sglang>/.sglang-eagle3-ext/manifest.json
    <sglang>/.sglang-eagle3-ext/pristine/<relpath>.orig   original bytes of every patched file
    <sglang>/.sglang-eagle3-ext/lock                      flock while apply/revert run

The folder name has dashes and a leading dot, so no import or package tool treats it as code.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import UserError

STATE_DIR = ".sglang-eagle3-ext"
SCHEMA = "sglang-eagle3-ext/patch-manifest/1"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def state_dir(package_dir: Path) -> Path:
    return package_dir / STATE_DIR


def pristine_path(package_dir: Path, rel: str) -> Path:
    return state_dir(package_dir) / "pristine" / (rel + ".orig")


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write via a temp file in the same folder + rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def drop_bytecode(path: Path) -> int:
    """Remove ``__pycache__/<stem>.*.pyc`` of a source file we changed; returns how many."""
    cache = path.parent / "__pycache__"
    n = 0
    if cache.is_dir():
        for pyc in cache.glob(f"{path.stem}.*.pyc"):
            with contextlib.suppress(FileNotFoundError):
                pyc.unlink()
                n += 1
    return n


@contextlib.contextmanager
def locked(package_dir: Path, timeout: float = 10.0) -> Iterator[None]:
    """Exclusive lock for apply/revert on one SGLang tree."""
    d = state_dir(package_dir)
    created = not d.exists()
    try:
        d.mkdir(exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot write to {package_dir} ({exc.strerror}); run with the rights "
                        "that installed SGLang or use --sglang-root on a copy") from exc
    fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UserError(f"another sgl-eagle3 patch command holds {d / 'lock'}") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)
        # a refused apply must leave the tree exactly as it was: no empty state folder behind
        if created and d.is_dir() and set(os.listdir(d)) <= {"lock"}:
            with contextlib.suppress(OSError):
                (d / "lock").unlink()
                d.rmdir()


def read(package_dir: Path) -> dict[str, Any] | None:
    p = state_dir(package_dir) / "manifest.json"
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}: manifest is not valid JSON ({exc}); fix or remove it") from exc
    if data.get("schema") != SCHEMA:
        raise UserError(f"{p}: unknown manifest schema {data.get('schema')!r}")
    return data


def write(package_dir: Path, data: dict[str, Any]) -> None:
    data = {"schema": SCHEMA, **{k: v for k, v in data.items() if k != "schema"}}
    atomic_write(state_dir(package_dir) / "manifest.json",
                 (json.dumps(data, indent=2, sort_keys=False) + "\n").encode())
