#!/usr/bin/env bash
# The main job: installs what is needed, builds, and answers a chat message with the default model
# on the CPU (the model's own chat template, tokenizer and EOS).
# Extra arguments go to `astr run` (e.g. --max-tokens 64 --temperature 0.7 --seed 1).
# ASTR_CHAT sets the message.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
MODEL="$("$ROOT/scripts/default_model.sh")"
MESSAGE="${ASTR_CHAT:-What is the capital of France?}"
echo "astr: user: $MESSAGE" >&2
exec "$ROOT/build/bin/astr" run --model "$MODEL" --chat "$MESSAGE" --max-tokens 48 "$@"
