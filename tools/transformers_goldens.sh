#!/usr/bin/env bash
# Regenerates tests/python/goldens/transformers_forward.json from Hugging Face transformers (by
# hand: CI has no torch; it recomputes astr's side from the same make-model seeds).
#
#   tools/transformers_goldens.sh [VENV] [-- ARGS...]   # VENV: default /tmp/astr-torch
#
# ARGS go to tools/transformers_goldens.py (e.g. --only llama_gqa2_hd16). Needs the build
# (scripts/build.sh: build/bin/astr). Then run tests/python/test_transformers_goldens.py.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="/tmp/astr-torch"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then VENV="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
# shellcheck source=tools/torch_venv.sh
source "$ROOT/tools/torch_venv.sh" "$VENV" transformers
"$VENV/bin/python" "$ROOT/tools/transformers_goldens.py" "$@"
