#!/usr/bin/env python3
"""Build the one-file site bundle a bare GPU image lacks: SGLang 0.5.16 for Python 3.12 + our package.

The GPU image (H100 and H200 alike) has Python 3.12, torch 2.11 (cu130), triton, transformers
5.17, tokenizers, numpy, uvloop, rich, pyyaml ... but no SGLang and no registry. This script downloads (pip, cp312
manylinux wheels, no dependency resolution) exactly the packages listed in PACKAGES, installs them
into a site folder, strips what a single-GPU EAGLE-3 run never loads, adds this repository's
package (built as a wheel, so the SGLang plugin entry point is registered), and packs the folder
as ``.gpu/site.tar.xz`` (fits one 64 MiB carry). ``tools/gpu/run.sh`` unpacks it on
the GPU machine (tools/gpu/README.md).

Facts behind the list, pins and stripping: ../shared/reference/gpu-h200-sglang.md (measured
2026-11-29): transformers 5.17 breaks ``import sglang`` 0.5.16, so carry SGLang's own pin 5.12.1
(needs tokenizers 0.22.2); fastapi 0.142+ needs opentelemetry-api; sglang-kernel keeps only its
sm90 ops; xgrammar's static library and symbols are dropped.

Usage:  python tools/gpu_bundle.py [--out .gpu] [--wheels ~/.cache/sglang-eagle3-ext/gpu-wheels]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglang_eagle3_ext.runtime.resources import cache_root  # noqa: E402

# name==version, as measured working on the H200 with SGLang 0.5.16 (gpu-h200-sglang.md), plus
# libcst (our patcher) which the H200 image lacks.
PACKAGES = [
    "annotated_types==0.8.0", "apache_tvm_ffi==0.1.11", "cffi==2.1.1",
    "compressed_tensors==0.20.1", "dill==0.4.1", "distro==1.9.0", "fastapi==0.141.1",
    "flashinfer_python==0.6.14", "gguf==0.19.0", "ipython==9.18.1", "jiter==0.19.0",
    "jsonschema==4.26.0", "jsonschema_specifications==2025.9.1", "loguru==0.7.3",
    "msgspec==0.23.0", "openai==2.6.1", "orjson==3.13.0", "partial_json_parser==0.2.1.1.post7",
    "pybase64==1.5.1", "pycparser==3.12", "pydantic==2.14.4", "pydantic_core==2.50.5",
    "python_multipart==0.0.34", "pyzmq==27.3.0", "referencing==0.37.0", "rpds_py==2026.9.1",
    "setproctitle==1.3.8", "sgl_deep_gemm==0.1.4.post1", "sglang==0.5.16",
    "sglang_kernel==0.4.5", "sniffio==1.3.1", "soundfile==0.13.1", "starlette==1.10.0",
    "tokenizers==0.22.2", "traitlets==5.16.1", "transformers==5.12.1",
    "typing_inspection==0.4.5", "uvicorn==0.54.0", "xgrammar==0.2.1",
    "libcst==1.9.0",
]
PLATFORMS = ["manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64"]
CARRY_LIMIT = 64 * 1024 * 1024


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    subprocess.run(cmd, check=True)


def _platform_args() -> list[str]:
    args = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    for p in PLATFORMS:
        args += ["--platform", p]
    return args


def download(wheels: Path) -> list[Path]:
    """One pip call per package, skipped when a wheel for it is already cached."""
    wheels.mkdir(parents=True, exist_ok=True)
    found = []
    for spec in PACKAGES:
        name, version = spec.split("==")
        norm = name.replace("-", "_").lower()
        have = [w for w in wheels.glob("*.whl")
                if w.name.lower().startswith(f"{norm}-{version}-")]
        if not have:
            _pip("download", "--no-deps", "-q", "-d", str(wheels), *_platform_args(), spec)
            have = [w for w in wheels.glob("*.whl")
                    if w.name.lower().startswith(f"{norm}-{version}-")]
        if len(have) != 1:
            raise SystemExit(f"expected one wheel for {spec}, found {[w.name for w in have]}")
        found.append(have[0])
    return found


def own_wheel(dest: Path) -> Path:
    """This repository's package as a pure-Python wheel (carries the plugin entry point)."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("sglang_eagle3_ext-*.whl"):
        old.unlink()
    args = ["wheel", "--no-deps", "-q", "-w", str(dest), str(REPO)]
    if build_backend_ok():
        args.insert(1, "--no-build-isolation")  # offline and fast
    else:
        print("note: this Python's setuptools is older than pyproject.toml's build requirement: "
              "building our wheel in an isolated build env (pip fetches the setuptools it needs)")
    _pip(*args)
    (whl,) = dest.glob("sglang_eagle3_ext-*.whl")
    return whl


def build_backend_ok() -> bool:
    """True when this Python's setuptools meets pyproject.toml's ``setuptools>=N``: then the wheel
    builds offline without build isolation; an older one (e.g. 65) fails on the SPDX license."""
    import re
    from importlib.metadata import PackageNotFoundError, version

    m = re.search(r'"setuptools>=(\d+)', (REPO / "pyproject.toml").read_text())
    need = int(m.group(1)) if m else 0
    try:
        have = int(version("setuptools").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return False
    return have >= need


def strip(site: Path) -> list[str]:
    """Drop what one H200 running EAGLE-3 on a Llama never loads; return what was removed."""
    removed = []

    def rm(p: Path) -> None:
        if p.exists():
            size = sum(f.stat().st_size for f in p.rglob("*")) if p.is_dir() else p.stat().st_size
            removed.append(f"{p.relative_to(site)} ({size / 2**20:.1f} MiB)")
            shutil.rmtree(p) if p.is_dir() else p.unlink()

    sk = site / "sgl_kernel"
    if sk.is_dir():
        # keep the Python files and sm90/common_ops; flash/flashmla/infllm ops and sm100 go
        for so in sk.rglob("*.so"):
            if not (so.parent.name == "sm90" and so.name.startswith("common_ops")):
                rm(so)
        rm(sk / "sm100")
    xg = site / "xgrammar"
    if xg.is_dir():
        for a in xg.rglob("*.a"):
            rm(a)
        if shutil.which("strip"):
            for so in xg.rglob("*.so"):
                subprocess.run(["strip", "--strip-unneeded", str(so)], check=False)
    for cache in site.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    return removed


def pack(site: Path, out: Path) -> Path:
    """tar.xz of the site folder's contents (preset 6, multithreaded xz when available)."""
    target = out / "site.tar.xz"
    tmp = target.with_suffix(".tmp")
    if shutil.which("tar") and shutil.which("xz"):
        with open(tmp, "wb") as fh:
            tar = subprocess.Popen(["tar", "-C", str(site), "-cf", "-", "."], stdout=subprocess.PIPE)
            subprocess.run(["xz", "-6", "-T0", "-c"], stdin=tar.stdout, stdout=fh, check=True)
            if tar.wait() != 0:
                raise SystemExit("tar failed")
    else:
        with tarfile.open(tmp, "w:xz") as tf:
            tf.add(site, arcname=".")
    tmp.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / ".gpu"), help="output folder (git-ignored)")
    ap.add_argument("--wheels", default=str(cache_root() / "gpu-wheels"),
                    help="wheel cache (kept between builds)")
    args = ap.parse_args(argv)
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wheels = download(Path(args.wheels))
    own = own_wheel(out / "wheel")
    site = out / "site"
    if site.exists():
        shutil.rmtree(site)
    _pip("install", "--no-deps", "--no-compile", "-q", "--target", str(site), *_platform_args(),
         *map(str, wheels))
    # ours is pure Python (py3-none-any): no platform arguments needed
    _pip("install", "--no-deps", "--no-compile", "-q", "--target", str(site), str(own))
    removed = strip(site)
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    bundle = pack(site, out)
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()[:16]
    manifest = {"bundle": bundle.name, "bytes": bundle.stat().st_size, "sha256_16": digest,
                "site_bytes": size, "packages": PACKAGES + [own.name], "removed": removed,
                "built": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(site)
    mb = bundle.stat().st_size / 2**20
    print(f"{bundle}: {mb:.1f} MiB (site {size / 2**20:.0f} MiB, {len(wheels) + 1} packages, "
          f"{time.time() - t0:.0f} s)")
    if bundle.stat().st_size > CARRY_LIMIT:
        print("error: bundle exceeds one 64 MiB carry", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
