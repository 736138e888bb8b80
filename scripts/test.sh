#!/usr/bin/env bash
# Builds everything and runs every test (unit, integration, slow), as CI does.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
# The default model (a real quantized GGUF) is checked against llama.cpp's output too.
"$ROOT/scripts/default_model.sh" > /dev/null
ctest --test-dir "${ASTR_BUILD_DIR:-$ROOT/build}" --output-on-failure -j "$(nproc)" "$@"
