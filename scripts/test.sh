#!/usr/bin/env bash
# Runs every test: the C++ suites (GoogleTest via CTest), the middleware suites
# again under ThreadSanitizer, and the Python suite (pytest, warnings are errors).
# Expects scripts/setup.sh to have run.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
PY=${PYTHON:-python3}

echo "== C++ tests (RelWithDebInfo)"
cmake -S . -B build/tests -G Ninja -DNVMW_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/tests -j"$JOBS"
ctest --test-dir build/tests --output-on-failure -j"$JOBS"

echo "== C++ middleware tests under ThreadSanitizer"
cmake -S . -B build/tsan -G Ninja -DNVMW_BUILD_TESTS=ON -DNVMW_SANITIZE=thread \
  -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build/tsan -j"$JOBS"
# setarch -R: TSan's shadow mapping fails with the high ASLR entropy of newer kernels.
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  setarch "$(uname -m)" -R ctest --test-dir build/tsan --output-on-failure -L middleware -j"$JOBS"

echo "== Python tests"
$PY -m pytest -q tests/python
