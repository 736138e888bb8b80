#!/usr/bin/env bash
# Builds everything and runs every test (unit, integration, slow), as CI does.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
ctest --test-dir "${ASTR_BUILD_DIR:-$ROOT/build}" --output-on-failure -j "$(nproc)" "$@"
