"""`nvmw calibrate`: sweep fixed thread configurations per phase on this machine and derive
an SLA spec (goals + scaling bounds for the reward) and the per-phase best configuration
(the oracle controller's table).

`nvmw calibrate --capacity [--device D] [--out FILE]` instead measures this machine's
capacity (the device profile's peak write/read bandwidth and the middleware's interactive
capacity) and prints it as JSON (and writes it to FILE): the numbers the contended phases
are scaled to (name the file with `--capacity FILE` or $NVMW_CAPACITY)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

from nvmw import jsonfiles
from nvmw.commands import SUMMARIES
from nvmw.commands._args import (Distinct, check_apart, check_beside, check_output_file, int_in, make_parent,
                                 open_fraction, phase_number)
from nvmw.commands._args import add_env_args, argv_of, env_from_args, float_in
from nvmw.commands._util import UsageError, is_stream, report_stream
from nvmw.lab.calibration import (CONFIRM_RUNS_MAX, SWEEP_WINDOWS_MAX, calibrate, confirm_env, load_confirmation, load_sweep, no_control_windows,
                                  promise_configs, save_oracle, save_sweep, sweep_env)
from nvmw.lab.capacity import CLIENTS_MAX, DEFAULT_CLIENTS, measure_capacity
from nvmw.lab.runs import run_header
from nvmw.middleware import DEFAULT_MAX_THREADS
from nvmw.workloads.phases import DEFAULT_PHASES
from nvmw.workloads.traces import MAX_SCHEDULE_S


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help=SUMMARIES["calibrate"],
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_env_args(p, steps=False)
    p.add_argument("--grid", type=int_in(1, DEFAULT_MAX_THREADS), nargs="+", action=Distinct,
                   default=[1, 2, 4, 8, 16, 32],
                   help="thread counts swept for each pool (default %(default)s)")
    p.add_argument("--windows", type=int_in(1, SWEEP_WINDOWS_MAX), default=5,
                   help=f"measured windows per configuration, at most {SWEEP_WINDOWS_MAX:,}: a window is one --window "
                        "and a row of about 0.5 KB, so the default grid at the bound is 216,000 windows, 6 hours of "
                        "0.1 s windows (default %(default)s)")
    p.add_argument("--phases", type=phase_number, nargs="+", action=Distinct, default=list(DEFAULT_PHASES),
                   help="phases swept (default %(default)s)")
    p.add_argument("--rule", choices=("attain", "quantile"), default="attain",
                   help="attain (default): the tightest goals the best configuration of every phase "
                   "meets on --attain of its windows; quantile: the --quantile of the configurations' "
                   "medians (the first calibration)")
    p.add_argument("--attain", type=open_fraction, default=0.9,
                   help="rule attain: fraction of windows the goals must hold (default %(default)s)")
    p.add_argument("--confirm-windows", type=int_in(0, SWEEP_WINDOWS_MAX), default=30,
                   help="rule attain: after the sweep, re-measure each phase's chosen configuration for "
                   f"this many windows per round, at most {SWEEP_WINDOWS_MAX:,}, and take its promise from those "
                   "windows, not from the sweep windows that chose it (default %(default)s; 0: promise from the sweep)")
    p.add_argument("--confirm-runs", type=int_in(1, CONFIRM_RUNS_MAX), default=4,
                   help="rounds over the phases of that re-measurement, each on another stretch of the "
                   f"phase's workload, at most {CONFIRM_RUNS_MAX}: a round is --confirm-windows windows of every "
                   "phase (default %(default)s)")
    p.add_argument("--quantile", type=open_fraction, default=0.25,
                   help="rule quantile: goal quantile across configurations (default %(default)s)")
    p.add_argument("--out", default=None, help="SLA spec TOML to write (with --capacity: the capacity JSON)")
    p.add_argument("--capacity", action="store_true", help="measure this machine's capacity instead of "
                   "sweeping (device bandwidth and interactive capacity; JSON)")
    p.add_argument("--capacity-clients", type=int_in(1, CLIENTS_MAX), nargs="+", action=Distinct,
                   default=list(DEFAULT_CLIENTS),
                   help=f"--capacity: closed-loop client counts tried, each at most {CLIENTS_MAX:,} client threads, "
                        "as ycsb --threads (default %(default)s)")
    p.add_argument("--capacity-duration", type=float_in(0.0, MAX_SCHEDULE_S), default=2.0,
                   help=f"--capacity: seconds per client count, at most {MAX_SCHEDULE_S:g} (the longest schedule "
                   "of the core's generators) (default %(default)s)")
    p.add_argument("--oracle-out", default=None, help="oracle table JSON to write (default: next to --out, "
                   "NAME.oracle.json for NAME.toml; needed when --out is not a regular file, such as /dev/stdout)")
    p.add_argument("--sweep-out", default=None, help="also write the raw sweep rows (JSON)")
    p.add_argument("--no-control-windows", type=int_in(0, SWEEP_WINDOWS_MAX), default=0,
                   help=f"also measure this many no-control windows per phase, at most {SWEEP_WINDOWS_MAX:,} (after "
                   "the sweep; needs --no-control-out): the baseline `nvmw sim fit` and `nvmw sim check` compare "
                   "against")
    p.add_argument("--no-control-out", default=None, help="where to write the no-control windows (JSON, "
                   "read like a sweep: rows with 0 interactive and 0 batch threads)")
    p.add_argument("--from-sweep", default=None, help="derive from sweep rows saved by --sweep-out "
                   "instead of running a sweep")
    p.set_defaults(func=run)


def _capacity(args) -> int:
    out = measure_capacity(args.device, engine=args.engine, clients=args.capacity_clients,
                           duration_s=args.capacity_duration,
                           command=f"nvmw calibrate --capacity --device {args.device} --engine {args.engine} "
                                   f"--capacity-clients {' '.join(map(str, args.capacity_clients))} "
                                   f"--capacity-duration {args.capacity_duration:g}",
                           progress=lambda m: print("  " + m, file=sys.stderr, flush=True))
    text = json.dumps(out, indent=2)
    if args.out:
        make_parent(args.out)
        with jsonfiles.open_output(args.out, encoding="utf-8") as fh:
            fh.write(text + "\n")
    print(text, file=report_stream(args.out))
    return 0


def _measured(args) -> dict:
    """When and under what machine load a sweep ran, and the command that ran it."""
    return {"command": "nvmw " + " ".join(argv_of(args)),
            "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def _notes(args, header: dict, rows: list, confirm: list) -> str:
    """How the spec was derived, from the data it was derived from: with --from-sweep the
    grid, window counts and confirmation rounds are the file's, not this command's defaults."""
    per_config = Counter((r["phase"], r["interactive_threads"], r["batch_threads"]) for r in rows)
    grid = sorted({r["interactive_threads"] for r in rows} | {r["batch_threads"] for r in rows})
    windows = sorted(set(per_config.values()))
    windows_text = "-".join(str(w) for w in sorted({windows[0], windows[-1]})) if windows else "0"
    if args.rule != "attain":
        rule = f"rule quantile {args.quantile}"
    elif args.confirm_windows and confirm:
        conf = header.get("confirmation", {})
        rounds = f"{conf['runs']} x {conf['windows']}" if "runs" in conf and "windows" in conf else str(len(confirm))
        rule = f"rule attain {args.attain}, promises from {rounds} confirmation windows"
    else:
        rule = f"rule attain {args.attain}, promises in-sample"
    return (f"nvmw calibrate on {header.get('cpu', 'an unknown CPU')}: {header.get('cores', '?')} cores, "
            f"env {args.env}, device {header.get('device', 'unknown')}, "
            f"window {header.get('window_s', args.window)} s, grid {grid}, "
            f"{windows_text} windows/config, {rule}")


def run(args) -> int:
    for opt in ("out", "oracle_out", "sweep_out", "no_control_out"):
        check_output_file(getattr(args, opt), "--" + opt.replace("_", "-"))
    if not args.capacity and args.oracle_out is None:
        check_beside(args.out, "--out", "the oracle table (NAME.oracle.json)", "--oracle-out")
    oracle_out = args.oracle_out or (os.path.splitext(args.out)[0] + ".oracle.json" if args.out and not args.capacity
                                     else None)
    # --sweep-out may name --from-sweep: that is read whole, then written again with its confirmation.
    from_sweep = None if args.sweep_out and args.from_sweep and \
        os.path.realpath(args.sweep_out) == os.path.realpath(args.from_sweep) else args.from_sweep
    check_apart([("--out", args.out), ("--oracle-out", oracle_out), ("--sweep-out", args.sweep_out),
                 ("--no-control-out", args.no_control_out)],
                [("--from-sweep", from_sweep), ("--sla", args.sla), ("--sim-params", args.sim_params)])
    if args.capacity:
        return _capacity(args)
    if not args.out:
        raise UsageError("--out is required (the SLA spec to write)")
    if args.no_control_windows and not args.no_control_out:
        raise UsageError("--no-control-windows needs --no-control-out")
    t0 = time.monotonic()
    confirm: list = []
    if args.from_sweep:
        rows, header = load_sweep(args.from_sweep)
        confirm = load_confirmation(args.from_sweep)
        if header is None:
            env = env_from_args(args)
            header = run_header(args.env, env)
            env.close()
    else:
        env = env_from_args(args)
        env.max_episode_steps = 10**9  # the sweep is one long episode per phase
        try:
            rows = sweep_env(env, phases=args.phases, grid=args.grid, windows=args.windows, seed=args.seed,
                             progress=True)
            header = run_header(args.env, env, phases=args.phases, **_measured(args))
        finally:
            env.close()
        # Kept at once (minutes of measurement), and again at the end with the confirmation;
        # a stream (--sweep-out /dev/stdout) takes one document, so it gets only the second.
        if args.sweep_out and not is_stream(args.sweep_out):
            make_parent(args.sweep_out)
            save_sweep(args.sweep_out, rows, {k: v for k, v in header.items() if k != "sla"})
    if args.rule == "attain" and args.confirm_windows and not confirm:
        env = env_from_args(args)
        env.max_episode_steps = 10**9
        try:
            confirm = confirm_env(env, promise_configs(rows, args.attain), runs=args.confirm_runs,
                                  windows=args.confirm_windows, seed=args.seed, progress=True)
        finally:
            env.close()
        header = {**header, "confirmation": {"runs": args.confirm_runs, "windows": args.confirm_windows,
                                             **_measured(args)}}
    if args.no_control_windows and not args.from_sweep:
        env = env_from_args(args, control=False)
        env.max_episode_steps = 10**9
        try:
            nc_rows = no_control_windows(env, phases=args.phases, windows=args.no_control_windows, seed=args.seed,
                                         progress=True)
            nc_header = {k: v for k, v in run_header(args.env, env, phases=args.phases, **_measured(args)).items()
                         if k != "sla"}
        finally:
            env.close()
        make_parent(args.no_control_out)
        save_sweep(args.no_control_out, nc_rows, {**nc_header, "control": False,
                                                  "windows_per_phase": args.no_control_windows})
    header = {k: v for k, v in header.items() if k != "sla"}
    name = f"calibrated-{args.device if args.env == 'real' else args.env}"
    notes = _notes(args, header, rows, confirm)
    if args.sweep_out:  # first: a sweep is minutes of measurement, whatever the derivation says
        make_parent(args.sweep_out)
        save_sweep(args.sweep_out, rows, header, confirm)
    spec, table, report = calibrate(rows, rule=args.rule, attain=args.attain, quantile=args.quantile,
                                    confirm_rows=confirm if args.confirm_windows else None,
                                    name=name, notes=notes)
    make_parent(args.out)
    spec.save(args.out)
    oracle_out = args.oracle_out or os.path.splitext(args.out)[0] + ".oracle.json"
    make_parent(oracle_out)
    save_oracle(oracle_out, report, name, header)
    print(json.dumps({"spec": args.out, "oracle": oracle_out, "lat_goal_us": spec.lat_goal,
                      "tp_goal_ops_per_s": spec.tp_goal, "oracle_table": report["oracle"],
                      "feasible_fraction_per_phase": report["feasible_fraction_per_phase"],
                      "best_both_met_fraction_per_phase": report["best_both_met_fraction_per_phase"],
                      "promise_per_phase": report["promise_per_phase"],
                      "wall_s": round(time.monotonic() - t0, 1), **header}, indent=2),
          file=report_stream(args.out, oracle_out, args.sweep_out, args.no_control_out))
    return 0
