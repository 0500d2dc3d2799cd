#!/usr/bin/env bash
# The test command (README): build/reuse the CPU test env, fetch the pinned SGLang sources, lint, pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/ci_env.sh
# stderr minus the "Location ... is ignored" lines a file:// index in a pip config prints (ci_env.sh)
.venv/bin/python -m sglang_eagle3_ext.serve.releases 2>&1 >/dev/null \
  | { grep -v "^WARNING: Location '.*' is ignored" >&2 || true; }
.venv/bin/ruff check --quiet .
exec .venv/bin/python -m pytest -q -ra "$@"
