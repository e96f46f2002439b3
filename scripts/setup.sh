#!/usr/bin/env bash
# Installs everything nvmw needs on a fresh Debian machine (bookworm): system
# packages through apt, Python build and runtime dependencies through pip, then
# the nvmw package itself (C++ core + nanobind module, built by scikit-build-core).
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# libpmemobj-dev: PMDK, the persistent engine. pkg-config/cmake/ninja/g++: the build.
# libgtest-dev: C++ tests. clang + libclang-rt-14-dev: fuzz targets (libFuzzer).
# libxxhash-dev: XXH3, the pmem engine's per-entry checksum (header-only use).
# redis-server, redis-tools (redis-cli, redis-benchmark), nutcracker (twemproxy), prometheus
# (promtool): the `nvmw serve` tests and bench/serve_vs_redis.py run them against the service.
APT_PKGS=(libpmemobj-dev pkg-config cmake ninja-build g++ libgtest-dev clang libclang-rt-14-dev
  libxxhash-dev redis-server redis-tools nutcracker prometheus)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "setup: installing system packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
echo "setup: installing Python dependencies"
$PY -m pip install -q "scikit-build-core>=0.9" "nanobind>=2.0" \
  "numpy>=1.24" "matplotlib>=3.7" "gymnasium>=1.0" "scikit-learn>=1.3" "scipy>=1.10" "joblib>=1.3" \
  "tqdm>=4.60" "prometheus_client>=0.17" "pytest>=7" "redis>=5" "import-linter>=2.0" "ray[default]>=2.9"
echo "setup: building and installing nvmw (C++ core + Python package)"
# No build isolation: reuse the build directory so a rebuild is incremental.
$PY -m pip install -q --no-build-isolation --no-deps .
$PY -c "import nvmw, sys; print('setup: nvmw', nvmw.__version__, 'ready (python', sys.version.split()[0] + ')')"
