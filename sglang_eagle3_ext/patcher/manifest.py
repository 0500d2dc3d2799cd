"""Patch state kept inside the SGLang tree: manifest, pristine copies, lock, atomic writes.

Layout (next to the code it describes, so an ``--sglang-root`` copy carries its own state)::

    <sglang>/.sglang-eagle3-ext/manifest.json
    <sglang>/.sglang-eagle3-ext/pristine/<relpath>.orig   original bytes of every patched file

The lock is an ``flock`` on ``<sglang>/`` itself (see ``locked``): no lock file, nothing that revert's
removal of the state folder could take away from a waiting command.

The folder name has dashes and a leading dot, so no import or package tool treats it as code.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..runtime.errors import UserError

STATE_DIR = ".sglang-eagle3-ext"
SCHEMA = "sglang-eagle3-ext/patch-manifest/1"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def state_dir(package_dir: Path) -> Path:
    return package_dir / STATE_DIR


def pristine_path(package_dir: Path, rel: str) -> Path:
    return state_dir(package_dir) / "pristine" / (rel + ".orig")


# Test seam for the crash-safety proof (tests/test_patch_crash.py): called at every point where a
# kill would leave a different tree (a temp file written, a file replaced, a file removed).
crash_hook: Callable[[str, Path], None] | None = None
TMP_TAG = ".sglang-eagle3-ext-"  # in every temp file name, so revert/apply can sweep leftovers


def checkpoint(what: str, path: Path) -> None:
    if crash_hook is not None:
        crash_hook(what, path)


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write via a temp file in the same folder + rename, so readers never see half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}{TMP_TAG}", suffix=".tmp")
    except OSError as exc:
        raise UserError(f"cannot write {path} ({exc.strerror}); run with the rights that installed "
                        "SGLang or use --sglang-root on a copy") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        checkpoint("temp written", Path(tmp))
        os.replace(tmp, path)
        checkpoint("replaced", path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise UserError(f"cannot write {path} ({exc.strerror or exc})") from exc
        raise


def remove(path: Path) -> None:
    """Unlink a file we own (a pristine copy, the manifest); a crash point like a write."""
    if path.exists():
        path.unlink(missing_ok=True)
        checkpoint("removed", path)


def sweep_temp(folders: set[Path]) -> int:
    """Remove temp files a killed write left behind (they carry TMP_TAG); returns how many."""
    n = 0
    for d in folders:
        if not d.is_dir():
            continue
        for tmp in d.glob(f".*{TMP_TAG}*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
                n += 1
    return n


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


# Test seam for the lock race test (tests/test_patch_lock.py): "waiting" (the folder is open, the
# lock not yet taken), "locked", "unlocking".
lock_hook: Callable[[str, Path], None] | None = None


def _lock_point(what: str, path: Path) -> None:
    if lock_hook is not None:
        lock_hook(what, path)


def _open_lock(package_dir: Path) -> int:
    try:
        return os.open(package_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise UserError(f"cannot open {package_dir} ({exc.strerror})") from exc


@contextlib.contextmanager
def locked(package_dir: Path, timeout: float = 10.0) -> Iterator[None]:
    """Exclusive lock for apply/revert on one SGLang tree: ``flock`` on the package folder itself.

    Not a file in the state folder: revert removes that folder, and a lock file deleted while a
    waiting command holds it open lets a later command lock a new file beside it, two writers at
    once (issue 23). The package folder outlives every command of ours, so everyone who may hold
    the lock holds the same inode, and nothing is created for it."""
    fd = _open_lock(package_dir)
    d = state_dir(package_dir)
    try:
        _lock_point("waiting", package_dir)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UserError(f"another sgl-eagle3 patch command is working on {package_dir} "
                                    f"(`sgl-eagle3 patch status` shows it); try again when it is done") from None
                time.sleep(0.1)
        _lock_point("locked", package_dir)
        created = not d.exists()  # looked at under the lock: nobody else makes or removes it now
        try:
            d.mkdir(exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot write to {package_dir} ({exc.strerror}); run with the rights "
                            "that installed SGLang or use --sglang-root on a copy") from exc
        try:
            yield
        finally:
            # a refused apply must leave the tree exactly as it was: no empty state folder behind
            if created and d.is_dir() and not os.listdir(d):
                with contextlib.suppress(OSError):
                    d.rmdir()
            _lock_point("unlocking", package_dir)
    finally:
        os.close(fd)  # releases the flock


def lock_is_held(package_dir: Path) -> bool:
    """True while some apply/revert holds the lock of this tree (``patch status`` asks)."""
    try:
        fd = _open_lock(package_dir)
    except UserError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _hashes_ok(v: Any) -> bool:
    """``previous``: absent, one sha256 (older manifests) or a list of them."""
    if v is None:
        return True
    items = [v] if isinstance(v, str) else v
    return isinstance(items, list) and all(isinstance(x, str) and _HEX64.match(x) for x in items)


def read(package_dir: Path) -> dict[str, Any] | None:
    """The manifest, shape-checked: a damaged one is one clear error, never a KeyError later."""
    p = state_dir(package_dir) / "manifest.json"
    if not p.is_file():
        return None
    bad = f"{p}: manifest is damaged"
    hint = "; reinstall SGLang (or restore its files) and delete the .sglang-eagle3-ext folder"
    try:
        data = json.loads(p.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{bad} (not valid JSON: {exc}){hint}") from exc
    except OSError as exc:
        raise UserError(f"{p}: cannot read the manifest ({exc.strerror})") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        schema = data.get("schema") if isinstance(data, dict) else None
        raise UserError(f"{p}: unknown manifest schema {schema!r}{hint}")
    files = data.get("files")
    if not isinstance(files, dict):
        raise UserError(f"{bad} (no 'files' table){hint}")
    for rel, entry in files.items():
        ok = (isinstance(entry, dict) and isinstance(entry.get("before"), str)
              and _HEX64.match(entry["before"]) and isinstance(entry.get("after"), str)
              and _HEX64.match(entry["after"])
              and _hashes_ok(entry.get("previous"))
              and isinstance(entry.get("patches", []), list)
              and ".." not in Path(rel).parts and not Path(rel).is_absolute())
        if not ok:
            raise UserError(f"{bad} (entry {rel!r} lacks valid before/after hashes){hint}")
    if not isinstance(data.get("patches", []), list) or not all(
            isinstance(x, str) for x in data.get("patches", [])):
        raise UserError(f"{bad} ('patches' is not a list of names){hint}")
    if data.get("aux_layers") is not None and not isinstance(data["aux_layers"], str):
        raise UserError(f"{bad} ('aux_layers' is not text){hint}")
    return data


def write(package_dir: Path, data: dict[str, Any]) -> None:
    data = {"schema": SCHEMA, **{k: v for k, v in data.items() if k != "schema"}}
    atomic_write(state_dir(package_dir) / "manifest.json",
                 (json.dumps(data, indent=2, sort_keys=False) + "\n").encode())
