# ASTR_FUZZ: the libFuzzer build (tests/fuzz, scripts/fuzz.sh). Included by the top-level
# CMakeLists.txt before any target exists, because the libraries under test must be instrumented
# too: with the option on, everything is compiled with coverage instrumentation for libFuzzer and
# with AddressSanitizer and UndefinedBehaviorSanitizer, and linked with the sanitizers' runtimes;
# tests/fuzz then links each <name>_fuzzer with libFuzzer's main. Off (the default), this file
# changes nothing and tests/fuzz builds only the corpus-replay tests.
option(ASTR_FUZZ "Build the libFuzzer targets; the whole build gets ASan + UBSan (clang only)" OFF)

if(ASTR_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "ASTR_FUZZ=ON needs clang for C and C++ (libFuzzer), got "
                        "${CMAKE_C_COMPILER_ID} / ${CMAKE_CXX_COMPILER_ID}: configure a fresh "
                        "build folder with CC=clang-14 CXX=clang++-14 (scripts/fuzz.sh does)")
  endif()
  if(ASTR_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ASTR_FUZZ=ON builds no CUDA code: configure with -DASTR_WITH_CUDA=OFF")
  endif()
  set(ASTR_WITH_CUDA OFF CACHE STRING "Build the CUDA kernels and backend: AUTO, ON or OFF" FORCE)
  # A sanitizer report must end the run (libFuzzer then saves the input): UBSan recovers by default.
  set(astr_fuzz_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=all)
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link;${astr_fuzz_sanitize_flags}>"
    "$<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer;-g>")
  add_link_options(${astr_fuzz_sanitize_flags})
endif()
