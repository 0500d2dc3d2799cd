#!/usr/bin/env bash
# The test command (README): build/reuse the CPU test env, fetch the pinned SGLang sources, lint, pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/ci_env.sh
.venv/bin/python -m sglang_eagle3_ext.releases >/dev/null
.venv/bin/ruff check --quiet .
exec .venv/bin/python -m pytest -q -ra "$@"
