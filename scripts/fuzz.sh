#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz into build-fuzz/ (clang-14, ASan + UBSan over the whole
# build, CUDA off) and runs each for a while, one after the other, single process. Each target
# works on its own corpus under .cache/fuzz/<target>/corpus, seeded from tests/fuzz/corpus/<target>
# (plus the matching shared test data, for the targets whose real inputs are small), and keeps what
# it finds there across runs. Findings (crash-*, leak-*, timeout-*, oom-*) land in
# .cache/fuzz/<target>/artifacts; minimize one with
#   build-fuzz/bin/<target>_fuzzer -minimize_crash=1 -runs=100000 <artifact>
# and add it to tests/fuzz/corpus/<target>/regress-<what> so the replay test covers it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${ASTR_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
SHARED="${ASTR_SHARED_DIR:-$ROOT/../shared}"
export CCACHE_DIR="${CCACHE_DIR:-$ROOT/.cache/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"

usage() {
  cat <<EOF
usage: scripts/fuzz.sh [--seconds N] [--jobs N] [TARGET...]

Builds build-fuzz/bin/<TARGET>_fuzzer for each TARGET (default: every tests/fuzz/*_fuzz.cc) and
runs it for N seconds, then prints its executions, wall and CPU seconds, coverage (libFuzzer's cov: edges and
ft: features), corpus size and findings.

  --seconds N   how long each target runs (default 600)
  --jobs N      parallel compile jobs for the build (default: all cores)
  --help        this text

Environment: ASTR_FUZZ_BUILD_DIR (default build-fuzz), ASTR_SHARED_DIR (shared test data,
default ../shared), CCACHE_DIR.
EOF
}

SECONDS_PER_TARGET=600
JOBS="$(nproc)"
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --help | -h) usage; exit 0 ;;
    --seconds) SECONDS_PER_TARGET="${2:?--seconds needs a value}"; shift 2 ;;
    --jobs) JOBS="${2:?--jobs needs a value}"; shift 2 ;;
    -*) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
if [ ${#TARGETS[@]} -eq 0 ]; then
  for f in "$ROOT"/tests/fuzz/*_fuzz.cc; do
    name="$(basename "$f" _fuzz.cc)"
    TARGETS+=("$name")
  done
fi
for t in "${TARGETS[@]}"; do
  if [ ! -f "$ROOT/tests/fuzz/${t}_fuzz.cc" ]; then
    echo "no fuzz target '$t' (tests/fuzz/${t}_fuzz.cc)" >&2
    exit 2
  fi
done

# Longest input per target: room for the seeds and a little more, and no more, so that the
# fuzzer spends its time on structure rather than on length.
declare -A MAX_LEN=(
  [gguf]=65536 [safetensors]=32768 [safetensors_index]=8192 [model_config]=8192
  [tokenizer_json]=65536 [tokenizer_codec]=4096 [jinja]=16384 [regex]=4096
  [request_builder]=8192 [step_plan]=8192 [http_request]=8192 [openai_body]=8192
  [weight_manifest]=16384 [nccl_id_pickle]=1024
)
# Shared files that are small enough to seed a target's corpus with (bigger ones only replay).
declare -A SHARED_SEEDS=(
  [jinja]="templates/*.jinja" [model_config]="tokenizers/hf/*/config.json"
  [tokenizer_codec]="tokenizers/gguf/*.inp"
)

if [ ! -f "$BUILD/build.ninja" ]; then
  # -O2 without NDEBUG: fast, with the assertions on.
  CC=clang-14 CXX=clang++-14 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DASTR_FUZZ=ON \
    -DASTR_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g"
fi
FUZZERS=()
for t in "${TARGETS[@]}"; do FUZZERS+=("${t}_fuzzer"); done
ninja -C "$BUILD" -j "$JOBS" "${FUZZERS[@]}"

export ASTR_BACKEND=cpu
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

SUMMARY=()
for t in "${TARGETS[@]}"; do
  work="$ROOT/.cache/fuzz/$t"
  mkdir -p "$work/corpus" "$work/artifacts"
  seeds=("$ROOT/tests/fuzz/corpus/$t")
  if [ -n "${SHARED_SEEDS[$t]:-}" ]; then
    seed_dir="$work/shared-seeds"
    rm -rf "$seed_dir" && mkdir -p "$seed_dir"
    for f in $SHARED/${SHARED_SEEDS[$t]}; do
      [ -f "$f" ] && cp "$f" "$seed_dir/$(echo "${f#"$SHARED"/}" | tr / _)"
    done
    seeds+=("$seed_dir")
  fi
  found_before=$(find "$work/artifacts" -type f | wc -l)
  log="$work/fuzz.log"
  echo "== $t: ${SECONDS_PER_TARGET} s, max_len ${MAX_LEN[$t]:-4096}, log $log"
  start=$(date +%s)
  set +e
  /usr/bin/time -f '%U %S' -o "$work/cpu" \
    "$BUILD/bin/${t}_fuzzer" -max_total_time="$SECONDS_PER_TARGET" -max_len="${MAX_LEN[$t]:-4096}" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" "${seeds[@]}" > "$log" 2>&1
  rc=$?
  set -e
  elapsed=$(( $(date +%s) - start ))
  # CPU seconds (user + system): under a busy machine the wall time overstates the work done.
  cpu=$(awk 'END { printf "%d", $1 + $2 }' "$work/cpu" 2>/dev/null || echo '?')
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
  # The last status line: "#<execs> <event> cov: <edges> ft: <features> corp: <n>/<size> ...".
  status=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(echo "$status" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$status" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
  # Units in the corpus libFuzzer ended with (seeds that add coverage and what it found).
  corpus=$(echo "$status" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
  found=$(( $(find "$work/artifacts" -type f | wc -l) - found_before ))
  line="$t: execs ${execs:-?}, ${elapsed} s (${cpu} CPU s), cov ${cov:-?}, ft ${ft:-?}, corpus ${corpus:-?}, findings ${found} (exit ${rc})"
  echo "$line"
  if [ "$found" -gt 0 ]; then
    grep -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY' "$log" | head -5 || true
  fi
  SUMMARY+=("$line")
done
echo
echo "summary (artifacts under .cache/fuzz/<target>/artifacts):"
printf '  %s\n' "${SUMMARY[@]}"
