"""Cost of the pmem engine's per-entry checksum, side by side in one run: get and put of
128 B and 800 KB values on two pools that differ only in ``verify_checksums``, plus raw
XXH3-64 and CRC32C over the same sizes. Runs the C++ tool built with the tests
(``checksum_cost_tool``) and writes its JSON with the machine facts.

    python3 bench/checksum_cost.py [--build build/tests] [--rounds 9] [--out bench/results-checksum-cost.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from _report import emit


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build/tests", help="CMake build dir with NVMW_BUILD_TESTS=ON")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args()
    tool = os.path.join(args.build, "checksum_cost_tool")
    if not os.access(tool, os.X_OK):
        print(f"{tool} is missing: cmake --build {args.build} --target checksum_cost_tool",
              file=sys.stderr)
        return 1
    env = dict(os.environ, PMEM_IS_PMEM_FORCE="1")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="nvmw-checksum-", dir=base) as d:
        out = subprocess.run([tool, d, str(args.rounds)], env=env, check=True,
                             capture_output=True, text=True).stdout
    result = json.loads(out)
    result["machine_cores"] = os.cpu_count()
    result["load1_after"] = round(os.getloadavg()[0], 2)
    result["threads"] = 1
    result["pool"] = "tmpfs /dev/shm, PMEM_IS_PMEM_FORCE=1, prefault"
    emit(result, args.out, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
