#!/usr/bin/env bash
# Builds everything and runs every test (unit, integration, slow, the fuzz corpora), then the
# sanitizer jobs (scripts/sanitize.sh: ASan + UBSan, TSan), as CI does.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
# The default model (a real quantized GGUF) is checked against llama.cpp's output too.
"$ROOT/scripts/default_model.sh" > /dev/null
# So is the Gemma 3 270M GGUF's vocabulary (tests/python/test_gemma3_tokenizer.py).
"$ROOT/scripts/gemma3_model.sh" > /dev/null
ctest --test-dir "${ASTR_BUILD_DIR:-$ROOT/build}" --output-on-failure -j "$(nproc)" "$@"
# ASTR_SKIP_SANITIZERS=1 leaves them out (a quicker local run; CI never sets it).
if [ "${ASTR_SKIP_SANITIZERS:-0}" != 1 ]; then
  "$ROOT/scripts/sanitize.sh"
fi
