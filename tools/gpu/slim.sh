#!/usr/bin/env bash
# The device call copies the working tree (tracked files included) plus `carry`, 64 MiB in all;
# the SGLang bundle (.gpu, ~46 MB) and the older rounds' raw data no longer fit together. Move the
# raw data the GPU plans do not read out of the checkout before a call, and back after it:
#   tools/gpu/slim.sh out    # before `run`
#   tools/gpu/slim.sh in     # after it (git status is clean again)
# What the plan files copy from docs/data (their `copy` phases: the one-start scan of
# h200-2026-12-01-r4/scan-8b, the MoE scans of h200-2026-12-02-r5/moe2 and -r8/moe5,
# h200-2026-12-04-r11/r11/scan-moe-served.json, h200-2026-12-01/adaptive-p08.json) stays.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HOLD="${SLIM_HOLD:-$HOME/.cache/sglang-eagle3-ext/slim}"
MOVE=(docs/data/h200-2026-11-29 docs/data/h200-2026-12-01/{8b-p08,8b-wire,moe,demo-plugin}
      docs/data/h200-2026-12-02-r5/adapt2-8b
      docs/data/h200-2026-12-02-r5/trees2 docs/data/h200-2026-12-02-r6
      docs/data/h200-2026-12-02-r7/moe4b docs/data/h200-2026-12-02-r7/long
      docs/data/h200-2026-12-02-r8/moe5b docs/data/h200-2026-12-02-r8/8bp
      docs/data/h200-2026-12-03-r9 docs/data/h200-2026-12-04-r10
      docs/data/h200-2026-12-04-r11/r11/{static5,static4,policy,ema-default,ema-scan,twin}
      docs/data/h200-2026-12-04-r11/r11/{policy-moe,static3-moe,static7-moe,ema-default-moe}
      docs/data/h100-2026-12-06-r12s docs/data/h100-2026-12-06-r13
      docs/data/h100-2026-12-06-r14 docs/data/h200-2026-12-06-r15
      docs/data/h100-2026-12-07-r16b docs/data/h100-2026-12-07-r17-1
      docs/data/h100-2026-12-07-r17-2 docs/data/h100-2026-12-07-r18
      docs/data/h100-2026-12-07-r19)
case "${1:-}" in
  out)
    for d in "${MOVE[@]}"; do
      [ -e "$REPO/$d" ] || continue
      [ -e "$HOLD/$d" ] && { echo "slim: $HOLD/$d already exists (run 'in' first)" >&2; exit 1; }
      mkdir -p "$(dirname "$HOLD/$d")" && mv "$REPO/$d" "$HOLD/$d"
    done
    echo "slim: tracked files now $(cd "$REPO" && git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) bytes" ;;
  in)
    for d in "${MOVE[@]}"; do
      [ -e "$HOLD/$d" ] || continue
      [ -e "$REPO/$d" ] && { echo "slim: $REPO/$d exists; not overwritten" >&2; exit 1; }
      mv "$HOLD/$d" "$REPO/$d"
    done
    echo "slim: restored" ;;
  *) echo "usage: tools/gpu/slim.sh out|in" >&2; exit 2 ;;
esac
