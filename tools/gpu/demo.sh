#!/usr/bin/env bash
# On the lent H200 (device run, carry [".gpu"]): the whole demo with the flags the carried
# bundle needs (../shared/reference/gpu-h200-sglang.md: no flash-attn/flashinfer attention,
# no xgrammar grammar backend, small CUDA-graph batch set). Extra arguments go to `demo`.
#   tools/gpu/demo.sh --acceptance oracle --steps 2 --route patch
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUTDIR="${OUT:-$REPO/out}/demo"
exec "$REPO/tools/gpu/run.sh" python3 -m sglang_eagle3_ext demo --out "$OUTDIR" --models /tmp/tiny-demo \
  --server-args "--attention-backend triton --sampling-backend pytorch --grammar-backend none --cuda-graph-max-bs-decode 8 --disable-prefill-cuda-graph" \
  "$@"
