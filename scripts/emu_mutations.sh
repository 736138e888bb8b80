#!/usr/bin/env bash
# Shows that the emulated device (kernels/cuda/emu) catches what a GPU would: applies, one at a
# time, deliberate defects to a copy of the real kernel and backend sources, rebuilds the gpu-emu
# op table (astr-test-backend-ops-emu) against each, and runs it until its first failure. Prints a
# table (docs/cuda.md, "What the emulator catches") and exits 1 if a mutation was not caught.
#
#   scripts/emu_mutations.sh [WORK_DIR]    (default .cache/emu-mutations; 10-20 minutes on 2 cores)
#   ASTR_MUTATIONS=3,7 scripts/emu_mutations.sh   only those mutations
#
# The working tree is never modified: the tracked files are copied to WORK_DIR/src, built in
# WORK_DIR/build (ccache shared with scripts/build.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:-$ROOT/.cache/emu-mutations}"
SRC="$WORK/src"
BUILD="$WORK/build"
TIMEOUT_S="${ASTR_MUTATION_TIMEOUT_S:-900}"
export CCACHE_DIR="${CCACHE_DIR:-$ROOT/.cache/ccache}"
PYTHON="${ASTR_PYTHON:-python3}"

mkdir -p "$WORK"
rm -rf "$SRC"
mkdir -p "$SRC"
(cd "$ROOT" && git ls-files -z | xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$SRC"

cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DASTR_WITH_GRPC=OFF \
  -DASTR_SHARED_DIR="$ROOT/../shared" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >"$WORK/cmake.log" 2>&1 \
  || { cat "$WORK/cmake.log"; exit 2; }

# id | file | what | old text | new text   (old must occur exactly once)
exec "$PYTHON" - "$SRC" "$BUILD" "$TIMEOUT_S" "${ASTR_MUTATIONS:-}" <<'PY'
import os, subprocess, sys, time

src, build, timeout_s, only = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
M = [
  (1, "kernels/cuda/paged_decode.cu", "decode: the cp.async wait before a tile is dropped",
   "    CpAsyncWait<C::kStages - 2>();\n    __syncthreads();\n",
   "    __syncthreads();\n"),
  (2, "kernels/cuda/paged_prefill.cu", "prefill: the __syncthreads after a tile's wait is dropped",
   "    CpAsyncWait<1>();\n    __syncthreads();\n    const int j0",
   "    CpAsyncWait<1>();\n    const int j0"),
  (3, "kernels/cuda/paged_decode_impl.cuh", "decode: P.V reads V with ldmatrix instead of .trans",
   "    LdMatrixX4Trans(\n        vb,", "    LdMatrixX4(\n        vb,"),
  (4, "kernels/cuda/paged_decode.cu", "decode: the last page's length off by one",
   "a.index.kv_last_page_len[b] : 0;", "a.index.kv_last_page_len[b] - 1 : 0;"),
  (5, "kernels/cuda/paged_decode.cu", "split-KV combine: every split weighted 1 in the denominator",
   "if (lse[s] != kNegInf) denom += exp2f(lse[s] - mx);", "if (lse[s] != kNegInf) denom += 1.0f;"),
  (6, "kernels/cuda/paged_decode_impl.cuh", "decode: wrong C-fragment column in the mask",
   "const int pos = n0 + nb * 8 + 2 * t + (i & 1);", "const int pos = n0 + nb * 8 + 2 * t + (i >> 1);"),
  (7, "worker/backends/cuda/cuda_backend.cc", "an allocation in the decode enqueue (captured into the graph)",
   "      return EnqueueForward(rows, rows, rows, true, 0, st);",
   "      auto scratch = DeviceAllocator::Allocate(4096, \"mutation\");\n"
   "      if (!scratch.ok()) return scratch.status();\n"
   "      return EnqueueForward(rows, rows, rows, true, 0, st);"),
  (8, "worker/backends/cuda/device_sampler.cc", "the stream synchronize before reading the sampled tokens is dropped",
   "  ASTR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), \"sampling on the device\");\n", ""),
  (9, "worker/backends/cuda/cuda_backend.cc", "graph bucket padding rows append to slot 0",
   "      m.out_slots[r] = -1;", "      m.out_slots[r] = 0;"),
  (10, "kernels/cuda/paged_decode_impl.cuh", "decode: shared memory one row short (overrun)",
   "kSmemBytes = (kQElems + 2 * kStages * kTileElems) * sizeof(bf16);",
   "kSmemBytes = (kQElems + 2 * kStages * kTileElems - kRowStride) * sizeof(bf16);"),
  (11, "kernels/cuda/paged_prefill.cu", "prefill: the causal mask lets a row see the next position",
   "const bool visible = j <= q_pos && ", "const bool visible = j <= q_pos + 1 && "),
  (12, "kernels/cuda/ops.cu", "RoPE: the barrier after the cos/sin table is dropped",
   "  __syncthreads();\n  bf16* row = rows + t * stride;", "  bf16* row = rows + t * stride;"),
]
want = {int(x) for x in only.split(",") if x} if only else None
rows, escaped = [], 0
for mid, rel, what, old, new in M:
    if want and mid not in want:
        continue
    path = os.path.join(src, rel)
    text = open(path).read()
    if text.count(old) != 1:
        print(f"mutation {mid}: the text to change occurs {text.count(old)} times in {rel}", flush=True)
        rows.append((mid, what, rel, "NOT APPLIED", "source changed; update the script"))
        escaped += 1
        continue
    open(path, "w").write(text.replace(old, new))
    try:
        t0 = time.time()
        b = subprocess.run(["cmake", "--build", build, "--target", "astr-test-backend-ops-emu", "astr"],
                           capture_output=True, text=True)
        if b.returncode != 0:
            rows.append((mid, what, rel, "caught", "does not build"))
            continue
        try:
            r = subprocess.run([os.path.join(build, "bin", "astr-test-backend-ops-emu"), "--stop-on-failure"],
                               capture_output=True, text=True, timeout=timeout_s)
            out = r.stdout + r.stderr
            fails = [l for l in out.splitlines() if l.startswith("FAIL")]
            faults = [l for l in out.splitlines() if "astr cuda-emu:" in l]
            if r.returncode == 0:
                rows.append((mid, what, rel, "NOT CAUGHT", "every case passed"))
                escaped += 1
            else:
                first = (fails[0] if fails else faults[0] if faults else f"exit {r.returncode}")
                rows.append((mid, what, rel, "caught", first[:160]))
        except subprocess.TimeoutExpired:
            rows.append((mid, what, rel, "caught", f"the suite hung (killed after {timeout_s} s)"))
        print(f"mutation {mid}: {rows[-1][3]} in {time.time() - t0:.0f} s: {rows[-1][4]}", flush=True)
    finally:
        open(path, "w").write(text)

print("\n| # | mutation | file | result | first failure |\n|---|---|---|---|---|")
for mid, what, rel, result, detail in rows:
    print(f"| {mid} | {what} | `{rel}` | {result} | {detail.replace('|', '/')} |")
sys.exit(1 if escaped else 0)
PY
