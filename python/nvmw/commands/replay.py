"""`nvmw replay`: replay a trace file open-loop against a fresh middleware and print the
client-side results (latency counted from each request's scheduled time)."""
from __future__ import annotations

import argparse

from nvmw.commands import SUMMARIES
from nvmw.commands._args import float_in, fraction, int_in, nonneg_float, nonneg_int, positive_float, positive_int
from nvmw.commands._args import TRACE_FORMAT_HELP, add_pool_args, add_store_args, argv_of, pool_config, pool_path
from nvmw.commands._util import UsageError, cores, plural, print_json
from nvmw.middleware import Middleware
from nvmw.workloads import traces


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay", help=SUMMARIES["replay"],
        description="Client threads issue the trace's records at their scheduled times "
        "(offsets / --accel); latency counts from the scheduled time, so falling behind shows. "
        "Keys the trace reads are preloaded first. Filters, then transforms, then replay.")
    p.add_argument("file", help="trace file (Azure Functions Blob CSV or native CSV)")
    p.add_argument("--format", choices=["azure", "native"], default=None, help=TRACE_FORMAT_HELP)
    p.add_argument("--skip-malformed", action="store_true", help="drop and count malformed rows")
    p.add_argument("--class", dest="cls", choices=["interactive", "batch", "auto"], default="interactive",
                   help="class hint of every request (default %(default)s)")
    p.add_argument("--threads", type=int_in(1, 4096), default=16, help="client threads (default %(default)s)")
    p.add_argument("--accel", type=positive_float, default=1.0, help="pace acceleration (default %(default)s)")
    p.add_argument("--loop", action="store_true", help="start over at the end (needs --duration)")
    p.add_argument("--duration", type=float_in(0.0, traces.MAX_SCHEDULE_S, strict=False), default=0.0,
                   help="stop issuing after this many seconds (default 0: at the trace's end)")
    f = p.add_argument_group("filters and transforms")
    f.add_argument("--start", type=nonneg_float, default=None, help="keep records at or after this offset, s")
    f.add_argument("--end", type=nonneg_float, default=None, help="keep records before this offset, s")
    f.add_argument("--min-size", type=nonneg_int, default=None,
                   help="keep records of at least this many bytes (default: all)")
    f.add_argument("--max-size", type=nonneg_int, default=None,
                   help="keep records of at most this many bytes (default: all)")
    f.add_argument("--max-records", type=positive_int, default=None,
                   help="then keep only the first this many records (default: all)")
    f.add_argument("--fixed-size", type=int_in(1, 1 << 30), default=None, help="every request gets this many bytes")
    f.add_argument("--write-ratio", type=fraction, default=None, help="exact fraction of writes")
    f.add_argument("--key-space", type=positive_int, default=None, help="map keys onto this many keys")
    p.add_argument("--seed", type=nonneg_int, default=0,
                   help="seed of the --write-ratio and --key-space draws and of the replay (default %(default)s)")
    m = p.add_argument_group("middleware")
    add_store_args(m)
    add_pool_args(m, default=(4, 4))
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.loop and args.duration == 0:
        raise UsageError("--loop needs --duration (a replay that starts over ends only at it)")
    control, interactive_threads, batch_threads = pool_config(args)
    opts = traces.replay_options(threads=args.threads, cls=args.cls, accel=args.accel,
                                 loop=args.loop, duration_s=args.duration, seed=args.seed)
    trace = traces.read_trace(args.file, args.format or traces.sniff_format(args.file),
                              skip_malformed=args.skip_malformed)
    trace = traces.shape(trace, start_s=args.start, end_s=args.end, min_bytes=args.min_size,
                         max_bytes=args.max_size, max_records=args.max_records,
                         fixed_bytes=args.fixed_size, write_ratio=args.write_ratio,
                         key_space=args.key_space, seed=args.seed)
    if len(trace) == 0:
        raise ValueError("no records left after filtering")
    with pool_path(args.engine, args.path, argv_of(args), "nvmw-replay-") as path:
        with Middleware(path, engine=args.engine, interactive_threads=interactive_threads,
                        batch_threads=batch_threads, window_s=args.window,
                        control=control, device=args.device) as mw:
            result = traces.replay(trace, mw.core, **opts)
            used = mw.threads  # the pool sizes in use (clamped to [1, max_threads]; 0, 0 without control)
    result["trace"] = traces.trace_stats(trace)
    result["options"] = opts
    result["middleware"] = {"engine": args.engine, "device": args.device, "control": control,
                            "interactive_threads": used[0],
                            "batch_threads": used[1], "window_s": args.window}
    result["cores"] = cores()
    if args.json:
        print_json(result)
        return 0
    print(f"replayed {result['all']['ops']} of {plural(len(trace), 'record')} x{plural(result['passes'], 'pass', 'passes')} "
          f"in {result['elapsed_s']:.3f} s (offered {result['offered_ops_per_s']:.0f} ops/s, "
          f"preloaded {plural(result['preloaded_keys'], 'key')})")
    print(f"{'op':<7}{'ops':>9}{'p50 us':>11}{'p99 us':>11}{'p99.9 us':>11}{'max us':>11}"
          f"{'svc p99':>11}{'errors':>8}{'notfound':>9}")
    for name in ("read", "write", "all"):
        s = result[name]
        print(f"{name:<7}{s['ops']:>9}{s['p50_us']:>11.1f}{s['p99_us']:>11.1f}{s['p999_us']:>11.1f}"
              f"{s['max_us']:>11.1f}{s['service_p99_us']:>11.1f}{s['errors']:>8}{s['not_found']:>9}")
    print(f"throughput {result['ops_per_s']:.0f} ops/s, {result['bytes_per_s'] / 1e6:.1f} MB/s; "
          f"issue lag p99 {result['lag_p99_us']:.0f} us ({cores()} cores)")
    return 0
