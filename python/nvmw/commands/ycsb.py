"""`nvmw ycsb`: run the YCSB-style generator against the middleware (or measure the
generator's own ceiling against a no-op engine with --capacity)."""
from __future__ import annotations

import argparse

from nvmw.commands import SUMMARIES
from nvmw.commands._args import add_pool_args, add_store_args, argv_of, float_in, fraction, int_in, nonneg_float, nonneg_int, pool_config, pool_path
from nvmw.commands._util import cores, plural, print_json
from nvmw.middleware import Middleware
from nvmw.workloads.traces import MAX_SCHEDULE_S
from nvmw.workloads.ycsb import OPERATIONS_MAX, RECORDS_MAX, YcsbConfig, measure_capacity, run_ycsb


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ycsb", help=SUMMARIES["ycsb"],
        description="Load RECORDS records, then run closed-loop client threads issuing reads, "
        "updates and inserts through the middleware; report client-side latency and throughput "
        "per operation type. --capacity instead measures the most ops/s this generator can "
        "issue (no-op engine: direct, no-control, middleware).")
    p.add_argument("--records", type=int_in(1, RECORDS_MAX), default=10_000,
                   help=f"records loaded first, at most {RECORDS_MAX:,}: about 300 B of memory and 1.2 us of loading "
                        "each with 128 B values on the memory engine (default %(default)s)")
    p.add_argument("--ops", type=int_in(0, OPERATIONS_MAX), default=0,
                   help=f"operations to run, over all threads, at most {OPERATIONS_MAX:,}: about 3 us each on the "
                        "memory engine with 16 threads, an insert adding a record (0: use --duration)")
    p.add_argument("--duration", type=float_in(0.0, MAX_SCHEDULE_S), default=None,
                   help="seconds to run (default 5 when --ops is not given; with both, first reached ends)")
    p.add_argument("--read-proportion", type=fraction, default=0.5,
                   help="fraction of operations that are reads, in [0, 1] (default %(default)s)")
    p.add_argument("--update-proportion", type=fraction, default=None,
                   help="fraction of operations that are updates, in [0, 1] (default: 1 - read - insert)")
    p.add_argument("--insert-proportion", type=fraction, default=0.0,
                   help="fraction of operations that insert a new record, in [0, 1] (default %(default)s)")
    p.add_argument("--distribution", choices=["uniform", "zipfian", "latest"], default="zipfian",
                   help="key distribution of reads and updates (default %(default)s)")
    p.add_argument("--value-size", type=int_in(1, 1 << 30), default=128, help="bytes per value (default %(default)s)")
    p.add_argument("--threads", type=int_in(1, 4096), default=16, help="client threads (default %(default)s)")
    p.add_argument("--target-rate", type=nonneg_float, default=0.0,
                   help="total ops/s, paced per thread (0: as fast as possible)")
    p.add_argument("--class", dest="request_class", choices=["interactive", "batch", "auto"],
                   default="interactive", help="class hint of every request (default %(default)s)")
    p.add_argument("--seed", type=nonneg_int, default=1,
                   help="seed of the clients' key and operation streams (default %(default)s)")
    p.add_argument("--interval", type=nonneg_float, default=0.0,
                   help="also report per-interval p99/throughput every this many seconds")
    add_store_args(p)
    add_pool_args(p, default=(2, 1))
    p.add_argument("--capacity", action="store_true",
                   help="measure the generator's ceiling against a no-op engine instead")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _config(args: argparse.Namespace):
    duration = args.duration if args.duration is not None else (0.0 if args.ops > 0 else 5.0)
    update = args.update_proportion
    if update is None:
        update = max(0.0, 1.0 - args.read_proportion - args.insert_proportion)
    return YcsbConfig(
        record_count=args.records, operation_count=args.ops, duration_s=duration,
        read_proportion=args.read_proportion, update_proportion=update,
        insert_proportion=args.insert_proportion, distribution=args.distribution,
        value_bytes=args.value_size, threads=args.threads, target_ops_per_s=args.target_rate,
        request_class=args.request_class, seed=args.seed, interval_s=args.interval)


def _print_table(result: dict) -> None:
    print(f"elapsed {result['elapsed_s']:.3f} s, loaded {plural(result['records_loaded'], 'record')} "
          f"in {result['load_s']:.3f} s")
    print(f"{'op':<8}{'ops':>10}{'ops/s':>12}{'mean us':>10}{'p50 us':>10}{'p99 us':>10}"
          f"{'p99.9 us':>10}{'max us':>10}{'errors':>8}")
    for name in ("read", "update", "insert", "all"):
        s = result[name]
        if s["ops"] == 0 and name != "all":
            continue
        print(f"{name:<8}{s['ops']:>10}{s['ops_per_s']:>12.0f}{s['mean_us']:>10.1f}"
              f"{s['p50_us']:>10.1f}{s['p99_us']:>10.1f}{s['p999_us']:>10.1f}{s['max_us']:>10.1f}"
              f"{s['errors']:>8}")
    if result.get("first_error"):
        print(f"first error: {result['first_error']}")


def run(args: argparse.Namespace) -> int:
    cfg = _config(args).validate()
    control, interactive_threads, batch_threads = pool_config(args)
    if args.capacity:
        try:
            result = measure_capacity(cfg, middleware_threads=interactive_threads)
        except ValueError as e:  # the controller's interactive threads beyond the middleware's bound
            raise ValueError(f"--capacity runs the middleware target with the controller's "
                             f"interactive threads: {e}") from None
        if args.json:
            print_json(result)
        else:
            for t in ("direct", "no-control", "middleware"):
                r = result[t]
                print(f"{t:<12}{r['ops_per_s']:>12.0f} ops/s  p50 {r['p50_us']:.1f} us  "
                      f"p99 {r['p99_us']:.1f} us")
            print(f"({result['threads']} client threads, {result['cores']} cores, no-op engine)")
        return 0

    with pool_path(args.engine, args.path, argv_of(args), "nvmw-ycsb-") as path:
        with Middleware(path, engine=args.engine, interactive_threads=interactive_threads,
                        batch_threads=batch_threads, window_s=args.window,
                        control=control, device=args.device) as mw:
            result = run_ycsb(mw, cfg)
            used = mw.threads  # the pool sizes in use (clamped to [1, max_threads]; 0, 0 without control)
    result["config"] = cfg.to_options()
    result["middleware"] = {"engine": args.engine, "control": control,
                            "interactive_threads": used[0],
                            "batch_threads": used[1], "window_s": args.window,
                            "device": args.device}
    result["cores"] = cores()
    if args.json:
        print_json(result)
    else:
        _print_table(result)
    return 0
