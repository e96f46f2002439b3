"""`nvmw run-phase N`: run one of the thesis's RL phases (Appendix C) co-located on a
fresh middleware under a controller and print one line of statistics per window."""
from __future__ import annotations

import argparse

from nvmw.commands import SUMMARIES
from nvmw.commands._args import float_in, nonneg_int, positive_float
from nvmw.commands._args import add_store_args, argv_of, controller_help, controller_spelling, pool_path
from nvmw.commands._util import UsageError, cores, ensure_pmem_force, plural, print_json
from nvmw.control.sla import load_spec
from nvmw.lab.lineup import ControllerContext, make_controller
from nvmw.rl.simrun import RUN_S_MAX, RUN_WINDOWS_MAX, run_windows
from nvmw.workloads.phases import load_phase


def _phase_arg(text: str) -> str:
    """argparse type of PHASE: a phase file, or a number in decimal digits 0-9. A word of
    other digits ("١", ARABIC-INDIC DIGIT ONE, or "²"; str.isdigit() is true for them) is a
    usage error here, as load_phase refuses it."""
    if text.isdigit() and not text.isascii():
        raise argparse.ArgumentTypeError(f"{text!r} is not a phase number (decimal digits 0-9) or a phase file")
    return text


_phase_arg.__name__ = "phase"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run-phase", help=SUMMARIES["run-phase"],
        description="Co-run a phase's interactive (Azure-like) and batch (SVD-like) replays "
        "on a fresh middleware; each window prints threads, ops/s, interactive p99, batch "
        "throughput and queue lengths. Controllers: none (no-control mode), fixed:I,B, aimd, "
        "gradient, q-learning, oracle, or any kind registered with "
        "nvmw.lab.lineup.register_controller.")
    p.add_argument("phase", type=_phase_arg,
                   help="phase number (1-4 the thesis's, 5-6 contended) or a phase TOML file")
    p.add_argument("--duration", type=float_in(0.0, RUN_S_MAX), default=30.0,
                   help=f"seconds, rounded to whole windows (at least one); at most {RUN_S_MAX:g} (a day) and "
                        f"{RUN_WINDOWS_MAX:,} windows of --window (default %(default)s)")
    p.add_argument("--controller", default="fixed:10,10", type=controller_spelling(),
                   help=controller_help("%(default)s"))
    p.add_argument("--sla", default=None, help="SLA spec judging each window for the controller "
                   "(default: the calibrated spec for --device)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed of the run (same seed, same traces)")
    p.add_argument("--rate-scale", type=positive_float, default=1.0,
                   help="multiply both classes' offered rates (default %(default)s)")
    p.add_argument("--capacity", default=None, help="capacity file the contended phases are scaled to "
                   "(from `nvmw calibrate --capacity`; default $NVMW_CAPACITY, else the shipped optane-1dimm). "
                   "Refused for a phase paced in its file (1-4, or a phase file without offered_write_bw, "
                   "offered_read_bw or capacity_rate), which it would not change")
    add_store_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.set_defaults(func=run)


def _print_row(row: dict) -> None:
    print(f"{row['seq']:>5} {row['interactive_threads']:>3}/{row['batch_threads']:<3}"
          f"{row['ops_per_s']:>10.0f}{row['interactive_p99_us']:>12.0f}{row['batch_ops_per_s']:>10.0f}"
          f"{row['batch_bytes_per_s'] / 1e6:>10.1f}{row['interactive_queue']:>8}{row['batch_queue']:>8}",
          flush=True)


def run(args: argparse.Namespace) -> int:
    from nvmw.lab.phase_run import run_phase  # Gymnasium: imported when a phase runs, not for --help

    try:
        run_windows(args.duration, args.window)
    except ValueError as e:
        raise UsageError(f"--duration {args.duration:g} with --window {args.window:g}: {e}") from None
    phase = load_phase(args.phase, capacity=args.capacity)
    if args.capacity is not None and not phase.contended:
        raise ValueError(f"--capacity {args.capacity}: phase {phase.number} is paced in its file, not "
                         "relative to capacity (the contended phases 5-6 are), so --capacity would not "
                         "change it")
    sla = load_spec(args.sla, device=args.device)
    controller = make_controller(args.controller, ControllerContext(sla=sla, device=args.device,
                                                                     phases=(phase.number,)))
    if args.engine == "pmem" and args.path is None:
        # Before the header: the command runs again in a new process for its temporary pool.
        ensure_pmem_force(argv_of(args))
    if not args.json:
        print(f"phase {phase.number}: {phase.description}")
        if phase.scaling:
            print(f"scaled: {phase.scaling}")
        print(f"controller {getattr(controller, 'name', args.controller)}, engine {args.engine}, device {args.device}, window {args.window} s, "
              f"{cores()} cores")
        print(f"{'win':>5} {'I/B':<7}{'ops/s':>10}{'I p99 us':>12}{'B ops/s':>10}{'B MB/s':>10}"
              f"{'I queue':>8}{'B queue':>8}")
    with pool_path(args.engine, args.path, argv_of(args), "nvmw-phase-") as path:
        result = run_phase(phase, duration_s=args.duration, controller=controller,
                           window_s=args.window, engine=args.engine, path=path,
                           device=None if args.device == "none" else args.device, sla=sla,
                           seed=args.seed, rate_scale=args.rate_scale,
                           on_window=None if args.json else _print_row)
    result["cores"] = cores()
    if args.json:
        print_json(result)
    else:
        for cls, r in result["replay"].items():
            print(f"{cls}: {plural(r['all']['ops'], 'request')}, {r['ops_per_s']:.0f} ops/s "
                  f"(offered {r['offered_ops_per_s']:.0f}), p99 from schedule {r['all']['p99_us']:.0f} us, "
                  f"errors {r['errors']}")
    return 0
