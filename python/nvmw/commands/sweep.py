"""`nvmw sweep`: the thesis's concurrency sweep (4.2 / Appendix B): no-control baseline
plus a grid of (interactive, batch) pool sizes, YCSB co-running with an SVD-like batch
replay; writes sweep.csv, summary.json and sweep.png."""
from __future__ import annotations

import argparse
import re
import sys

from nvmw.commands import SUMMARIES
from nvmw.commands._args import check_output_dir, float_in, fraction, int_in, nonneg_int, positive_float, window_seconds
from nvmw.commands._util import ensure_pmem_force, plural, print_json
from nvmw.lab.sweep import REPS_MAX, SweepConfig, quick_config, run_sweep
from nvmw.workloads.traces import MAX_SCHEDULE_S
from nvmw.workloads.ycsb import RECORDS_MAX, THREADS_MAX


def _int_list(text: str) -> tuple:
    if not re.fullmatch(r"-?[0-9]+(?:,-?[0-9]+)*", text):  # as int_in takes each: not "1_000" or "+5"
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    values = tuple(int(v) for v in text.split(","))
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"a pool size is given more than once in {text!r}")
    return values


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep", help=SUMMARIES["sweep"],
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--out", default="sweep-out", help="output directory (default %(default)s). The run's "
                   "files there (sweep.csv, summary.json, sweep.png) replace an earlier run's, and one it does not "
                   "write (sweep.png with --no-plot, summary.json after an early Ctrl-C) is removed, saying so; "
                   "other files are left alone")
    p.add_argument("--quick", action="store_true",
                   help="3x3 grid (I,B in 1,4,32), 2 reps of 2.5 s: under 3 minutes on 2 cores")
    p.add_argument("--grid-i", type=_int_list, default=None,
                   help="interactive pool sizes, e.g. 1,2,4 (default 1,2,4,8,16,32)")
    p.add_argument("--grid-b", type=_int_list, default=None,
                   help="batch pool sizes (default 1,2,4,8,16,24,32)")
    p.add_argument("--reps", type=int_in(1, REPS_MAX), default=None,
                   help=f"repetitions per configuration, at most {REPS_MAX}: a repetition is --duration s of each "
                        "configuration, so the default 43 at the bound take 6 hours (default 3)")
    p.add_argument("--duration", type=float_in(0.0, MAX_SCHEDULE_S), default=None,
                   help=f"seconds per repetition, at most {MAX_SCHEDULE_S:g} (the longest schedule of the core's "
                   "generators) (default 5)")
    p.add_argument("--clients", type=int_in(1, THREADS_MAX), default=None,
                   help=f"client threads of YCSB and of the replay each, at most {THREADS_MAX:,} (default 100)")
    p.add_argument("--ycsb-clients", type=int_in(1, THREADS_MAX), default=None,
                   help=f"client threads of YCSB alone, at most {THREADS_MAX:,}")
    p.add_argument("--batch-clients", type=int_in(1, THREADS_MAX), default=None,
                   help=f"client threads of the replay alone, at most {THREADS_MAX:,}")
    p.add_argument("--value-size", type=int_in(1, 1 << 30), default=None, help="YCSB value bytes (default 128)")
    p.add_argument("--read-proportion", type=fraction, default=None,
                   help="YCSB reads, rest updates (default 0.5)")
    p.add_argument("--distribution", choices=["zipfian", "uniform", "latest"], default=None,
                   help="YCSB key distribution (default zipfian)")
    p.add_argument("--records", type=int_in(1, RECORDS_MAX), default=None,
                   help=f"YCSB records, at most {RECORDS_MAX:,}: about 300 B of memory each with 128 B values "
                        "(default 10000)")
    p.add_argument("--device", choices=["none", "optane-1dimm", "optane-6dimm"], default=None,
                   help="emulated device profile (default none)")
    p.add_argument("--engine", choices=["memory", "pmem"], default=None,
                   help="engine (default memory; pmem pools live on /dev/shm)")
    p.add_argument("--window", type=window_seconds, default=None, help="middleware window, s (default 1)")
    p.add_argument("--interval", type=positive_float, default=None,
                   help="YCSB p99 sampling interval for the box plot, s (default 0.5)")
    p.add_argument("--batch-scale", type=positive_float, default=None,
                   help="factor on the SVD object sizes (default 0.01: 800 KB blocks)")
    p.add_argument("--batch-accel", type=positive_float, default=None,
                   help="SVD trace pace acceleration (default 1000: saturating)")
    p.add_argument("--seed", type=nonneg_int, default=None,
                   help="seed of the YCSB streams and the SVD trace (default 1)")
    p.add_argument("--no-plot", action="store_true", help="skip sweep.png")
    p.add_argument("--json", action="store_true", help="print the summary as JSON at the end")
    p.set_defaults(func=run)


def build_config(args: argparse.Namespace):
    over = {}
    for arg, name in (("grid_i", "grid_i"), ("grid_b", "grid_b"), ("reps", "reps"),
                      ("duration", "duration_s"), ("value_size", "value_bytes"),
                      ("read_proportion", "read_proportion"), ("distribution", "distribution"),
                      ("records", "record_count"), ("device", "device"), ("engine", "engine"),
                      ("window", "window_s"), ("interval", "interval_s"),
                      ("batch_scale", "batch_scale"), ("batch_accel", "batch_accel"),
                      ("seed", "seed")):
        value = getattr(args, arg)
        if value is not None:
            over[name] = value
    if args.clients is not None:
        over["ycsb_clients"] = over["batch_clients"] = args.clients
    if args.ycsb_clients is not None:
        over["ycsb_clients"] = args.ycsb_clients
    if args.batch_clients is not None:
        over["batch_clients"] = args.batch_clients
    over["out_dir"] = args.out
    over["plot"] = not args.no_plot
    cfg = quick_config(**over) if args.quick else SweepConfig(**over)
    return cfg.validate()


def _x(ratio) -> str:
    return "n/a" if ratio is None else f"{ratio:.3g}x"


def run(args: argparse.Namespace) -> int:
    check_output_dir(args.out, "--out", create=False)  # made when the results are written
    cfg = build_config(args)
    if cfg.engine == "pmem":
        ensure_pmem_force(args.argv)
    n = 1 + len(cfg.grid_i) * len(cfg.grid_b)
    print(f"sweep: {n} configurations x {plural(cfg.reps, 'rep')} x {cfg.duration_s:g} s, device {cfg.device}, "
          f"engine {cfg.engine}, {cfg.ycsb_clients}+{cfg.batch_clients} clients -> {cfg.out_dir}",
          file=sys.stderr, flush=True)
    summary = run_sweep(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    if args.json:
        print_json({k: v for k, v in summary.items() if k != "configs"})
    else:
        print(f"baseline p99 {summary['baseline_p99_us']:.1f} us, best {summary['best_p99_us']:.1f} us "
              f"at {summary['best_p99_config']} (improvement baseline/best: {_x(summary['p99_improvement_x'])})")
        print(f"baseline batch {summary['baseline_throughput']:.0f} ops/s, best "
              f"{summary['best_throughput']:.0f} ops/s at {summary['best_throughput_config']} "
              f"(improvement best/baseline: {_x(summary['throughput_improvement_x'])})")
        for kind, path in summary.get("files", {}).items():
            print(f"{kind}: {path}")
    return 0
