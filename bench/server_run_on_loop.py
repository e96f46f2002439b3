"""The server's two execution choices side by side in one run: `run_on_loop=True` (an
interactive request with a free permit runs on the io thread) and `run_on_loop=False`
(every request is handed to a worker of its class), docs/server.md ("Design").

For each setting, in alternating order over `--rounds` rounds (background load on a
shared machine falls on both), a fresh pmem pool on /dev/shm (PMEM_IS_PMEM_FORCE=1), a
middleware with 4 interactive and 2 batch threads and one server (one io thread):

  alone:  redis-benchmark 128 B SETs, 10 clients, 20000 requests (interactive by size);
  beside: the same while 8 clients SET 800 KB values (batch by size) without pause.

Prints JSON: per setting the median round's ops/s, p50 and p99 (ms) for both, every
round, and the machine (cores, load average, versions). Needs redis-benchmark.

    python bench/server_run_on_loop.py --rounds 3
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import nvmw
from nvmw import _core

VALUE_BIG = 800 * 1024


def redis_benchmark(port: int, *args: str) -> list[str]:
    tool = shutil.which("redis-benchmark")
    if tool is None:
        sys.exit("redis-benchmark is not installed: scripts/setup.sh installs it")
    return [tool, "-p", str(port), *args]


def small_sets(port: int) -> dict:
    out = subprocess.run(redis_benchmark(port, "-t", "set", "-d", "128", "-c", "10", "-n", "20000",
                                         "-r", "10000", "--csv"),
                         capture_output=True, text=True, check=True).stdout
    row = list(csv.DictReader(io.StringIO(out)))[-1]
    return {"ops_per_s": float(row["rps"]), "p50_ms": float(row["p50_latency_ms"]),
            "p99_ms": float(row["p99_latency_ms"])}


def one_round(run_on_loop: bool) -> dict:
    fd, path = tempfile.mkstemp(dir="/dev/shm", prefix="nvmw-run-on-loop-")
    os.close(fd)
    os.unlink(path)
    mw = nvmw.Middleware(path, engine="pmem", interactive_threads=4, batch_threads=2,
                         pool_size=2 << 30)
    srv = _core.Server(mw.core, port=0, run_on_loop=run_on_loop)
    srv.start()
    try:
        alone = small_sets(srv.port)
        loader = subprocess.Popen(redis_benchmark(srv.port, "-t", "set", "-d", str(VALUE_BIG), "-c", "8",
                                                  "-n", "1000000", "-r", "200", "-q"),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # the batch load is running before the measurement starts
        beside = small_sets(srv.port)
        loader.kill()
        loader.wait()
    finally:
        srv.stop()
        mw.core.stop()
        os.unlink(path)
    return {"alone": alone, "beside_800KB_sets": beside}


def median_round(rounds: list[dict]) -> dict:
    out = {}
    for case in ("alone", "beside_800KB_sets"):
        out[case] = {k: statistics.median(r[case][k] for r in rounds)
                     for k in ("ops_per_s", "p50_ms", "p99_ms")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.rounds < 1:
        sys.exit("--rounds must be >= 1")
    os.environ["PMEM_IS_PMEM_FORCE"] = "1"
    rounds: dict[str, list[dict]] = {"run_on_loop=True": [], "run_on_loop=False": []}
    for r in range(args.rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        for setting in order:
            rounds[f"run_on_loop={setting}"].append(one_round(setting))
    print(json.dumps({
        "median": {k: median_round(v) for k, v in rounds.items()},
        "rounds": rounds,
        "machine": {"cores": os.cpu_count(), "loadavg": os.getloadavg(), "python": platform.python_version(),
                    "redis_benchmark": subprocess.run(redis_benchmark(0, "--version")[0:1] + ["--version"],
                                                      capture_output=True, text=True).stdout.strip()},
    }, indent=1))


if __name__ == "__main__":
    main()
