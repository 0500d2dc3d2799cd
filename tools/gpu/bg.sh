#!/usr/bin/env bash
# One campaign plan across several device calls on one warm machine:
#   tools/gpu/bg.sh PLAN SECONDS [campaign args...]      # carry .gpu on the first call
# The first call copies this checkout to /tmp/bg/repo (a later call's fresh copy of the working
# tree cannot touch the running code) and starts the plan there in its own process session, so it
# outlives the call; every call then waits up to SECONDS (or until the plan ends) and copies the
# plan's latest checkpoint tarball and log into $OUT. The next call, made within the machine's
# warm window, finds it running and waits again. A fresh machine starts the plan from the top.
set -uo pipefail
PLAN=${1:?plan}; LIMIT=${2:?seconds}; shift 2
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BG=/tmp/bg
mkdir -p "$BG"
t0=$(date +%s)
if [ ! -f "$BG/$PLAN.pid" ]; then
  rm -rf "$BG/repo" && mkdir -p "$BG/repo"
  tar -C "$SRC" --exclude=./.gpu --exclude=./.git -cf - . | tar -C "$BG/repo" -xf -
  [ -f "$SRC/.gpu/site.tar.xz" ] && export GPU_BUNDLE="$SRC/.gpu/site.tar.xz"
  cd "$BG/repo"
  setsid nohup bash tools/gpu/run.sh python3 tools/gpu/churn_campaign.py --plan "$PLAN" --out "$BG" "$@" \
    >"$BG/$PLAN.log" 2>&1 </dev/null &
  echo $! >"$BG/$PLAN.pid"
  echo "[bg] started $PLAN (pid $(cat "$BG/$PLAN.pid"))"
else
  echo "[bg] $PLAN already started on this machine (pid $(cat "$BG/$PLAN.pid"))"
fi
pid=$(cat "$BG/$PLAN.pid")
# each new checkpoint is copied as it lands: a call cut short (the session's device time ran
# out) still returns the last one
fetch() {
  cp "$BG/$PLAN.log" "$OUT/" 2>/dev/null
  if [ -f "$BG/$PLAN.tar.gz" ] && [ "$BG/$PLAN.tar.gz" -nt "$OUT/$PLAN.tar.gz" ]; then
    cp "$BG/$PLAN.tar.gz" "$OUT/.$PLAN.tar.gz" && mv "$OUT/.$PLAN.tar.gz" "$OUT/$PLAN.tar.gz"
  fi
}
while kill -0 "$pid" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$LIMIT" ]; do sleep 3; fetch; done
if kill -0 "$pid" 2>/dev/null; then state=running; else state=finished; fi
fetch
echo "[bg] $PLAN $state after $(( $(date +%s) - t0 )) s of this call"
grep -a "^\[campaign" "$BG/$PLAN.log" | tail -n 60 | cut -c1-240
