"""`nvmw bench overhead|engine`: microbenchmarks of the core, printed as JSON.

Every figure that makes a claim is a ratio measured side by side in the same run
(the machine is shared and noisy): middleware vs raw thread hand-off vs direct engine.
"""
from __future__ import annotations

import argparse
import statistics

from nvmw.commands import SUMMARIES
from nvmw.commands._args import int_in
from nvmw import _core
from nvmw.commands._util import cores, ensure_pmem_force, print_json

#: The most sync round trips per series and async requests per mode of `bench overhead`
#: (about 4 us and 1.5 us of wall time each, measured on a 2-vCPU VM: minutes to half an
#: hour at the bounds), the most 128 B and 800 KB keys of `bench engine` (about 0.5 KB and
#: 1.6 MB of pool and memory each: 5 GB and 6.5 GB at the bounds) and its runs.
OPS_MAX = 100_000_000
ASYNC_OPS_MAX = 1_000_000_000
SMALL_KEYS_MAX = 10_000_000
LARGE_KEYS_MAX = 4096
RUNS_MAX = 100


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help=SUMMARIES["bench"],
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bsub = p.add_subparsers(dest="bench", metavar="BENCH")
    bsub.required = True

    o = bsub.add_parser("overhead", help="middleware round trip vs raw hand-off; async throughput",
                        description="Sync round-trip latency through the middleware (memory engine, "
                        "1 interactive worker) against a raw two-thread wake-up round trip and the "
                        "direct engine call, plus async ops/s, all measured in one run; the direct call and the "
                        "permit path again on a pmem pool on /dev/shm for a Get and a durable Put "
                        "(PMEM_IS_PMEM_FORCE=1 set automatically).")
    o.add_argument("--ops", type=int_in(1, OPS_MAX), default=200_000,
                   help=f"sync round trips measured in each series, at most {OPS_MAX:,}: about 4 us of wall time "
                        "each over all series (default %(default)s)")
    o.add_argument("--async-ops", type=int_in(1, ASYNC_OPS_MAX), default=2_000_000,
                   help=f"async requests submitted in each mode, at most {ASYNC_OPS_MAX:,}: about 1.5 us each over "
                        "both modes (default %(default)s)")
    o.add_argument("--json", action="store_true", help="print one JSON object (default: also JSON)")
    o.set_defaults(func=run_overhead)

    e = bsub.add_parser("engine", help="engine alone: 128 B and 800 KB put/get, 2 threads",
                        description="Engine throughput alone, pool on /dev/shm with "
                        "PMEM_IS_PMEM_FORCE=1 (set automatically): 100,000 keys of 128 B and 256 "
                        "keys of 800 KB, 2 threads.")
    e.add_argument("--engine", choices=["pmem", "memory"], default="pmem",
                   help="engine measured: pmem (a pool in --pool-dir) or memory (default %(default)s)")
    e.add_argument("--pool-dir", default="/dev/shm", help="directory of the temporary pool (default %(default)s)")
    e.add_argument("--threads", type=int_in(1, 4096), default=2,
                   help="threads issuing puts and gets at once (default %(default)s)")
    e.add_argument("--small-keys", type=int_in(1, SMALL_KEYS_MAX), default=100_000,
                   help=f"128 B keys, at most {SMALL_KEYS_MAX:,}: about 0.5 KB of pool and memory each "
                        "(default %(default)s)")
    e.add_argument("--large-keys", type=int_in(1, LARGE_KEYS_MAX), default=256,
                   help=f"800 KB keys, at most {LARGE_KEYS_MAX:,}: about 1.6 MB of pool (in --pool-dir) and memory "
                        "each (default %(default)s)")
    e.add_argument("--huge-pages", action=argparse.BooleanOptionalAction, default=True,
                   help="time the pmem pool once it is on 2 MiB pages, as a long-running engine has it "
                   "(default: on; --no-huge-pages keeps 4 KiB pages)")
    e.add_argument("--runs", type=int_in(1, RUNS_MAX), default=1,
                   help=f"repeat and report every run plus the median, at most {RUNS_MAX} runs (default %(default)s)")
    e.add_argument("--json", action="store_true", help="print one JSON object (default: also JSON)")
    e.set_defaults(func=run_engine)


def _median_of_runs(runs: list) -> dict:
    keys = runs[0].keys()
    return {k: statistics.median(r[k] for r in runs) for k in keys
            if all(isinstance(r[k], (int, float)) for r in runs)}


def run_overhead(args: argparse.Namespace) -> int:
    ensure_pmem_force(args.argv)  # the pmem series' pool is on /dev/shm
    result = dict(_core.run_overhead_bench(ops=args.ops, async_ops=args.async_ops))
    result.setdefault("cores", cores())
    print_json(result)
    return 0


def run_engine(args: argparse.Namespace) -> int:
    if args.engine == "pmem":
        ensure_pmem_force(args.argv)
    runs = []
    for _ in range(max(1, args.runs)):
        runs.append(dict(_core.run_engine_bench(
            engine=args.engine, pool_dir=args.pool_dir, threads=args.threads,
            small_keys=args.small_keys, large_keys=args.large_keys, huge_pages=args.huge_pages)))
    result = dict(runs[0]) if len(runs) == 1 else {"median": _median_of_runs(runs), "runs": runs}
    result["engine"] = args.engine
    result["cores"] = cores()
    print_json(result)
    return 0
