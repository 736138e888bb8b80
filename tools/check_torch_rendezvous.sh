#!/usr/bin/env bash
# Checks astr's side of vLLM's NCCL rendezvous against torch itself (by hand: CI has no torch).
#
#   tools/check_torch_rendezvous.sh [VENV]     # VENV: where to install torch (default /tmp/astr-torch)
#
# 1. torch's TCPStore client against tests/integration/torch_store.py's server (the server the
#    tests play a vLLM trainer with): check-in, set / get / add / check / wait with a timeout.
# 2. tests/integration/test_vllm_weight_transfer.py with torch's own TCPStore as the trainer's
#    store (ASTR_TEST_TORCH_STORE=1: the classic server vLLM makes; then libuv, torch's default):
#    astr's scheduler (scheduler/front/torch_rendezvous.cc) joins it as vLLM's workers do.
# Needs the build (scripts/build.sh) and the test venv (.cache/venv). torch comes from PyPI without
# its CUDA dependencies, but for the few libraries its import needs; nothing here uses a GPU.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-/tmp/astr-torch}"
PY="$ROOT/.cache/venv/bin/python"
SITE="$("$PY" -c 'import site; print(site.getsitepackages()[0])')"
# shellcheck source=tools/torch_venv.sh
source "$ROOT/tools/torch_venv.sh" "$VENV"
"$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'

echo "== 1. torch's TCPStore client against torch_store.TcpStoreServer"
PYTHONPATH="$ROOT/tests/integration" "$VENV/bin/python" - <<'PYEOF'
from datetime import timedelta
import torch.distributed as dist
import torch_store
server = torch_store.TcpStoreServer()
server.add("init/", 1)  # the master's own check-in
client = dist.TCPStore("127.0.0.1", server.port, 2, False, timedelta(seconds=10))
assert server.get("init/") == b"2", server.get("init/")
client.set("k", b"v")
# SET has no answer: the GET behind it on the same connection orders it first.
assert client.get("k") == b"v" and server.get("/k") == b"v"
assert client.add("n", 5) == 5 and client.add("n", -2) == 3
assert client.check(["k"]) and not client.check(["absent"])
server.set("/late", b"x")
client.wait(["late"])
client.set_timeout(timedelta(seconds=1))
try:
    client.get("never")
    raise SystemExit("a get of a key nobody sets returned")
except dist.DistStoreError:
    pass
assert client.add("n", 1) == 4  # the connection still works after a cancelled wait
assert client.delete_key("k") and client.num_keys() >= 2
print("ok: queries", sorted(set(server.requests)))
PYEOF

for store in 1 libuv; do
  echo "== 2. test_vllm_weight_transfer.py, ASTR_TEST_TORCH_STORE=$store"
  ASTR_TEST_TORCH_STORE=$store PYTHONPATH="$SITE" ASTR_BIN_DIR="$ROOT/build/bin" \
    ASTR_SOURCE_DIR="$ROOT" ASTR_SHARED_DIR="$ROOT/../shared" \
    "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
    "$ROOT/tests/integration/test_vllm_weight_transfer.py"
done
