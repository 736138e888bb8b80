#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and the CUDA toolkit (no apt, no gRPC needed), builds
# the CUDA backend and its tests, runs the GPU op table and the CUDA host tests, benchmarks decode
# (ms/step at batch 1..64 with CUDA graphs on and off), prefill (tok/s) and the decode attention
# kernel (GB/s against the memory bandwidth), and writes one JSON report.
#
#   scripts/gpu_check.sh [REPORT_DIR]        (default: $OUT if set, else build-gpu/report)
#
# Environment: ASTR_CUDA_ARCH (default native), ASTR_GPU_BUILD_DIR (default build-gpu),
# ASTR_GPU_CMAKE_ARGS (extra configure arguments), ASTR_SHARED_DIR.
#
# Missing nlohmann_json / xxhash.h / GoogleTest / shared models are taken from .cache/deps
# (scripts/stage_deps.sh). Budget: under 8 minutes on an H100/H200-class machine.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${ASTR_GPU_BUILD_DIR:-$ROOT/build-gpu}"
REPORT="${1:-${OUT:-$BUILD/report}}"
DEPS="$ROOT/.cache/deps"
mkdir -p "$REPORT"
LOG="$REPORT/gpu_check.log"
: > "$LOG"
step() { echo "== $* ($(date +%T))" | tee -a "$LOG"; }
SHARED="${ASTR_SHARED_DIR:-$ROOT/../shared}"
[ -d "$SHARED/models" ] || SHARED="$DEPS/shared"
export ASTR_SHARED_DIR="$SHARED"
START=$(date +%s)

step "nvidia-smi"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$LOG" 2>&1 || true

step "configure"
GEN=(); command -v ninja > /dev/null && GEN=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DASTR_WITH_GRPC=OFF \
  -DASTR_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${ASTR_CUDA_ARCH:-native}" \
  -DASTR_DEPS_DIR="$DEPS" -DASTR_SHARED_DIR="$SHARED" ${ASTR_GPU_CMAKE_ARGS:-} >> "$LOG" 2>&1 || { echo "configure failed"; tail -30 "$LOG"; exit 1; }
step "build"
TARGETS=(astr astr-bench astr-bench-attention astr-test-backend-ops cuda_host_test astr_backend_cuda)
for t in decode_splits_test prefill_plan_test sampling_pack_test; do
  [ -f "$ROOT/tests/gpu/$t.cc" ] && TARGETS+=("$t")
done
cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" >> "$LOG" 2>&1 || { echo "build failed"; grep -E "error|FAILED" "$LOG" | head -40; exit 1; }
BIN="$BUILD/bin"

step "GPU op table"
"$BIN/astr-test-backend-ops" --json "$REPORT/backend_ops.json" > "$REPORT/backend_ops.txt" 2>&1
OPS_RC=$?
tail -3 "$REPORT/backend_ops.txt" | tee -a "$LOG"

step "CUDA host tests"
HOST_RC=0
for t in "${TARGETS[@]}"; do
  case "$t" in *_test) "$BIN/$t" --gtest_brief=1 >> "$LOG" 2>&1 || HOST_RC=1 ;; esac
done

step "benchmark model"
MODEL="$BUILD/bench-tinyllama-shape.gguf"
# TinyLlama-1.1B's shape (head_dim 64, GQA 8:1) with random bf16 weights.
[ -f "$MODEL" ] || "$BIN/astr" make-model --arch llama --hidden 2048 --layers 22 --heads 32 \
  --kv-heads 4 --ffn 5632 --vocab 32000 --dtype bf16 --seed 1 --out "$MODEL" >> "$LOG" 2>&1
BENCH=(--model "$MODEL" --backend cuda --batch-sizes 1,2,4,8,16,32,64 --decode-context 256
       --decode-steps 32 --prompt-len 512 --max-batch-tokens 4096 --max-running 64 --kv-cache-mb 8192)
step "decode/prefill, graphs on"
"$BIN/astr-bench" "${BENCH[@]}" --cuda-graphs on > "$REPORT/bench_graphs_on.json" 2>> "$LOG"
step "decode/prefill, graphs off"
"$BIN/astr-bench" "${BENCH[@]}" --cuda-graphs off > "$REPORT/bench_graphs_off.json" 2>> "$LOG"
step "decode attention bandwidth"
"$BIN/astr-bench-attention" --batch-sizes 1,8,32,64 --contexts 4096,16384,32768 --heads 32 \
  --kv-heads 8 --head-dim 128 > "$REPORT/bench_attention.json" 2>> "$LOG"

step "report"
python3 - "$REPORT" "$OPS_RC" "$HOST_RC" "$START" << 'PY'
import json, os, sys, time
report_dir, ops_rc, host_rc, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def load(name):
    try:
        with open(os.path.join(report_dir, name)) as f:
            return json.load(f)
    except Exception as e:
        return {"error": str(e)}
ops = load("backend_ops.json")
on, off = load("bench_graphs_on.json"), load("bench_graphs_off.json")
att = load("bench_attention.json")
def decode_ms(b):
    out = {}
    for row in b.get("decode", []) if isinstance(b, dict) else []:
        out[row.get("batch")] = row.get("ms_per_step")
    return out
on_ms, off_ms = decode_ms(on), decode_ms(off)
speedup = {str(k): off_ms[k] / on_ms[k] for k in on_ms if k in off_ms and on_ms[k]}
long_ctx = [r for r in att.get("results", []) if r.get("context", 0) >= 16384]
report = {
    "gpu_tests": {"op_table_exit": ops_rc, "skipped_no_gpu": ops_rc == 77, "passed": ops.get("passed"), "failed": ops.get("failed"),
                  "unsupported": ops.get("unsupported"), "host_tests_ok": host_rc == 0,
                  "failures": [c for c in ops.get("cases", []) if c.get("result") == "FAIL"]},
    "decode_ms_per_step": {"graphs_on": on_ms, "graphs_off": off_ms},
    "graph_speedup": speedup,
    "graph_speedup_batch1_target_1_8x": speedup.get("1", 0) >= 1.8,
    "prefill": {"graphs_on": on.get("prefill") if isinstance(on, dict) else None},
    "decode_attention": att,
    "decode_attention_long_context_min_fraction_of_peak":
        min((r["fraction_of_peak"] for r in long_ctx), default=None),
    "seconds": time.time() - start,
}
with open(os.path.join(report_dir, "gpu_report.json"), "w") as f:
    json.dump(report, f, indent=2)
print(json.dumps({k: report[k] for k in ("graph_speedup", "decode_attention_long_context_min_fraction_of_peak", "seconds")}, indent=1))
print("gpu tests:", report["gpu_tests"]["passed"], "passed,", report["gpu_tests"]["failed"], "failed")
PY
[ "$OPS_RC" = 0 ] && [ "$HOST_RC" = 0 ]
