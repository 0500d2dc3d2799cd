"""Shared fixtures: real SGLang release sources, the importable CPU SGLang, subprocess env."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from sglang_eagle3_ext.serve import releases

REPO = Path(__file__).resolve().parent.parent
SHIMS = Path(__file__).resolve().parent / "shims"
TORCHVISION_STUB = SHIMS / "torchvision_stub"
SGL_KERNEL_STUB = SHIMS / "sgl_kernel_stub"

# SGLang's import chain reaches torchvision; the stub must win over nothing (never install it).
if str(TORCHVISION_STUB) not in sys.path:
    sys.path.insert(0, str(TORCHVISION_STUB))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def sglang_importable() -> bool:
    return importlib.util.find_spec("sglang") is not None and importlib.util.find_spec("torch") is not None


requires_sglang = pytest.mark.skipif(
    not sglang_importable(),
    reason="real SGLang 0.5.23 + CPU torch not installed (bash tools/ci_env.sh installs them)",
)


def sigint_default() -> None:
    """``preexec_fn`` of a child a test sends Ctrl-C: SIGINT back to its default. A shell script
    that starts the suite in the background (``cmd &``) ignores SIGINT, children inherit that,
    and Python then installs no KeyboardInterrupt handler, so the child would never see Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def subprocess_env(*, sgl_kernel: bool = False, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child Python that must import real SGLang on CPU."""
    env = dict(os.environ)
    paths = [str(TORCHVISION_STUB)]
    if sgl_kernel:
        paths.append(str(SGL_KERNEL_STUB))
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


@pytest.fixture(scope="session", params=releases.PINNED)
def release_root(request) -> Path:
    """Read-only unpacked source of each pinned SGLang release (cached under ~/.cache)."""
    return releases.fetch(request.param)


@pytest.fixture()
def release_copy(tmp_path):
    """Factory: a writable copy of a pinned release's tree, for tests that patch files."""

    def make(version: str) -> Path:
        src = releases.fetch(version)
        dst = tmp_path / f"sglang-{version}"
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", ".complete"))
        return dst

    return make
