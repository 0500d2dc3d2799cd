"""Fetch published SGLang releases and unpack their Python source, for tests and compat tables.

Only `pip download --no-deps` is used (the package registry), and only the ``.py`` files plus the
dist-info METADATA are kept, so a release costs a few tens of MB and later runs are offline.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..runtime.resources import cache_root

# The pinned set that covers every structural change (reference version map, section 8.1).
PINNED = (
    "0.4.10.post2",
    "0.5.3.post2",
    "0.5.9",
    "0.5.12.post1",
    "0.5.13",
    "0.5.16",
    "0.5.19",
    "0.5.23",
)


def cache_dir() -> Path:
    return cache_root() / "releases"


def release_root(version: str) -> Path:
    """Folder that holds ``sglang/`` of this release (what ``--sglang-root`` expects)."""
    return cache_dir() / version


def fetch(version: str, *, quiet: bool = True) -> Path:
    """Return the unpacked source root of ``sglang==version``, downloading it once."""
    root = release_root(version)
    done = root / ".complete"
    if done.exists():
        return root
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "-d", tmp, f"sglang=={version}"]
        if quiet:
            cmd.append("-q")
        subprocess.run(cmd, check=True)
        wheel = next(Path(tmp).glob("sglang-*.whl"))
        staging = root.with_name(root.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if name.endswith(".py") or name.endswith(".dist-info/METADATA"):
                    zf.extract(name, staging)
        shutil.rmtree(root, ignore_errors=True)
        staging.rename(root)
    done.touch()
    return root


def main(argv: list[str] | None = None) -> int:
    versions = (argv if argv is not None else sys.argv[1:]) or list(PINNED)
    for v in versions:
        print(v, fetch(v))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
