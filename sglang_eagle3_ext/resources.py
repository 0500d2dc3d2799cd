"""Where the data folders (``patches/``, ``launch/``) are: the repository's top level in a source
checkout or editable install, else the copy a wheel carries in ``sglang_eagle3_ext/_data/``."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    repo = _PKG.parent / name
    if repo.is_dir():
        return repo
    return _PKG / "_data" / name
