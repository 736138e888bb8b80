#!/usr/bin/env bash
# Builds and runs the sanitizer jobs (docs/reliability.md "Sanitizers"): the C++ unit and service
# tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/), and the scheduler's and
# worker's service tests under ThreadSanitizer (build-tsan/). Each build holds only the targets its
# tests need, so that both fit in CI next to the ordinary build. Any sanitizer report fails the test
# that produced it. Run by scripts/test.sh; alone after scripts/setup.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
usage() {
  cat <<'USAGE'
usage: scripts/sanitize.sh [asan] [tsan]

Builds (Ninja, ccache) and runs the sanitizer test jobs; both when none is named.
  asan   build-asan/: ASan + LSan + UBSan over the unit and service tests listed in this script
  tsan   build-tsan/: TSan over the scheduler and worker service tests listed in this script
Environment: ASTR_SANITIZE_JOBS (build and test parallelism, default: the number of CPUs).
USAGE
}
jobs=()
for a in "$@"; do
  case "$a" in
    asan|tsan) jobs+=("$a") ;;
    -h|--help) usage; exit 0 ;;
    *) echo "sanitize.sh: unknown argument '$a'" >&2; usage >&2; exit 2 ;;
  esac
done
[ ${#jobs[@]} -eq 0 ] && jobs=(asan tsan)
export CCACHE_DIR="${CCACHE_DIR:-$ROOT/.cache/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
par="${ASTR_SANITIZE_JOBS:-$(nproc)}"

# The unit tests of the libraries that parse untrusted input (model files, tokenizers, templates,
# regexes, HTTP and OpenAI bodies, requests) or hold memory (KV pages, sequences, plans), and the
# in-process service tests (the gRPC and HTTP servers, the scheduler's front, the worker's service).
# The tests that start the service binaries run in the ordinary build only: instrumenting the CLI
# and the binaries too would not fit CI's time.
ASAN_TESTS=(
  gguf_test safetensors_test model_config_test spm_tokenizer_test tokenizer_limits_test jinja_test
  regex_test http_server_test generation_defaults_test json_depth_test
  kv_pool_test sampler_test step_batch_test engine_test worker_executor_test
  worker_service_failure_test raw_update_message_test torch_rendezvous_test
  api_keys_test page_pool_test batch_planner_test fair_share_test worker_fit_test worker_pool_test
  admin_controller_test step_plan_test scheduler_core_test
  request_builder_test openai_api_test
  constraint_test compile_budget_test compile_queue_test tool_calls_test generate_service_test
)
# Where threads meet: the scheduler loop and its gRPC front, the worker's service and step stream,
# the HTTP server, the API keys' leases.
TSAN_TESTS=(
  http_server_test api_keys_test scheduler_core_test generate_service_test
  worker_service_failure_test task_pool_test compile_queue_test compile_budget_test
)

run_job() {
  local job="$1" mode build
  local -a tests
  if [ "$job" = asan ]; then
    mode=address; build="$ROOT/build-asan"; tests=("${ASAN_TESTS[@]}")
  else
    mode=thread; build="$ROOT/build-tsan"; tests=("${TSAN_TESTS[@]}")
  fi
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DASTR_SANITIZE="$mode" \
      -DASTR_WITH_CUDA=OFF > /dev/null
  fi
  echo "sanitize: building ${#tests[@]} $job test targets in $build"
  cmake --build "$build" -j "$par" --target "${tests[@]}"
  local regex
  regex="^($(IFS='|'; echo "${tests[*]}"))\\."
  # halt_on_error: the first report ends the test with a failure; the suppressions name only code
  # outside astr (uninstrumented libraries). die_after_fork=0: a constraint's compile runs in a
  # fork()ed child (scheduler/compile_sandbox.h), which may start threads of its own.
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  LSAN_OPTIONS="suppressions=$ROOT/tests/sanitizers/lsan.supp" \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:die_after_fork=0:suppressions=$ROOT/tests/sanitizers/tsan.supp" \
    ctest --test-dir "$build" --output-on-failure -j "$par" -R "$regex" -L "unit|service|cli" \
    --timeout 600
}

for job in "${jobs[@]}"; do run_job "$job"; done
