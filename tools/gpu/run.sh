#!/usr/bin/env bash
# On a GPU machine without SGLang: unpack the carried SGLang site bundle (.gpu/site.tar.xz, built
# by tools/gpu_bundle.py), set the environment SGLang 0.5.16 needs there, then run "$@".
#   bash tools/gpu/run.sh python3 tools/gpu/run_plan.py tools/gpu/plans/smoke.yaml --out $OUT
# Facts: ../shared/reference/gpu-h200-sglang.md (site first on PYTHONPATH, torch's nvidia/*/lib
# on LD_LIBRARY_PATH for the prebuilt .so files, ninja from torch's venv for SGLang's JIT kernels,
# offline hub). The repo itself goes first on PYTHONPATH so the live source wins over the wheel
# copy of sglang_eagle3_ext (the wheel only registers the plugin entry point).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUNDLE="${GPU_BUNDLE:-$REPO/.gpu/site.tar.xz}"
SITE="${GPU_SITE:-/tmp/site}"
PY="${PYTHON:-python3}"
if [ ! -f "$SITE/.unpacked" ]; then
  [ -f "$BUNDLE" ] || { echo "no bundle at $BUNDLE (build it: python tools/gpu_bundle.py; carry .gpu)" >&2; exit 2; }
  t0=$(date +%s)
  mkdir -p "$SITE"
  tar -xJf "$BUNDLE" -C "$SITE"
  touch "$SITE/.unpacked"
  echo "[gpu] unpacked $(du -sh "$SITE" | cut -f1) into $SITE in $(( $(date +%s) - t0 )) s" >&2
fi
TORCH_SITE="$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
NV_LIBS="$( (ls -d "$TORCH_SITE"/nvidia/*/lib 2>/dev/null || true) | tr '\n' ':')"  # none with a CPU torch
export LD_LIBRARY_PATH="${NV_LIBS}${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$(dirname "$(command -v "$PY")"):$PATH"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
# the workplace's rule: NVLink multicast stays off in every process
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
exec "$@"
