#!/bin/sh
# The images' ENTRYPOINT: the first argument names the role, the rest go to its binary unchanged.
# `exec` replaces this shell, so the binary is PID 1 and receives SIGTERM itself (it drains and
# exits 0). Kubernetes may bypass this script with `command: ["/usr/local/bin/astr-worker"]`.
set -eu

usage() {
  cat <<'USAGE'
Usage: docker run [OPTIONS] IMAGE ROLE [ARGS...]

Roles:
  scheduler ARGS...   astr-scheduler: the public gRPC API (and the HTTP API with --http-listen)
  worker ARGS...      astr-worker: serves a model (--model /models/...) to the scheduler
  astr ARGS...        the astr CLI (health, info, generate, run, inspect, ...)
  --help              this text; `ROLE --help` lists the role's flags

Every binary listens on 127.0.0.1 unless told otherwise: pass e.g. --listen 0.0.0.0:50051.
Models are read from a volume mounted at /models; nothing in the image downloads one.
USAGE
}

if [ "$#" -eq 0 ]; then
  usage
  exit 0
fi

role="$1"
shift
case "$role" in
  scheduler) exec /usr/local/bin/astr-scheduler "$@" ;;
  worker) exec /usr/local/bin/astr-worker "$@" ;;
  astr) exec /usr/local/bin/astr "$@" ;;
  -h | --help | help)
    usage
    exit 0
    ;;
  *)
    echo "astr image: unknown role '$role' (scheduler, worker or astr)" >&2
    usage >&2
    exit 2
    ;;
esac
