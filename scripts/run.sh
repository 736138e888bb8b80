#!/usr/bin/env bash
# The main job: installs what is needed, builds, and serves the default model on this machine (one
# astr-worker and astr-scheduler started by deploy/local/astr-local, CPU backend), streams the
# answer to a chat message through the gRPC API with `astr generate`, prints how to talk to the
# server, and keeps serving until Ctrl-C.
#   Extra arguments go to `astr generate` (e.g. --max-tokens 64 --temperature 0.7 --seed 1).
#   ASTR_CHAT: the message (default "What is the capital of France?").
#   ASTR_SYSTEM: the system message (default: asks for one short English sentence; '' for none).
#   ASTR_PORT: the scheduler's gRPC port (default 50051).
#   ASTR_HTTP_PORT: the port of its OpenAI-compatible HTTP API (default 8000; 'off' for none).
#   ASTR_RUN_ONESHOT=1: stop the servers after the answer and exit 0 (for tests and scripts).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
MODEL="$("$ROOT/scripts/default_model.sh")"
BUILD="${ASTR_BUILD_DIR:-$ROOT/build}"
ASTR="$BUILD/bin/astr"
LOCAL="$ROOT/deploy/local/astr-local"
PID_FILE="$ROOT/.cache/local/run.pid"
MESSAGE="${ASTR_CHAT:-What is the capital of France?}"
# A 135M-parameter model needs to be told what kind of answer is wanted: without a system message
# it answers this question in looping French.
SYSTEM="${ASTR_SYSTEM-You are a helpful assistant. Answer in one short English sentence.}"
# The sampling defaults served to requests that leave them unset (the OpenAI API, grpcurl): the
# model card's temperature and top_p, a mild repetition penalty and a length cap, because the GGUF
# file names none (see docs/sampling.md, "Served defaults").
GEN_CONFIG="$ROOT/scripts/default_model.generation_config.json"

START_LOG="$ROOT/.cache/local/run-start.log"
mkdir -p "$(dirname "$START_LOG")"
echo "astr: starting astr-worker and astr-scheduler for $(basename "$MODEL")" >&2
HTTP_PORT="${ASTR_HTTP_PORT:-8000}"
if ! ADDR="$("$LOCAL" --detach --model "$MODEL" --port "${ASTR_PORT:-50051}" --http-port "$HTTP_PORT" \
  --build-dir "$BUILD" --pid-file "$PID_FILE" -- --generation-config "$GEN_CONFIG" \
  2>"$START_LOG")"; then
  cat "$START_LOG" >&2
  exit 1
fi
# From here on, however the script ends (error, Ctrl-C, SIGTERM, done), the servers are stopped:
# the scheduler first, so that it drains, then the worker.
trap '"$LOCAL" stop --pid-file "$PID_FILE"' EXIT
trap 'exit 0' INT TERM

echo "astr: serving at $ADDR (logs in .cache/local/logs)" >&2
[ -z "$SYSTEM" ] || echo "astr: system: $SYSTEM" >&2
echo "astr: user: $MESSAGE" >&2
"$ASTR" generate --server "$ADDR" ${SYSTEM:+--system "$SYSTEM"} --chat "$MESSAGE" "$@"
if [ "${ASTR_RUN_ONESHOT:-0}" = 1 ]; then exit 0; fi

ASTR_REL="${ASTR#"$ROOT"/}"
HTTP_URL="$(grep -a -o 'at http://[^ ]*/v1' "$START_LOG" | tail -1 | cut -c4-)"
cat >&2 <<EOF

astr: serving $(basename "$MODEL") at $ADDR. Talk to it:
  $ASTR_REL chat --server $ADDR
  $ASTR_REL generate --server $ADDR --chat "Write a haiku about rain" --temperature 0.7
  $ASTR_REL info --server $ADDR
  grpcurl -plaintext -d '{"text": "Once upon a time", "sampling": {"max_tokens": 32}}' \\
      $ADDR astr.v1.Generate/GenerateStream
EOF
if [ -n "$HTTP_URL" ]; then
  cat >&2 <<EOF

astr: the OpenAI-compatible HTTP API is at $HTTP_URL:
  curl $HTTP_URL/chat/completions -H 'Content-Type: application/json' \\
      -d '{"messages": [{"role": "user", "content": "Write a haiku about rain"}], "max_tokens": 64}'
  python3 -c 'from openai import OpenAI; c = OpenAI(base_url="$HTTP_URL", api_key="none"); \\
print(c.chat.completions.create(model=c.models.list().data[0].id, messages=[{"role": "user", "content": "Hi!"}]).choices[0].message.content)'
EOF
fi
echo "astr: Ctrl-C stops the servers." >&2
while "$LOCAL" status --pid-file "$PID_FILE" >/dev/null; do sleep 1; done
echo "astr: a server process exited; see .cache/local/logs" >&2
exit 1
