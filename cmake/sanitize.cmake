# ASTR_SANITIZE: a sanitizer build of the services and their tests (scripts/sanitize.sh, run by
# scripts/test.sh). Included by the top-level CMakeLists.txt before any target exists, so that
# every library is instrumented. `address` is AddressSanitizer (with LeakSanitizer) plus
# UndefinedBehaviorSanitizer, any report fatal; `thread` is ThreadSanitizer. Debian's gRPC,
# protobuf and the XGrammar static library are not instrumented: ASan and UBSan do not need them
# to be; TSan's reports inside them are suppressed (tests/sanitizers/tsan.supp), not ours.
set(ASTR_SANITIZE "" CACHE STRING "Sanitizer build: empty (none), address or thread")

if(ASTR_SANITIZE)
  if(ASTR_FUZZ)
    message(FATAL_ERROR "ASTR_SANITIZE and ASTR_FUZZ are separate builds (the fuzz build has ASan)")
  endif()
  if(ASTR_SANITIZE STREQUAL "address")
    set(astr_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined)
  elseif(ASTR_SANITIZE STREQUAL "thread")
    set(astr_sanitize_flags -fsanitize=thread)
  else()
    message(FATAL_ERROR "ASTR_SANITIZE must be empty, address or thread, got '${ASTR_SANITIZE}'")
  endif()
  # No CUDA: the sanitizers run on the CPU build. -O1 keeps the reports' stacks readable and the
  # tests fast enough; -g1 gives file:line in reports at a fraction of -g's compile time.
  set(ASTR_WITH_CUDA OFF CACHE STRING "Build the CUDA kernels and backend: AUTO, ON or OFF" FORCE)
  add_compile_options(${astr_sanitize_flags} -fno-omit-frame-pointer -O1 -g1)
  add_link_options(${astr_sanitize_flags})
endif()
