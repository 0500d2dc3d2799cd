#!/usr/bin/env bash
# Build (or reuse) the CPU test environment: real SGLang 0.5.23 importable on CPU torch.
# Idempotent: a finished env is marked by .venv/.ready-<hash of this script + constraints>.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SGLANG_EAGLE3_VENV:-${SGL_EAGLE3_VENV:-.venv}}  # SGL_EAGLE3_VENV: the old name
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
# Quiet on purpose: sglang is installed with --no-deps (its CUDA pins would pull a CUDA torch), so
# pip's resolver would print a long "dependency conflicts" block after every later install
# (--no-warn-conflicts), and a pip config with a file:// index missing a project prints one
# "Location ... is ignored" line per lookup (filtered). Real errors still print and stop the script.
pipq() {
  "$VENV/bin/pip" install -q --no-warn-conflicts "$@" 2>&1 | { grep -v "^WARNING: Location '.*' is ignored" || true; }
}
# This checkout, editable. setuptools prints an "Editable installation" notice (a BuildBackendWarning
# in a block of asterisks) for every editable install it cannot make with a plain .pth, which is ours
# (pyproject.toml maps launch/ and patches/ into the package); information only, so that one message
# is ignored by its text (PYTHONWARNINGS reaches the build backend pip starts), nothing else.
editable() {
  PYTHONWARNINGS="ignore:Editable installation" pipq --no-deps "$@" -e .
}
# Chromium from Debian's packages: tests/test_report_browser.py renders the report page in it (and
# fails under CI=true without it). Installed once, before the env check, so a ready env gets it too.
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "note: could not install chromium (apt-get install chromium): the report page's browser test needs it"
fi
stamp="$VENV/.ready-$(cat tools/ci_env.sh tools/ci-constraints.txt | sha256sum | cut -c1-12)"
if [ -f "$stamp" ]; then
  editable --no-build-isolation >/dev/null 2>&1 || editable
  exit 0
fi
t0=$(date +%s)
rm -rf "$VENV"
"$PY" -m venv "$VENV"
C="-c tools/ci-constraints.txt"
pipq --upgrade pip setuptools wheel
pipq $C torch==2.13.0
pipq --no-deps sglang==0.5.23
# SGLang's import chain on CPU, tiers 1-4 of docs/reference/testing.md (never torchvision: a stub stands in);
# prometheus-client: SGLang's --enable-metrics and our phase metrics (docs/guide/metrics.md)
pipq $C numpy orjson psutil pybase64 requests packaging pillow starlette msgspec \
  pydantic pyzmq tqdm ipython aiohttp transformers tokenizers dill apache-tvm-ffi sentencepiece \
  compressed-tensors gguf einops openai partial_json_parser setproctitle uvicorn fastapi uvloop \
  jsonschema xgrammar soundfile python-multipart triton safetensors prometheus-client
# our own dependencies and the test tools
pipq $C "libcst>=1.1" pyyaml rich pytest pytest-timeout ruff matplotlib
editable
touch "$stamp"
echo "test env ready in $(( $(date +%s) - t0 )) s ($VENV)"
