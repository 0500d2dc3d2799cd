"""Where our files live: the data folders (``patches/``, ``launch/``): the repository's top level in
a source checkout or editable install, else the copy a wheel carries in ``sglang_eagle3_ext/_data/``;
and the cache folder for downloads and run state."""

from __future__ import annotations

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
