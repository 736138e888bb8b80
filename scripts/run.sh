#!/usr/bin/env bash
# The main job: installs what is needed, builds, and generates from the default model on the CPU.
# Extra arguments go to `astr run` (e.g. --max-tokens 64 --temperature 0.7 --seed 1).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
MODEL="$("$ROOT/scripts/default_model.sh")"
# SmolLM2-Instruct's chat prompt "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
# as token ids (text prompts for byte-level BPE vocabularies arrive with the tokenizer issue).
PROMPT_IDS="${ASTR_PROMPT_IDS:-1,4093,198,1780,314,260,3575,282,4649,47,2,198,1,520,9531,198}"
if [ -z "${ASTR_PROMPT_IDS:-}" ]; then
  echo "astr: prompt (SmolLM2 chat template, as ids): What is the capital of France?" >&2
fi
exec "$ROOT/build/bin/astr" run --model "$MODEL" --prompt-ids "$PROMPT_IDS" --max-tokens 48 "$@"
