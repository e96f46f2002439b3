#!/usr/bin/env bash
# Developer build of the extension module into build/<name>-py, without touching
# the installed package (several people can build side by side). Then run:
#   NVMW_DEV_CORE_DIR=build/<name>-py PYTHONPATH=python python3 -m pytest tests/python/...
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: scripts/dev-core.sh NAME}
cmake -S . -B "build/$name-py" -G Ninja -DNVMW_BUILD_PYTHON=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$PWD/build/$name-py" >/dev/null
cmake --build "build/$name-py" --target _core -j2
echo "export NVMW_DEV_CORE_DIR=$PWD/build/$name-py PYTHONPATH=$PWD/python"
