#!/usr/bin/env bash
# Runs every test: the C++ suites (GoogleTest via CTest), the middleware suites
# again under ThreadSanitizer, the middleware, engine and workload suites and the
# Python lifetime tests under AddressSanitizer + UndefinedBehaviorSanitizer, and the
# Python suite (pytest, warnings are errors). With CI=true, also 300 fuzz inputs over damaged pool images
# and 30 s of fuzzing the Redis-protocol parser, 200 SIGKILL cycles of bench/crash_harness.py,
# and two chaos runs of bench/server_chaos.py against the server on the ASan core.
# Expects scripts/setup.sh to have run.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
PY=${PYTHON:-python3}
# Each stage's header says how long the run has taken so far, so a slow stage shows.
START=$SECONDS
stage() { echo "== $* [$((SECONDS - START)) s]"; }

stage "C++ tests (RelWithDebInfo)"
# -g1 (line tables) instead of RelWithDebInfo's -g: enough for a failing test's backtrace,
# and the test build compiles a quarter faster.
cmake -S . -B build/tests -G Ninja -DNVMW_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
cmake --build build/tests -j"$JOBS"
ctest --test-dir build/tests --output-on-failure -j"$JOBS"

stage "C++ middleware and server tests under ThreadSanitizer"
cmake -S . -B build/tsan -G Ninja -DNVMW_BUILD_TESTS=ON -DNVMW_SANITIZE=thread \
  -DCMAKE_BUILD_TYPE=Debug >/dev/null
# Only the test executables (and helper tools) of the given roles: bounds the sanitizer builds.
role_targets() {
  local role f
  for role in "$@"; do
    for f in tests/cpp/"$role"/*_test.cc tests/cpp/"$role"/*_tool.cc; do
      if [ -e "$f" ]; then basename "$f" .cc; fi
    done
  done
}
# shellcheck disable=SC2046
cmake --build build/tsan -j"$JOBS" --target $(role_targets middleware server)
# setarch -R: TSan's shadow mapping fails with the high ASLR entropy of newer kernels.
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  setarch "$(uname -m)" -R ctest --test-dir build/tsan --output-on-failure -L 'middleware|server' -j"$JOBS"

stage "C++ middleware, engine, workload and server tests, and the Python lifetime tests, under ASan + UBSan"
# One build for both: the test executables and the module share the instrumented libraries.
cmake -S . -B build/asan -G Ninja -DNVMW_BUILD_TESTS=ON -DNVMW_BUILD_PYTHON=ON \
  -DNVMW_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$PWD/build/asan/py" >/dev/null
# shellcheck disable=SC2046
cmake --build build/asan -j"$JOBS" --target $(role_targets middleware engine workload server) _core
ASAN_OPTIONS="abort_on_error=1:detect_stack_use_after_return=1" \
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
LSAN_OPTIONS="suppressions=$PWD/tests/cpp/engine/lsan.supp" \
  ctest --test-dir build/asan --output-on-failure -L 'middleware|engine|workload|server' -j"$JOBS"
# The interpreter is not instrumented, so the ASan runtime is preloaded (it must come
# first), and libstdc++ with it: otherwise ASan's C++ throw interceptor finds no real
# __cxa_throw (libstdc++ arrives later, with the module) and aborts on the first
# exception. Leak checking is off because CPython keeps memory until exit by design.
# -s: a sanitizer report aborts the run, so it must not sit in pytest's capture.
# Child interpreters of the tests inherit the environment and run instrumented too.
CXX_=${CXX:-c++}
LD_PRELOAD="$($CXX_ -print-file-name=libasan.so) $($CXX_ -print-file-name=libstdc++.so)" \
ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
NVMW_DEV_CORE_DIR="$PWD/build/asan/py" PYTHONPATH="$PWD/python" \
  $PY -m pytest -q -s -p no:cacheprovider tests/python/test_lifetime.py

if [ "${CI:-}" = "true" ]; then
  # Bounded: damaged pool images (byte patches on a small valid pool) must never
  # crash, be modified by a refused open, or serve a wrong value. A crash fails CI.
  stage "pool image fuzzing (300 inputs, fixed seed, at most 120 s)"
  cmake -S . -B build/fuzz -G Ninja -DNVMW_BUILD_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build/fuzz -j"$JOBS" --target pool_image_fuzz
  PMEM_IS_PMEM_FORCE=1 build/fuzz/pool_image_fuzz -seed=1 -runs=300 -max_total_time=120 \
    -max_len=256 -rss_limit_mb=4096 -timeout=60 -print_final_stats=1
  # The Redis-protocol request parser: whole and split input must agree, caps hold,
  # every command re-encodes to itself. Seeds in fuzz/corpus/resp; a crash fails CI.
  stage "Redis-protocol parser fuzzing (30 s, fixed seed)"
  cmake --build build/fuzz -j"$JOBS" --target resp_parser_fuzz
  mkdir -p build/fuzz/resp-corpus
  build/fuzz/resp_parser_fuzz -seed=1 -max_total_time=30 -max_len=512 -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 build/fuzz/resp-corpus fuzz/corpus/resp
  # SIGKILL at random moments of sync and async puts and removes through the Python API:
  # every acknowledged write must survive and none may be torn (15 s on 2 loaded cores).
  stage "crash harness (200 SIGKILL cycles, fixed seed)"
  PMEM_IS_PMEM_FORCE=1 $PY bench/crash_harness.py --cycles 200 --seed 1 \
    --json "${TMPDIR:-/tmp}/nvmw-ci-crash-harness.json"
  # `nvmw serve` on the ASan + UBSan core: pipelines, garbage, half-sent and dropped
  # connections, slow readers and metrics scrapes, then SIGTERM mid-traffic and a restart
  # that reads every key back. A sanitizer report, a wrong reply or a lost write fails CI.
  stage "server chaos under ASan + UBSan (2 runs of 6 s, fixed seeds)"
  CXX="$CXX_" $PY bench/server_chaos.py --seeds 1 2 --seconds 6 --asan-core build/asan/py \
    --json "${TMPDIR:-/tmp}/nvmw-ci-server-chaos.json"
fi

stage "Python tests"
$PY -m pytest -q tests/python
stage "done"
