"""Where our files live: the data folders (``patches/``, ``launch/``): the repository's top level in
a source checkout or editable install, else the copy a wheel carries in ``sglang_eagle3_ext/_data/``;
and the cache folder for downloads and run state."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError

_PKG = Path(__file__).resolve().parent.parent  # sglang_eagle3_ext/ (this file is in runtime/)


def data_dir(name: str) -> Path:
    repo = _PKG.parent / name
    if repo.is_dir():
        return repo
    return _PKG / "_data" / name


def cache_root() -> Path:
    """Our state and downloads: $SGLANG_EAGLE3_CACHE, else ~/.cache/sglang-eagle3-ext."""
    from .settings import CACHE

    value, problem = CACHE.read()
    if problem:  # e.g. "~nouser/x": one line, not a silent move to another folder
        raise UserError(problem.rsplit("; ", 1)[0] + "; fix it or unset it", exit_code=2)
    return value or Path.home() / ".cache" / "sglang-eagle3-ext"


def output_dir(path: str | Path, what: str = "--out") -> Path:
    """Create (if needed) and return a folder we are about to write into, or one UserError line:
    a path under a file (``/etc/passwd/x``), no permission, a file where the folder should be."""
    p = Path(path).expanduser()
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
    if not os.access(p, os.W_OK | os.X_OK):
        raise UserError(f"{what} {p}: not writable", exit_code=2)
    return p


def output_file(path: str | Path, what: str = "--out") -> Path:
    """The parent folder of a file we are about to write, checked as ``output_dir``."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise UserError(f"{what} {p}: is a folder; give a file name", exit_code=2)
    output_dir(p.parent, what)
    return p
