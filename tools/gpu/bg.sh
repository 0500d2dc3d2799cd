#!/usr/bin/env bash
# One plan across several device calls on one warm machine (a plan longer than one call's 600 s):
#   bash tools/gpu/bg.sh tools/gpu/plans/X.yaml SECONDS [run_plan.py options]   # carry .gpu
# The first call copies this checkout to /tmp/bg/repo (a later call's fresh copy of the working
# tree cannot touch the running code) and starts the plan there in its own process session, so it
# outlives the call; every call then waits up to SECONDS (or until the plan ends) and copies the
# plan's latest pack (<plan>.tar.gz) and progress log (<plan>.log) into $OUT as they land. The
# next call, made within the machine's warm window, finds it running and waits again. A fresh
# machine starts the plan from the top. Options (--hard-stop S, --deadline S) go to run_plan.py.
set -uo pipefail
PLAN=${1:?plan file}; LIMIT=${2:?seconds}; shift 2
NAME=$(basename "$PLAN" .yaml)
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BG=/tmp/bg
mkdir -p "$BG/out" "${OUT:?OUT is the folder whose files come back}"
t0=$(date +%s)
if [ ! -f "$BG/$NAME.pid" ]; then
  rm -rf "$BG/repo" && mkdir -p "$BG/repo"
  tar -C "$SRC" --exclude=./.gpu --exclude=./.git --exclude=./.venv -cf - . | tar -C "$BG/repo" -xf -
  [ -f "$SRC/.gpu/site.tar.xz" ] && export GPU_BUNDLE="$SRC/.gpu/site.tar.xz"
  cd "$BG/repo"
  setsid nohup bash tools/gpu/run.sh "${PYTHON:-python3}" tools/gpu/run_plan.py "$PLAN" --out "$BG/out" "$@" \
    >"$BG/$NAME.stdout" 2>&1 </dev/null &
  echo $! >"$BG/$NAME.pid"
  echo "[bg] started $NAME (pid $(cat "$BG/$NAME.pid"))"
else
  echo "[bg] $NAME already running on this machine (pid $(cat "$BG/$NAME.pid"))"
fi
pid=$(cat "$BG/$NAME.pid")
# each new pack is copied as it lands: a call cut short still returns the last one
fetch() {
  cp "$BG/out/$NAME.log" "$BG/$NAME.stdout" "$OUT/" 2>/dev/null
  if [ -f "$BG/out/$NAME.tar.gz" ] && [ "$BG/out/$NAME.tar.gz" -nt "$OUT/$NAME.tar.gz" ]; then
    cp "$BG/out/$NAME.tar.gz" "$OUT/.$NAME.tar.gz" && mv "$OUT/.$NAME.tar.gz" "$OUT/$NAME.tar.gz"
  fi
}
while kill -0 "$pid" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$LIMIT" ]; do sleep 3; fetch; done
if kill -0 "$pid" 2>/dev/null; then state=running; else state=finished; fi
fetch
echo "[bg] $NAME $state after $(( $(date +%s) - t0 )) s of this call"
tail -n 60 "$BG/out/$NAME.log" 2>/dev/null | cut -c1-240
