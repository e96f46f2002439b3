"""Where the co-located interactive latency of `nvmw serve` goes: CPU per thread and process.

Runs the co-location measurement of `bench/serve_vs_redis.py` (b) -- interactive 128 B SETs
from redis-benchmark, alone and beside `--batch-clients` redis-py connections SETting 800 KB
values -- on redis-server and on one or more `nvmw serve` configurations side by side,
alternating rounds, and records for each interactive run:

  - CPU time (user, system) and run-queue wait (/proc/PID/task/TID/schedstat: time a
    runnable thread waited for a core) of every server thread, grouped by thread name
    (nvmw-io0 ..., nvmw-bio0 ..., nvmw-inter, nvmw-batch, the Python threads of the service), of the
    redis-benchmark process and of this script's batch-load threads (the load generators
    share the cores with the server);
  - the machine's CPU split from /proc/stat (user, system, softirq, idle);
  - for nvmw, the middleware's own windows (NVMW.STATS): interactive p99 from submit to
    completion inside the server, batch ops/s, queue lengths.

With `--perf SECONDS` a `perf record` of the server process runs in the middle of each
co-located interactive run of the first round (report: `perf report -i FILE --sort
comm,sym`).

    python bench/serve_colocation_profile.py --rounds 3 --out bench/results-serve-profile.json
    python bench/serve_colocation_profile.py --nvmw base= --nvmw split='--batch-io-threads 1'
    python bench/serve_colocation_profile.py --nvmw old='NVMW_DEV_CORE_DIR=/tmp/old-core' --nvmw new=

(leading NAME=VALUE words of a configuration are set in that server's environment: two
builds side by side.)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_vs_redis import BatchLoad, bench, need, results, start_nvmw, start_redis  # noqa: E402
from _report import emit  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def thread_times(pid: int) -> dict:
    """{tid: (comm, user_s, sys_s, run_s, wait_s)} of a process's threads."""
    out = {}
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{base}/{tid}/stat") as f:
                stat = f.read()
            with open(f"{base}/{tid}/schedstat") as f:
                run_ns, wait_ns, _ = f.read().split()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (comm, int(fields[11]) / TICK, int(fields[12]) / TICK, int(run_ns) / 1e9, int(wait_ns) / 1e9)
    return out


def group_of(comm: str, pid_comm: str) -> str:
    if comm.startswith("nvmw-io"):
        return "io"
    if comm.startswith("nvmw-bio"):
        return "batch_io"
    if comm in ("nvmw-inter", "nvmw-batch"):
        return comm[5:]
    return "other"


def delta(before: dict, after: dict, seconds: float, pid_comm: str) -> dict:
    """Per-group CPU in cores (user+sys over the interval) and run-queue wait per second."""
    groups: dict = {}
    for tid, (comm, u, s, r, w) in after.items():
        b = before.get(tid, (comm, 0.0, 0.0, 0.0, 0.0))
        g = groups.setdefault(group_of(comm, pid_comm), {"threads": 0, "cpu": 0.0, "user": 0.0, "sys": 0.0,
                                                          "run": 0.0, "wait": 0.0})
        du, ds, dr, dw = u - b[1], s - b[2], r - b[3], w - b[4]
        if dr <= 0 and du + ds <= 0:
            continue
        g["threads"] += 1
        g["user"] += du
        g["sys"] += ds
        g["cpu"] += du + ds
        g["run"] += dr
        g["wait"] += dw
    return {k: {"threads": v["threads"], "cores": round(v["run"] / seconds, 3),
                "user_share": round(v["user"] / v["cpu"], 2) if v["cpu"] else None,
                "runqueue_wait_per_s": round(v["wait"] / seconds, 3)} for k, v in sorted(groups.items())}


def proc_stat() -> list:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def stat_split(a: list, b: list) -> dict:
    d = [y - x for x, y in zip(a, b)]
    total = sum(d[:8]) or 1
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return {n: round(v / total, 3) for n, v in zip(names, d[:8])}


def nvmw_stats(port: int) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"*1\r\n$10\r\nNVMW.STATS\r\n")
        buf = b""
        while True:
            buf += s.recv(1 << 16)
            if b"\r\n" in buf:
                n = int(buf[1:buf.index(b"\r\n")])
                start = buf.index(b"\r\n") + 2
                if len(buf) >= start + n:
                    return json.loads(buf[start:start + n])


class WindowPoller:
    """Collects the middleware's closed windows (NVMW.STATS) while a run lasts."""

    def __init__(self, port: int):
        self.port, self.windows, self.halt = port, {}, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.halt.wait(0.25):
            try:
                w = nvmw_stats(self.port)["window"]
            except (OSError, ValueError, KeyError):
                continue
            self.windows[w["seq"]] = w

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.halt.set()
        self.thread.join()


def window_summary(windows: dict) -> dict:
    ws = [w for w in windows.values() if w["all"]["ops"] > 0]
    if not ws:
        return {}
    med = lambda xs: round(statistics.median(xs), 1)  # noqa: E731
    return {"windows": len(ws),
            "interactive_p99_us_median": med([w["interactive"]["p99_us"] for w in ws]),
            "interactive_p50_us_median": med([w["interactive"]["p50_us"] for w in ws]),
            "batch_p99_us_median": med([w["batch"]["p99_us"] for w in ws]),
            "batch_ops_per_s_median": med([w["batch"]["ops"] / w["duration_s"] for w in ws]),
            "interactive_ops_per_s_median": med([w["interactive"]["ops"] / w["duration_s"] for w in ws]),
            "batch_queue_mean_median": med([w["batch"].get("queue_mean", 0.0) for w in ws]),
            "interactive_queue_mean_median": med([w["interactive"].get("queue_mean", 0.0) for w in ws])}


def profiled_run(server_pid: int, port: int, inter_args: tuple, *, is_nvmw: bool, perf_s: float,
                 perf_file: str | None) -> dict:
    """One redis-benchmark interactive run with CPU accounting around it."""
    own = os.getpid()
    srv0, own0, st0, t0 = thread_times(server_pid), thread_times(own), proc_stat(), time.monotonic()
    proc = bench(port, *inter_args)
    perf = None
    if perf_s and perf_file:
        time.sleep(1.0)
        perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "997", "-g", "-p", str(server_pid),
                                 "-o", perf_file, "--", "sleep", str(perf_s)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bench_last = thread_times(proc.pid)
    while proc.poll() is None:  # the client's counters vanish with it: sample until its end
        bench_last = thread_times(proc.pid) or bench_last
        time.sleep(0.05)
    res = results(proc)["SET"]
    secs = time.monotonic() - t0
    srv1, own1, st1 = thread_times(server_pid), thread_times(own), proc_stat()
    if perf is not None:
        perf.wait()
    out = {"client": res, "seconds": round(secs, 2),
           "server_cpu": delta(srv0, srv1, secs, ""),
           "batch_load_generator_cpu": delta(own0, own1, secs, "")["other"] if own1 else {},
           "interactive_load_generator_cpu": delta({}, bench_last, secs, "")["other"] if bench_last else {},
           "machine": stat_split(st0, st1)}
    return out


def run_server(name: str, spec: str, d: str) -> tuple:
    if name == "redis":
        log = os.path.join(d, "redis.log")
        return start_redis(lambda port: [need("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
                                         "--save", "", "--appendonly", "no", "--dir", d, "--logfile", log], log)
    env = dict(os.environ, PMEM_IS_PMEM_FORCE="1")
    words = spec.split()
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):  # leading NAME=VALUE: environment
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    cmd = [sys.executable, "-m", "nvmw", "serve", "--port", "0", "--engine", "pmem", "--path",
           os.path.join(d, f"{name}.pool"), "--pool-mb", "2048", *words]
    return start_nvmw(cmd, env)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--inter-n", type=int, default=200_000)
    ap.add_argument("--inter-clients", type=int, default=4)
    ap.add_argument("--batch-clients", type=int, default=20)
    ap.add_argument("--big-keys", type=int, default=200)
    ap.add_argument("--nvmw", action="append", default=None, metavar="NAME=ARGS",
                    help="an nvmw serve configuration: name and extra `nvmw serve` arguments (repeatable; "
                    "default: base=--controller fixed:15,15)")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--perf", type=float, default=0.0, metavar="SECONDS")
    ap.add_argument("--perf-dir", default="/tmp")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    configs = dict(x.split("=", 1) for x in (args.nvmw or ["base=--controller fixed:15,15"]))
    if not args.no_redis:
        configs = {"redis": "", **configs}
    inter_args = ("-t", "set", "-n", str(args.inter_n), "-c", str(args.inter_clients), "-d", "128", "-r", "100000")
    load_before = os.getloadavg()
    rounds: dict = {n: [] for n in configs}
    with tempfile.TemporaryDirectory(prefix="nvmw-serve-prof-", dir="/dev/shm") as d:
        servers: dict = {}
        try:
            # Inside the try: if one server fails to start, those started before it stop.
            for n, spec in configs.items():
                servers[n] = run_server(n, spec, d)
            names = list(configs)
            for rnd in range(args.rounds):
                for n in (names if rnd % 2 == 0 else names[::-1]):
                    port, proc = servers[n]
                    is_nvmw = n != "redis"
                    alone = profiled_run(proc.pid, port, inter_args, is_nvmw=is_nvmw, perf_s=0, perf_file=None)
                    batch = BatchLoad(port, args.batch_clients, args.big_keys)
                    batch.start()
                    time.sleep(1.0)
                    c0 = batch.count()
                    perf_file = os.path.join(args.perf_dir, f"serve-prof-{n}.data") if rnd == 0 else None
                    poller = WindowPoller(port) if is_nvmw else None
                    if poller:
                        poller.__enter__()
                    together = profiled_run(proc.pid, port, inter_args, is_nvmw=is_nvmw, perf_s=args.perf,
                                            perf_file=perf_file)
                    if poller:
                        poller.__exit__()
                    sets = batch.count() - c0
                    errors = batch.stop()
                    together["batch_ops_per_s"] = round(sets / together["seconds"], 1)
                    together["batch_errors"] = errors
                    if poller:
                        together["nvmw_windows"] = window_summary(poller.windows)
                    rounds[n].append({"alone": alone, "colocated": together})
                    print(f"round {rnd} {n}: alone {alone['client']['ops_per_s']:.0f} ops/s p99 "
                          f"{alone['client']['p99_ms']} ms; co-located {together['client']['ops_per_s']:.0f} ops/s "
                          f"p99 {together['client']['p99_ms']} ms, batch {together['batch_ops_per_s']} SET/s",
                          file=sys.stderr, flush=True)
        finally:
            for _, proc in servers.values():
                proc.send_signal(signal.SIGTERM)
            for _, proc in servers.values():
                proc.wait(timeout=300)
    summary = {}
    for n, rs in rounds.items():
        m = sorted(rs, key=lambda r: r["colocated"]["client"]["p99_ms"])[(len(rs) - 1) // 2]
        a, t = m["alone"]["client"], m["colocated"]["client"]
        summary[n] = {"alone_ops_per_s": a["ops_per_s"], "alone_p99_ms": a["p99_ms"],
                      "colocated_ops_per_s": t["ops_per_s"], "colocated_p99_ms": t["p99_ms"],
                      "p99_ratio": round(t["p99_ms"] / a["p99_ms"], 2) if a["p99_ms"] else None,
                      "ops_ratio": round(t["ops_per_s"] / a["ops_per_s"], 3),
                      "batch_ops_per_s": m["colocated"]["batch_ops_per_s"],
                      "p99_ms_rounds": [r["colocated"]["client"]["p99_ms"] for r in rs],
                      "batch_ops_per_s_rounds": [r["colocated"]["batch_ops_per_s"] for r in rs]}
    report = {"machine": {"cores": os.cpu_count(), "load_avg_1_5_15_before": [round(x, 2) for x in load_before],
                          "load_avg_1_5_15_after": [round(x, 2) for x in os.getloadavg()]},
              "configs": configs,
              "config": {k: v for k, v in vars(args).items() if k not in ("nvmw", "out")},
              "summary": summary, "rounds": rounds}
    emit(report, args.out, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
