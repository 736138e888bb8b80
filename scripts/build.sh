#!/usr/bin/env bash
# Configures and builds astr (Release, Ninja, ccache) into build/. Binaries land in build/bin/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${ASTR_BUILD_DIR:-$ROOT/build}"
export CCACHE_DIR="${CCACHE_DIR:-$ROOT/.cache/ccache}"
# Paths inside the checkout are hashed relative to it: a second checkout (a git worktree, a fresh
# clone elsewhere) reuses the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build "$BUILD" -j "$(nproc)"
