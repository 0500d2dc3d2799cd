"""Seconds for `patch apply` + `patch revert` on a copy of each pinned SGLang release.

    .venv/bin/python benchmarks/patch_roundtrip.py [VERSION ...]

Target: < 1 s per release for the default (probe) set. The aux-layer set (--aux-layers) also
touches every model file that defines set_eagle3_layers_to_capture and is timed separately.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from sglang_eagle3_ext.patcher import engine
from sglang_eagle3_ext.runtime.sglang_env import locate
from sglang_eagle3_ext.serve import releases


def roundtrip(root: Path, aux: str | None) -> tuple[float, float, int]:
    env = locate(root)
    t0 = time.perf_counter()
    pl = engine.apply(env, aux_layers=aux)
    t1 = time.perf_counter()
    engine.revert(env)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, len(pl.changes)


def main(argv: list[str]) -> int:
    versions = argv or list(releases.PINNED)
    print(f"{'release':<14}{'families':<14}{'files':>6}{'apply s':>9}{'revert s':>10}{'total s':>9}"
          f"{'| aux files':>12}{'aux total s':>13}")
    for v in versions:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / v
            shutil.copytree(releases.fetch(v), root, ignore=shutil.ignore_patterns("__pycache__"))
            a, r, n = roundtrip(root, None)
            aa, ar, an = roundtrip(root, "2,30,58")
            fam = ",".join(locate(root).families)
            print(f"{v:<14}{fam:<14}{n:>6}{a:>9.2f}{r:>10.2f}{a + r:>9.2f}{'| ' + str(an):>12}{aa + ar:>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
