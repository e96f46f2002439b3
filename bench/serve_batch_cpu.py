"""CPU time per 800 KB SET of `nvmw serve`'s batch path, by thread, under a batch load alone.

Starts `nvmw serve` (pmem pool on /dev/shm, PMEM_IS_PMEM_FORCE=1, as bench/serve_vs_redis.py
does), runs `--clients` redis-py connections SETting 800 KB values (the batch load of
serve_vs_redis.py's co-location test) and, over `--seconds` of it, reads each server
thread's CPU time (/proc/PID/task/TID/stat) and this script's own (the load generator),
and reports them per acknowledged SET, grouped by thread name: nvmw-bio0... (batch loops:
the socket receive), nvmw-batch (batch workers: checksum, copy into the pool, publish).
With `--syscalls` it also counts system calls and context switches per SET of the batch
loop and of the batch workers (`perf stat -t`); with `--perf FILE` it records a profile of
the server over the same seconds (`perf report -i FILE --sort comm,dso`). Each `--runs`
run starts a new server; extra arguments after `--` go to `nvmw serve`.

    python bench/serve_batch_cpu.py --runs 2 --syscalls -- --batch-nice 0
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_vs_redis import BatchLoad, start_nvmw  # noqa: E402
from _report import emit  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict:
    """{tid: (comm, cpu seconds)} of a process's threads."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[tid] = (comm, (int(fields[11]) + int(fields[12])) / TICK)
        except OSError:
            pass
    return out


def by_group(threads: dict) -> dict:
    groups: dict = {}
    for comm, cpu in threads.values():
        key = comm if comm.startswith("nvmw-") else "service (Python)"
        key = "nvmw-bio (batch loops)" if key.startswith("nvmw-bio") else key
        groups[key] = groups.get(key, 0.0) + cpu
    return groups


def perf_stat(tids: list, seconds: float) -> subprocess.Popen:
    return subprocess.Popen(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter,context-switches",
                             "-t", ",".join(tids), "--", "sleep", str(seconds)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def one_run(args, serve_args: list) -> dict:
    with tempfile.TemporaryDirectory(prefix="nvmw-batch-cpu-", dir="/dev/shm") as d:
        cmd = [sys.executable, "-m", "nvmw", "serve", "--port", "0", "--engine", "pmem", "--path",
               os.path.join(d, "serve.pool"), "--pool-mb", "2048", *serve_args]
        port, proc = start_nvmw(cmd, dict(os.environ, PMEM_IS_PMEM_FORCE="1"))
        try:
            load = BatchLoad(port, args.clients, args.keys)
            load.start()
            time.sleep(2.0)  # every connection on the batch loop, the pool warm
            threads = thread_cpu(proc.pid)
            stats = {}
            if args.syscalls:
                for name in ("nvmw-bio0", "nvmw-batch"):
                    tids = [t for t, (comm, _) in threads.items() if comm == name]
                    if tids:
                        stats[name] = perf_stat(tids, args.seconds)
            rec = None
            if args.perf:
                rec = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "999", "-g", "-p", str(proc.pid),
                                        "-o", args.perf, "--", "sleep", str(args.seconds)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            c0, w0, own0 = load.count(), time.monotonic(), time.process_time()
            time.sleep(args.seconds)
            sets, wall, own = load.count() - c0, time.monotonic() - w0, time.process_time() - own0
            after = thread_cpu(proc.pid)
            for p in list(stats.values()) + ([rec] if rec else []):
                p.wait()
            errors = load.stop()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=300)
    before_g, after_g = by_group(threads), by_group(after)
    us = {k: round((v - before_g.get(k, 0.0)) / sets * 1e6, 1) for k, v in after_g.items()} if sets else {}
    out = {"sets_per_s": round(sets / wall, 1), "sets": sets, "errors": errors,
           "server_cpu_us_per_set": us, "load_generator_cpu_us_per_set": round(own / sets * 1e6, 1) if sets else None,
           "load_avg_1m_end": round(os.getloadavg()[0], 2)}
    per_set = {}
    for name, p in stats.items():
        for line in p.stderr.read().strip().splitlines():
            f = line.split(",")
            if len(f) > 2 and sets:
                try:
                    per_set.setdefault(name, {})[f[2]] = round(float(f[0]) / sets, 2)
                except ValueError:
                    pass
    if per_set:
        out["per_set"] = per_set
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--syscalls", action="store_true", help="system calls and context switches per SET (perf stat)")
    ap.add_argument("--perf", default=None, metavar="FILE", help="perf record of the server (first run)")
    ap.add_argument("--out", default=None)
    ap.add_argument("serve_args", nargs="*", help="after --: more `nvmw serve` arguments")
    args = ap.parse_args()
    load_before = os.getloadavg()
    runs = []
    for i in range(args.runs):
        runs.append(one_run(args, args.serve_args))
        if i == 0:
            args.perf = None
        print(f"run {i + 1}/{args.runs}: " + json.dumps(runs[-1]), file=sys.stderr, flush=True)
    report = {"machine": {"cores": os.cpu_count(), "load_avg_1_5_15_before": [round(x, 2) for x in load_before],
                          "load_avg_1_5_15_after": [round(x, 2) for x in os.getloadavg()]},
              "config": {"serve_args": args.serve_args, "clients": args.clients, "seconds": args.seconds,
                         "value_bytes": 800 * 1024},
              "runs": runs}
    emit(report, args.out, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
