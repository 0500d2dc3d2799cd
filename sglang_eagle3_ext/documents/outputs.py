"""Writing a command's result file (``bench --out``, ``adaptive write --out``, sweep outputs, ...).

Two calls, one rule each:

``check_destination(path, what="--out") -> Path``
    Call it BEFORE the work starts (a bench, a sweep, a scan). It returns the path the result will
    really land on (a symlink resolved to its target) or raises ``UserError`` (exit 2) with one
    line: a folder, a path under a file, a missing or unwritable folder (it creates missing parent
    folders and proves the folder writable by creating and removing a temp file there), a special
    file (device, FIFO, socket). ``check_folder(path)`` is the same for an output folder.

``write_result(path, text, what="--out") -> bool``
    Call it when the result exists. It writes atomically (a temp file in the same folder, fsync,
    rename), so a reader never sees half a file; True on success. If the write still fails (disk
    full, the folder vanished), it does NOT raise: it prints the result itself on stdout, says on
    stderr where it could not go and why, and returns False, so the caller exits 1 and nothing
    is lost. ``write_atomic`` is the raising variant (``WriteFailed``, a ``UserError``) for files
    whose loss the caller handles itself (e.g. a sweep's per-config files).

What happens to what is already at the path:

* a regular file: replaced atomically; its permission bits are kept (a new file gets
  0666 & ~umask, like any other tool's output);
* a symbolic link: written THROUGH to the file it names, atomically in the target's folder, so the
  link stays a link (``--out latest.json`` -> ``runs/17.json`` updates ``runs/17.json``); a link
  to a special file is refused like the special file;
* a special file (``/dev/full``, a FIFO, a socket, a device node): refused, never replaced (a
  rename would put a regular file where the device node was); use ``--json`` to get a result on
  stdout;
* a hard link: the rename gives the path a new inode (the other names keep the old bytes).

For a new command (e.g. ``scan --out``): ``dest = check_destination(args.out)`` first, then
``ok = write_result(dest, json.dumps(doc, indent=2) + "\\n")`` and ``return 0 if ok else 1``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path

from ..runtime.errors import UserError

_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


class WriteFailed(UserError):
    """The result could not be written to ``path`` (``reason`` says why)."""

    def __init__(self, path: Path, reason: str, what: str = "--out") -> None:
        super().__init__(f"{what} {path}: could not write it ({reason})", exit_code=1)
        self.path = path
        self.reason = reason


def _expand(path: str | Path) -> Path:
    try:
        return Path(path).expanduser()
    except RuntimeError:  # ~user of an unknown user
        raise UserError(f"{path}: names the home folder of an unknown user", exit_code=2) from None


def _special(st: os.stat_result) -> str | None:
    for test, name in _KINDS:
        if test(st.st_mode):
            return name
    return None if stat.S_ISREG(st.st_mode) else "not a regular file"


def _target(p: Path, what: str) -> Path:
    """The file the bytes will land in: ``p``, or the end of its symlink chain."""
    if p.is_symlink():
        try:
            real = Path(os.path.realpath(p, strict=False))
        except OSError as exc:
            raise UserError(f"{what} {p}: a symbolic link that cannot be followed ({exc.strerror})", 2) from None
        if real.is_symlink():  # realpath stops at a loop
            raise UserError(f"{what} {p}: a symbolic link loop", exit_code=2)
        return real
    return p


def _refuse_special(p: Path, shown: Path, what: str) -> None:
    try:
        st = p.stat()
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise UserError(f"{what} {shown}: a part of this path is a file, not a folder", exit_code=2) from None
    except OSError as exc:
        raise UserError(f"{what} {shown}: cannot look at it ({exc.strerror})", exit_code=2) from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{what} {shown}: is a folder; give a file name", exit_code=2)
    kind = _special(st)
    if kind:
        via = f" (the link's target {p})" if p != shown else ""
        raise UserError(f"{what} {shown}{via}: is {kind}, not a regular file; refused (it would be "
                        "replaced by a regular file); use --json for a result on stdout", exit_code=2)


def _probe(folder: Path, shown: Path, what: str) -> None:
    """Create and remove a temp file in ``folder``: the one check that holds for root, read-only
    mounts and /proc alike."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".sgl-eagle3-probe-", suffix=".tmp")
    except OSError as exc:
        raise UserError(f"{what} {shown}: cannot write in {folder} ({exc.strerror})", exit_code=2) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def check_folder(path: str | Path, what: str = "--out") -> Path:
    """An output folder: created if missing, proven writable; UserError(2) otherwise."""
    p = _expand(path)
    if p.exists() and not p.is_dir():
        raise UserError(f"{what} {p}: is a file, not a folder", exit_code=2)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"{what} {p}: a file is in the way of this folder", exit_code=2) from None
    except NotADirectoryError:
        raise UserError(f"{what} {p}: a part of this path is a file, not a folder", exit_code=2) from None
    except OSError as exc:
        raise UserError(f"{what} {p}: cannot create it ({exc.strerror})", exit_code=2) from None
    _probe(p, p, what)
    return p


def check_destination(path: str | Path, what: str = "--out") -> Path:
    """Before the work: where the result will go (symlinks resolved), or one UserError line."""
    raw = str(path)
    p = _expand(path)
    if raw.endswith(("/", os.sep)) or p.is_dir():
        raise UserError(f"{what} {raw}: a folder; give a file name such as {p / 'result.json'}", exit_code=2)
    real = _target(p, what)
    _refuse_special(real, p, what)
    folder = real.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"{what} {p}: a part of this path is a file, not a folder", exit_code=2) from None
    except OSError as exc:
        raise UserError(f"{what} {p}: cannot create {folder} ({exc.strerror})", exit_code=2) from None
    _probe(folder, p, what)
    return real


def write_atomic(path: str | Path, data: bytes | str, what: str = "--out") -> Path:
    """Write ``data`` at ``path`` (through a symlink, never onto a special file); WriteFailed or
    UserError(2) on failure. Returns the file written."""
    p = _expand(path)
    real = _target(p, what)
    _refuse_special(real, p, what)
    blob = data.encode("utf-8") if isinstance(data, str) else data
    try:
        mode = stat.S_IMODE(real.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    tmp: str | None = None
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
        tmp = None
    except OSError as exc:
        raise WriteFailed(p, exc.strerror or str(exc), what) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return real


def write_result(path: str | Path, text: str, what: str = "--out") -> bool:
    """Write the result; if that fails, print it on stdout and say where it could not go."""
    try:
        write_atomic(path, text, what)
        return True
    except UserError as exc:
        report_unwritten(exc, text)
        return False


def report_unwritten(exc: UserError, text: str) -> None:
    """The result on stdout (so it is not lost), the reason on stderr, one line."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
    print(f"error: {exc}; the result is on stdout instead", file=sys.stderr, flush=True)
