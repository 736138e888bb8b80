#!/usr/bin/env bash
# Regenerates tests/python/goldens/llamacpp_forward.json from llama.cpp (by hand: CI has no
# llama.cpp; it recomputes astr's side from the same make-model seeds).
#
#   tools/llamacpp_goldens.sh [VENV] [-- ARGS...]   # VENV: default /tmp/astr-llamacpp
#
# Makes VENV with llama-cpp-python 0.3.36 (pip builds its bundled llama.cpp for this CPU: a few
# minutes the first time) and numpy, then runs tools/llamacpp_goldens.py with ARGS. Needs the build
# (scripts/build.sh: build/bin/astr). Then run tests/python/test_llamacpp_goldens.py.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="/tmp/astr-llamacpp"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then VENV="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if ! "$VENV/bin/python" -c 'import llama_cpp, numpy' 2>/dev/null; then
  "$VENV/bin/pip" install -q numpy "llama-cpp-python==0.3.36"
fi
"$VENV/bin/python" "$ROOT/tools/llamacpp_goldens.py" "$@"
