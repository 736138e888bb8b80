#!/usr/bin/env bash
# Fills .cache/deps with what a bare GPU machine (CUDA toolkit, CMake, a compiler, Python; no apt)
# lacks to build the CUDA backend and its tests: the nlohmann/json headers, xxhash.h (used
# header-only), the GoogleTest sources and the shared test models. Run it on a machine where
# scripts/setup.sh has installed them, then ship .cache/deps with the tree; scripts/gpu_check.sh uses it when find_package finds nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEPS="$ROOT/.cache/deps"
SHARED="${ASTR_SHARED_DIR:-$ROOT/../shared}"
mkdir -p "$DEPS/include" "$DEPS/shared"
[ -d /usr/include/nlohmann ] || { echo "stage_deps: /usr/include/nlohmann missing (apt install nlohmann-json3-dev)" >&2; exit 1; }
[ -f /usr/include/xxhash.h ] || { echo "stage_deps: /usr/include/xxhash.h missing (apt install libxxhash-dev)" >&2; exit 1; }
[ -d /usr/src/googletest ] || { echo "stage_deps: /usr/src/googletest missing (apt install googletest)" >&2; exit 1; }
rm -rf "$DEPS/include/nlohmann" "$DEPS/include/xxhash.h" "$DEPS/googletest" "$DEPS/shared/models"
cp -r /usr/include/nlohmann "$DEPS/include/"
cp /usr/include/xxhash.h "$DEPS/include/"
cp -r /usr/src/googletest "$DEPS/googletest"
cp -r "$SHARED/models" "$DEPS/shared/models"
du -sh "$DEPS"
