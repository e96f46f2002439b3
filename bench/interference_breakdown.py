"""Where the interference test's interactive tail comes from.

Runs scenarios of the `nvmw demo` interference test (100 interactive clients, 128 B,
50/50 get/put, beside 100 batch clients, 800 KB; pmem engine on /dev/shm in an emulated
device) and, for the interactive run of each, reports beside the client-side latency:

* the middleware's own window statistics for the interactive class (submit to engine
  return: FIFO wait plus service, without the caller's wake-up afterwards);
* per thread group (by thread name: ycsb-inter / ycsb-batch clients, nvmw-inter /
  nvmw-batch workers, nvmw-devtimer, the rest) the CPU time, the time spent runnable
  but waiting for a core (/proc/.../schedstat), and voluntary / involuntary context
  switches, per interactive operation where that helps.

Usage (pool on tmpfs: PMEM_IS_PMEM_FORCE=1):
    PMEM_IS_PMEM_FORCE=1 python3 bench/interference_breakdown.py \
        --scenario none --scenario 2,1,19 --scenario 2,1,19,spin_ns=0 --json out.json

A scenario is "alone", "none" (co-located, no control) or "I,B,NICE[,key=value...]"
where key=value are extra `nvmw.Middleware` options (spin_ns, execution), or dev_spin=N: the
emulated device with at most N threads busy-waiting at once (its default: half the cores).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import subprocess
import threading
import time

from nvmw import _core
from nvmw.devices import load_profile
from nvmw.middleware import Middleware, open_engine
from nvmw.workloads.ycsb import YcsbConfig, YcsbWorkload

GROUPS = ("ycsb-inter", "ycsb-batch", "nvmw-inter", "nvmw-batch", "nvmw-devtimer")


def _threads() -> dict:
    """{tid: (group, run_ns, wait_ns, slices, voluntary, involuntary)} for this process."""
    out = {}
    base = "/proc/self/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"{base}/{tid}/schedstat") as f:
                run_ns, wait_ns, slices = (int(x) for x in f.read().split())
            vol = invol = 0
            with open(f"{base}/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol = int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol = int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue  # the thread ended meanwhile
        group = comm if comm in GROUPS else "other"
        out[tid] = (group, run_ns, wait_ns, slices, vol, invol)
    return out


def _machine() -> list:
    """/proc/stat's aggregate cpu line in seconds: user nice system idle iowait irq softirq steal."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:9]
    hz = os.sysconf("SC_CLK_TCK")
    return [int(x) / hz for x in fields]


def _machine_delta(before: list, after: list, own_cpu_s: float, wall_s: float) -> dict:
    """Where the machine's CPU time went: this process, everything else, idle, stolen."""
    d = [a - b for a, b in zip(after, before)]
    busy = d[0] + d[1] + d[2] + d[5] + d[6]
    cores = os.cpu_count() or 1
    return {"available_core_s": wall_s * cores, "this_process_core_s": own_cpu_s,
            "other_busy_core_s": max(0.0, busy - own_cpu_s), "niced_core_s": d[1],
            "idle_core_s": d[3] + d[4], "steal_core_s": d[7]}


def _delta(before: dict, after: dict, wall_s: float) -> dict:
    groups: dict = {}
    for tid, a in after.items():
        b = before.get(tid, (a[0], 0, 0, 0, 0, 0))
        g = groups.setdefault(a[0], {"threads": 0, "cpu_s": 0.0, "runnable_wait_s": 0.0,
                                     "slices": 0, "voluntary": 0, "involuntary": 0})
        g["threads"] += 1
        g["cpu_s"] += (a[1] - b[1]) / 1e9
        g["runnable_wait_s"] += (a[2] - b[2]) / 1e9
        g["slices"] += a[3] - b[3]
        g["voluntary"] += a[4] - b[4]
        g["involuntary"] += a[5] - b[5]
    for g in groups.values():
        g["cpu_share_of_machine"] = g["cpu_s"] / (wall_s * (os.cpu_count() or 1))
        g["mean_wait_per_slice_us"] = 1e6 * g["runnable_wait_s"] / max(1, g["slices"])
        # Mean number of the group's threads that were runnable but had no core.
        g["mean_waiting_threads"] = g["runnable_wait_s"] / wall_s
    return groups


def parse_scenario(text: str) -> dict:
    if text == "alone":
        return {"name": "interactive alone", "control": False, "batch": False}
    if text == "none":
        return {"name": "co-located, no control", "control": False, "batch": True}
    parts = text.split(",")
    i, b, nice = int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
    extra = {}
    for kv in parts[3:]:
        k, v = kv.split("=", 1)
        extra[k] = v if k == "execution" else int(v)
    name = f"co-located, nvmw I{i}/B{b}" + (f" nice{nice}" if nice else "")
    name += "".join(f" {k}={v}" for k, v in extra.items())
    return {"name": name, "control": True, "batch": True, "threads": (i, b), "batch_nice": nice,
            "extra": extra}


def run(sc: dict, args) -> dict:
    extra = dict(sc.get("extra", {}))
    dev_spin = extra.pop("dev_spin", None)
    with tempfile.TemporaryDirectory(prefix="nvmw-breakdown-", dir="/dev/shm") as d:
        engine, device = "pmem", args.device
        if dev_spin is not None:
            # The emulated device with this many threads allowed to busy-wait at once.
            base = open_engine("pmem", os.path.join(d, "demo.pool"), pool_size=1 << 30)
            engine = _core.emulate_device(base, load_profile(args.device), max_spinning_threads=dev_spin)
            device = None
        with Middleware(os.path.join(d, "demo.pool"), engine=engine, control=sc["control"],
                        device=device, interactive_threads=sc.get("threads", (1, 1))[0],
                        batch_threads=sc.get("threads", (1, 1))[1], pool_size=1 << 30,
                        window_s=args.window, batch_nice=sc.get("batch_nice", 0),
                        **extra) as mw:
            inter = YcsbWorkload(mw, YcsbConfig(
                record_count=10_000, duration_s=args.duration, read_proportion=0.5,
                update_proportion=0.5, distribution="zipfian", value_bytes=128,
                threads=args.clients, load_threads=4, request_class="interactive", seed=1))
            batch = None
            if sc["batch"]:
                batch = YcsbWorkload(mw, YcsbConfig(
                    record_count=256, duration_s=args.duration, read_proportion=0.5,
                    update_proportion=0.5, distribution="uniform", value_bytes=800 * 1024,
                    threads=args.clients, load_threads=2, request_class="batch", seed=2))
            inter.load()
            if batch is not None:
                batch.load()
                batch.start()
            windows = []
            done = threading.Event()

            def collect():
                seq = mw.get_stats()["seq"]
                while not done.is_set():
                    try:
                        w = mw.wait_for_window(seq, timeout_s=args.window * 2)
                    except Exception:  # noqa: BLE001 - timeout or shutdown ends the collection
                        continue
                    seq = w["seq"]
                    windows.append(w)

            collector = threading.Thread(target=collect, daemon=True)
            collector.start()
            # Thread snapshots while every client thread is alive (they start and end
            # with the run), a margin inside each end.
            margin = min(0.5, args.duration / 8)
            inter.start()
            time.sleep(margin)
            t0 = time.perf_counter()
            before = _threads()
            m_before = _machine()
            perf = None
            span = str(max(0.5, args.duration - 3 * margin))
            if args.perf and args.switches:
                # Every switch-out of an interactive worker, with its call chain: what it
                # blocks on (prev_state S) or is preempted in (R).
                # --switches=blocked: only the switch-outs where a worker went to sleep, with
                # DWARF call chains (the libraries have no frame pointers).
                blocked = args.switches == "blocked"
                perf = subprocess.Popen(["perf", "record", "-q", "-e", "sched:sched_switch",
                                         "--call-graph", "dwarf,16384" if blocked else "fp",
                                         "--filter", 'prev_comm == "nvmw-inter"' + (" && prev_state == 1" if blocked else ""),
                                         "-p", str(os.getpid()),
                                         "-o", args.perf + "." + str(len(args.done)), "--", "sleep", span])
            elif args.perf:
                perf = subprocess.Popen(["perf", "record", "-q", "-g", "-F", "1999", "-p", str(os.getpid()),
                                         "-o", args.perf + "." + str(len(args.done)), "--", "sleep", span])
            elif args.count:
                # Counting only (no sampling): syscalls and switches of the whole process.
                perf = subprocess.Popen(["perf", "stat", "-x", ",", "-p", str(os.getpid()), "-e",
                                         "syscalls:sys_enter_sched_yield,syscalls:sys_enter_futex,"
                                         "context-switches,cpu-migrations", "--", "sleep", span],
                                        stderr=subprocess.PIPE, text=True)
            time.sleep(max(0.1, args.duration - 2 * margin))
            after = _threads()
            m_after = _machine()
            wall = time.perf_counter() - t0
            r_inter = inter.join()
            counts = {}
            if perf is not None:
                _, err = perf.communicate()
                for line in (err or "").splitlines():
                    f = line.split(",")
                    if len(f) > 3 and f[0].strip().isdigit():
                        counts[f[2]] = int(f[0]) / float(span)  # per second

            args.done.append(sc["name"])
            done.set()
            r_batch = None
            if batch is not None:
                batch.stop()
                r_batch = batch.join()
            collector.join(timeout=5)
    a = r_inter["all"]
    # Windows wholly inside the interactive run (the first and last may straddle it).
    inside = [w for w in windows if w["interactive"]["ops"] > 0][1:-1] or windows
    mw_i = [{k: w["interactive"][k] for k in ("ops_per_s", "p50_us", "p99_us", "mean_us", "max_us",
                                               "queue_len_mean")} for w in inside]
    ops = a["ops_per_s"] * wall  # interactive operations within the snapshot interval
    groups = _delta(before, after, wall)
    ci = groups.get("ycsb-inter", {})
    row = {
        "scenario": sc["name"],
        "client": {k: a[k] for k in ("ops", "ops_per_s", "p50_us", "p99_us", "p999_us", "mean_us", "max_us")},
        "middleware_windows_interactive": mw_i,
        "batch_mb_per_s": (r_batch["all"]["ops_per_s"] * 800 * 1024 / 1e6) if r_batch else 0.0,
        "threads": groups,
        "machine": _machine_delta(m_before, m_after, sum(g["cpu_s"] for g in groups.values()), wall),
        "per_interactive_op": {
            "client_runnable_wait_us": 1e6 * ci.get("runnable_wait_s", 0) / max(1, ops),
            "client_cpu_us": 1e6 * ci.get("cpu_s", 0) / max(1, ops),
            "client_voluntary_switches": ci.get("voluntary", 0) / max(1, ops),
        },
        "perf_counts_per_s": counts,
        "closed_loop_mean_us": 1e6 * args.clients / max(1e-9, a["ops_per_s"]),
        "wall_s": wall,
        "load_after": os.getloadavg()[0],
    }
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", action="append", required=True)
    p.add_argument("--duration", type=float, default=4.0)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--device", default="optane-1dimm")
    p.add_argument("--window", type=float, default=1.0)
    p.add_argument("--json")
    p.add_argument("--count", action="store_true",
                   help="also count sched_yield/futex syscalls and context switches (perf stat)")
    p.add_argument("--switches", nargs="?", const="all", choices=["all", "blocked"],
                   help="with --perf: record the interactive workers' context switches instead of samples "
                        "(blocked: only where they went to sleep, with DWARF call chains)")
    p.add_argument("--perf", help="also `perf record -g` each interactive run into PERF.<n>")
    args = p.parse_args(argv)
    args.done = []
    rows = []
    for text in args.scenario:
        sc = parse_scenario(text)
        row = run(sc, args)
        rows.append(row)
        c, po = row["client"], row["per_interactive_op"]
        mwp99 = [round(w["p99_us"]) for w in row["middleware_windows_interactive"]]
        print(f"{row['scenario']}: client p50 {c['p50_us']:.0f} p99 {c['p99_us']:.0f} mean {c['mean_us']:.0f} us, "
              f"{c['ops_per_s'] / 1e3:.0f} k ops/s; middleware p99 per window {mwp99}; "
              f"client runnable wait/op {po['client_runnable_wait_us']:.0f} us, cpu/op {po['client_cpu_us']:.1f} us, "
              f"batch {row['batch_mb_per_s']:.0f} MB/s, load {row['load_after']:.1f}", flush=True)
        for g, v in sorted(row["threads"].items()):
            print(f"    {g:<14} n={v['threads']:<4} cpu {v['cpu_s']:.2f} s ({100 * v['cpu_share_of_machine']:.0f} %), "
                  f"runnable-wait {v['runnable_wait_s']:.2f} s (mean {v['mean_waiting_threads']:.1f} threads), slices {v['slices']}, "
                  f"wait/slice {v['mean_wait_per_slice_us']:.0f} us, vol {v['voluntary']}, invol {v['involuntary']}",
                  flush=True)
        m = row["machine"]
        print(f"    machine: {m['available_core_s']:.2f} core-s, this process {m['this_process_core_s']:.2f}, "
              f"other processes and kernel {m['other_busy_core_s']:.2f} (niced {m['niced_core_s']:.2f}, "
              f"includes our nice-19 batch worker), idle {m['idle_core_s']:.2f}, steal {m['steal_core_s']:.2f}",
              flush=True)
        if row["perf_counts_per_s"]:
            print("    per interactive op: " + ", ".join(
                f"{k.split(':')[-1]} {v / max(1.0, c['ops_per_s']):.2f}" for k, v in row["perf_counts_per_s"].items()),
                flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv, "cpu_count": os.cpu_count(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
