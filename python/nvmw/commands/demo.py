"""`nvmw demo`: the product end to end on embedded defaults, in one screen. First
the interference table: an interactive and a batch client pool co-located on one
persistent store, with no control, through the middleware, and the interactive pool
alone. Then every controller (the shipped Q-learning agent among them) on the default
phase set, thesis phases and contended ones, interleaved, ranked by the fraction of
windows that meet both SLAs with its 95 % interval."""
from __future__ import annotations

import argparse
import json
import os
import sys

from nvmw.commands import SUMMARIES
from nvmw.commands._args import check_output_dir, device_profile, float_in, int_in
from nvmw.commands._util import ensure_pmem_force, plural
from nvmw.lab.demo import calibration_note, demo_comparison, ranking_table
from nvmw.lab.interference import InterferenceConfig, format_table, plot, run_interference
from nvmw.lab.lineup import DEFAULT_LINEUP
from nvmw.lab.sweep import plot_sweep, quick_config, run_sweep
from nvmw.workloads.phases import DEFAULT_PHASES, describe_phase_set
from nvmw.workloads.traces import MAX_SCHEDULE_S

#: The longest phase segment of the controller comparison, windows of 0.1 s: 1,000 s. The
#: comparison runs every phase of the default set once per controller, so at the bound it
#: takes about 10 hours (6 phases x 6 controllers x 1,000 s); the default segment is 50.
SEGMENT_MAX = 10_000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help=SUMMARIES["demo"],
                       description=__doc__)
    p.add_argument("--duration", type=float_in(0.0, MAX_SCHEDULE_S), default=4.0,
                   help="seconds per scenario (default %(default)s)")
    p.add_argument("--clients", type=int_in(1, 4096), default=100,
                   help="clients per pool, at most 4096 as ycsb --threads (default %(default)s)")
    p.add_argument("--engine", choices=["pmem", "memory"], default="pmem",
                   help="engine: pmem (pools on /dev/shm) or memory (default %(default)s)")
    p.add_argument("--device", type=device_profile, default="optane-1dimm",
                   help="emulated device profile under the pool: optane-1dimm (default), optane-6dimm, or none "
                        "(tmpfs at DRAM speed: no device to contend for, only the CPU)")
    p.add_argument("-o", "--out", default="nvmw-demo", help="output directory (default %(default)s)")
    p.add_argument("--table-only", action="store_true", help="only the interference table")
    p.add_argument("--segment", type=int_in(1, SEGMENT_MAX), default=50,
                   help="windows of 0.1 s per phase segment in the controller comparison; every phase of "
                        f"the default set runs once; at most {SEGMENT_MAX:,} (default %(default)s)")
    p.add_argument("--sweep", action="store_true", help="also run the quick concurrency sweep (about 1.5 min)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_output_dir(args.out, "--out", create=False)  # made when the first results are written
    if args.engine == "pmem":
        ensure_pmem_force(args.argv)  # the demo's pool lives on tmpfs
    cfg = InterferenceConfig(duration_s=args.duration, interactive_clients=args.clients,
                             batch_clients=args.clients, engine=args.engine, device=args.device)
    print(f"nvmw demo: {args.clients} interactive clients (128 B, 50/50 get/put) + "
          f"{args.clients} batch clients (800 KB, 50/50), engine={args.engine}, "
          f"device={args.device}, {os.cpu_count()} cores", flush=True)
    result = run_interference(cfg, progress=lambda m: print("  " + m, file=sys.stderr, flush=True))
    print()
    print(format_table(result))
    rows = {r["scenario"]: r for r in result["rows"]}
    alone = rows["interactive alone"]["interactive_p99_us"]
    nocontrol = rows["co-located, no control"]
    best = min((r for r in result["rows"] if r["scenario"].startswith("co-located, nvmw")),
               key=lambda r: r["interactive_p99_us"])
    print(f"\nCo-location multiplies the interactive p99 by "
          f"{nocontrol['interactive_p99_us'] / max(alone, 1e-9):.0f}x without control; "
          f"{best['scenario'].split(', ')[1]} brings it to "
          f"{best['interactive_p99_us'] / max(alone, 1e-9):.1f}x the isolated p99 "
          f"({_versus(nocontrol['interactive_p99_us'], best['interactive_p99_us'])} no control) at "
          f"{best['batch_mb_per_s'] / max(nocontrol['batch_mb_per_s'], 1e-9):.2f}x the batch throughput.")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "interference.json"), "w") as f:
        json.dump(result, f, indent=2)
    png = plot(result, os.path.join(args.out, "interference.png"))
    print(f"wrote {args.out}/interference.json and {png}")
    if args.table_only:
        return 0
    if args.sweep:
        _sweep_step(args)
    _controller_step(args)
    return 0


def _versus(nocontrol_p99: float, controlled_p99: float) -> str:
    """'4.2x lower than' or '1.8x higher than': the controlled p99 against no control's."""
    ratio = nocontrol_p99 / max(controlled_p99, 1e-9)
    if ratio >= 1:
        return f"{ratio:.1f}x lower than"
    return f"{1 / max(ratio, 1e-9):.1f}x higher than"


def _sweep_step(args: argparse.Namespace) -> None:
    """The thesis 4.2 sweep in its --quick form: which (I, B) pools pay off."""
    print("\nQuick concurrency sweep (thesis 4.2 / Appendix B, --quick grid; about 1.5 min):", flush=True)
    summary = run_sweep(quick_config(device=args.device, engine=args.engine),
                        progress=lambda m: print("  " + m, file=sys.stderr, flush=True))
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump(summary, f, indent=2)
    png = os.path.join(args.out, "sweep.png")
    plot_sweep(summary, png)
    print(f"  baseline p99 {summary['baseline_p99_us']:.0f} µs -> best {summary['best_p99_us']:.0f} µs "
          f"({summary['best_p99_config']}, {summary['p99_improvement_x']:.1f}x lower); batch throughput "
          f"{summary['baseline_throughput']:.0f} -> {summary['best_throughput']:.0f} ops/s "
          f"({summary['throughput_improvement_x']:.1f}x)")
    print(f"  wrote {png}")


def _controller_step(args: argparse.Namespace) -> None:
    """Every controller on the default phase set, one segment per phase, interleaved."""
    steps = args.segment * len(DEFAULT_PHASES)
    minutes = steps * 0.1 * len(DEFAULT_LINEUP) / 60
    print(f"\nController comparison: phases {', '.join(map(str, DEFAULT_PHASES))} "
          f"({describe_phase_set()}), {plural(args.segment, 'window')} of 0.1 s each, emulated optane-1dimm, "
          f"calibrated SLA; about {minutes:.0f} min:", flush=True)
    result = demo_comparison(steps=steps, switch_every=args.segment, window_s=0.1,
                             out_dir=os.path.join(args.out, "controllers"), print_fn=None)
    print(ranking_table(result["summary"], result["run"]))
    note = calibration_note(result["summary"])
    if note:
        print(note)
    if result["skipped"]:
        print("skipped: " + ", ".join(result["skipped"]))
    print(f"wrote {args.out}/controllers/eval.md, eval.json and eval.png")
