"""`nvmw sim`: the simulator of the middleware (virtual time, fitted to a real sweep). `fit`
fits its free parameters to a real sweep saved by `nvmw calibrate --sweep-out` and reports
how well it reproduces it; `check` reports the same for an existing parameter file
(`--plot PNG` also draws real vs simulated p99 per configuration); `run` prints simulated
windows of one phase under one controller."""
from __future__ import annotations

import argparse
import json

from nvmw.commands import SUMMARIES
from nvmw.commands._args import (Distinct, check_apart, check_output_file, int_in, make_parent, nonneg_int,
                                 phase_number, window_seconds)
from nvmw.commands._args import add_pool_args, pool_config
from nvmw.commands._util import report_stream
from nvmw.lab.calibration import load_sweep
from nvmw.lab.lineup import deprecated
from nvmw.lab.simfit import (FIT_EVALS_MAX, FITTABLE, SWEEP_WINDOWS_MAX, compare, fit, per_config, plot_check,
                             simulate_sweep)
from nvmw.lab.phase_run import simulate_phase
from nvmw.rl.sim import FIT_NAMES, load_params, save_params
from nvmw.rl.simrun import RUN_WINDOWS_MAX

_SWEEP_WINDOWS_HELP = f"simulated windows per configuration, at most {SWEEP_WINDOWS_MAX:,} (default %(default)s)"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help=SUMMARIES["sim"],
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ssub = p.add_subparsers(dest="sim_command", metavar="ACTION")
    ssub.required = True

    q = ssub.add_parser("fit", help="fit the parameters to a real sweep (writes JSON)")
    q.add_argument("sweep", nargs="+", action=Distinct, help="sweep rows from nvmw calibrate --sweep-out (rows with "
                   "0 interactive and 0 batch threads are no-control runs)")
    q.add_argument("--out", required=True, help="parameter file to write")
    q.add_argument("--device", default=None, help="device profile (default: the sweep's)")
    q.add_argument("--window", type=window_seconds, default=None, help="window, s (default: the sweep's)")
    q.add_argument("--windows", type=int_in(1, SWEEP_WINDOWS_MAX), default=8, help=_SWEEP_WINDOWS_HELP)
    q.add_argument("--max-evals", type=int_in(1, FIT_EVALS_MAX), default=150,
                   help=f"Nelder-Mead evaluations, at most {FIT_EVALS_MAX:,} (default %(default)s)")
    q.add_argument("--start", default=None, help="starting parameters (file or name; default: built-in)")
    q.add_argument("--free", nargs="+", action=Distinct, default=list(FIT_NAMES), choices=FITTABLE, metavar="NAME",
                   help="parameters to fit (default %(default)s; also spin_us); the others keep --start's values")
    q.add_argument("--seed", type=nonneg_int, default=0, help="seed of the simulations (default %(default)s)")
    q.set_defaults(func=_fit)

    q = ssub.add_parser("check", help="how well a parameter file reproduces a real sweep (JSON)")
    q.add_argument("sweep", nargs="+", action=Distinct,
                   help="sweep rows from nvmw calibrate --sweep-out or --no-control-out")
    q.add_argument("--params", default=None, help="parameter file or name (default: the shipped fit)")
    q.add_argument("--device", default=None, help="device profile (default: the sweep's)")
    q.add_argument("--window", type=window_seconds, default=None, help="window, s (default: the sweep's)")
    q.add_argument("--windows", type=int_in(1, SWEEP_WINDOWS_MAX), default=8, help=_SWEEP_WINDOWS_HELP)
    q.add_argument("--seed", type=nonneg_int, default=1, help="seed of the simulation (default %(default)s)")
    q.add_argument("--exact", action="store_true", help="simulate every window whole (no fast-forward)")
    q.add_argument("--plot", default=None, help="also write a PNG of real vs simulated p99")
    q.set_defaults(func=_check)

    q = ssub.add_parser("run", help="simulated windows of one phase under one controller (JSON lines)")
    q.add_argument("--phase", type=phase_number, default=1,
                   help="phase number (1-4 the thesis's, 5-6 contended; default %(default)s)")
    add_pool_args(q, default=(15, 15), any_controller=True)
    q.add_argument("--threads", type=int_in(1, 4096), nargs=2, default=None, metavar=("I", "B"), help=argparse.SUPPRESS)
    q.add_argument("--windows", type=int_in(1, RUN_WINDOWS_MAX), default=10,
                   help=f"simulated windows, at most {RUN_WINDOWS_MAX:,} (one output line and about 0.5 KB of "
                        "memory each) (default %(default)s)")
    q.add_argument("--window", type=window_seconds, default=0.1, help="simulated window, s (default %(default)s)")
    q.add_argument("--device", default="optane-1dimm",
                   help="device profile simulated (default %(default)s); without --params, its shipped fit")
    q.add_argument("--params", default=None,
                   help="parameter file or name (default: the shipped fit for --device)")
    q.add_argument("--seed", type=nonneg_int, default=0, help="seed of the simulation (default %(default)s)")
    q.add_argument("--exact", action="store_true",
                   help="simulate every window whole instead of fast-forwarding its steady rest (docs/sim.md)")
    q.set_defaults(func=_run)


def _fit(args) -> int:
    check_output_file(args.out, "--out")
    check_apart([("--out", args.out)], [("SWEEP", s) for s in args.sweep] + [("--start", args.start)])
    rows, run = load_sweep(args.sweep)
    run = run or {}
    device = args.device or run.get("device", "optane-1dimm")
    window = args.window or float(run.get("window_s", 0.1))
    start = load_params(args.start, device) if args.start else None
    res = fit(rows, window_s=window, device=device, cores=float(run.get("cores", 2)), start=start,
              windows=args.windows, max_evals=args.max_evals, seed=args.seed, progress=True, names=args.free)
    res["run"]["sweep"] = run
    make_parent(args.out)
    save_params(res, args.out)
    print(json.dumps({"out": args.out, "params": res["params"], "overall": res["fit"]["overall"]}, indent=2),
          file=report_stream(args.out))
    return 0


def _check(args) -> int:
    check_output_file(args.plot, "--plot")
    check_apart([("--plot", args.plot)], [("SWEEP", s) for s in args.sweep] + [("--params", args.params)])
    rows, run = load_sweep(args.sweep)
    run = run or {}
    device = args.device or run.get("device", "optane-1dimm")
    window = args.window or float(run.get("window_s", 0.1))
    params = load_params(args.params, device)
    real = per_config(rows)
    sim = simulate_sweep(real, params, window_s=window, windows=args.windows, device=device, seed=args.seed,
                         exact=args.exact)
    report = compare(real, sim)
    if args.plot:
        make_parent(args.plot)
        plot_check(real, sim, args.plot, title=f"{device}, window {window} s")
        report["plot"] = args.plot
    print(json.dumps(report, indent=2), file=report_stream(args.plot))
    return 0


def _run(args) -> int:
    if args.threads is not None:
        i, b = args.threads
        deprecated(f"--threads {i} {b}", f"--controller fixed:{i},{b}")
        args.controller = args.controller or f"fixed:{i},{b}"
    controller = args.controller
    if controller is None:
        control, i, b = pool_config(args)
        controller = f"fixed:{i},{b}" if control else "none"
    simulate_phase(args.phase, windows=args.windows, controller=controller,
                   window_s=args.window, device=args.device, params=args.params, seed=args.seed,
                   on_window=lambda row: print(json.dumps(row)), exact=args.exact)
    return 0
