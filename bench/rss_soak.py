"""RSS soak: a long mixed run through the middleware (interactive YCSB 128 B 50/50,
batch YCSB 800 KB 50/50, plus async submits), sampling the process's resident memory.

A leak or an unbounded queue shows as RssAnon (heap) growing after warm-up. The pool on
/dev/shm is file-backed shared memory (RssShmem) and is reported apart.

    python bench/rss_soak.py --minutes 10 --json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time


def rss_kb() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "RssAnon", "RssFile", "RssShmem")):
                k, v = line.split(":")
                out[k] = int(v.split()[0])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--warmup-s", type=float, default=60.0, help="excluded from the growth figure")
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=32, help="clients per pool")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("PMEM_IS_PMEM_FORCE", "1")

    import nvmw
    from nvmw.workloads.ycsb import YcsbConfig, YcsbWorkload

    duration = args.minutes * 60
    samples = []
    with tempfile.TemporaryDirectory(prefix="nvmw-soak-", dir="/dev/shm") as d:
        with nvmw.Middleware(os.path.join(d, "soak.pool"), interactive_threads=2, batch_threads=1,
                             pool_size=2 << 30, queue_capacity=4096) as mw:
            inter = YcsbWorkload(mw, YcsbConfig(record_count=20_000, duration_s=duration, value_bytes=128,
                                                threads=args.clients, request_class="interactive", load_threads=2))
            batch = YcsbWorkload(mw, YcsbConfig(record_count=128, duration_s=duration, value_bytes=800 * 1024,
                                                threads=args.clients, request_class="batch",
                                                distribution="uniform", load_threads=2))
            inter.load()
            batch.load()
            stop = threading.Event()
            async_done = [0, 0]  # completed, overloaded

            def async_client():
                # Bounded pipelining: at most 256 outstanding futures.
                pending = []
                i = 0
                while not stop.is_set():
                    try:
                        pending.append(mw.submit("put" if i % 2 else "get", f"a{i % 5000}", b"q" * 256, cls="interactive"))
                    except nvmw.errors.OverloadedError:
                        async_done[1] += 1
                    i += 1
                    if len(pending) >= 256:
                        for f in pending:
                            f.result(timeout=60)
                        async_done[0] += len(pending)
                        pending.clear()
                for f in pending:
                    f.result(timeout=60)
                async_done[0] += len(pending)

            t_async = threading.Thread(target=async_client)
            inter.start()
            batch.start()
            t_async.start()
            t0 = time.monotonic()
            while time.monotonic() - t0 < duration:
                time.sleep(args.sample_s)
                s = rss_kb()
                s["t_s"] = round(time.monotonic() - t0, 1)
                st = mw.get_stats()
                s["ops_per_s"] = st["all"]["ops_per_s"]
                samples.append(s)
                print(f"t={s['t_s']:6.0f}s RSS={s['VmRSS']/1024:8.1f} MB anon={s['RssAnon']/1024:8.1f} MB "
                      f"shmem={s['RssShmem']/1024:8.1f} MB ops/s={s['ops_per_s']:.0f}", file=sys.stderr, flush=True)
            stop.set()
            inter.stop()
            batch.stop()
            r_inter = inter.join()
            r_batch = batch.join()
            t_async.join()
    steady = [s for s in samples if s["t_s"] >= args.warmup_s] or samples

    def growth(key):
        first = steady[0][key]
        return {"first_kb": first, "last_kb": steady[-1][key], "max_kb": max(s[key] for s in steady),
                "growth_pct": 100.0 * (steady[-1][key] - first) / max(first, 1),
                "max_over_first_pct": 100.0 * (max(s[key] for s in steady) - first) / max(first, 1)}

    result = {"minutes": args.minutes, "warmup_s": args.warmup_s, "clients_per_pool": args.clients,
              "rss": growth("VmRSS"), "rss_anon": growth("RssAnon"), "rss_shmem": growth("RssShmem"),
              "interactive_ops": r_inter["all"]["ops"], "batch_ops": r_batch["all"]["ops"],
              "async_ops": async_done[0], "async_overloaded": async_done[1],
              "samples": len(samples), "cores": os.cpu_count()}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
