"""Phase 4 right after a contended phase, under the interleaved evaluation's harness.

In the long-run evaluation (`nvmw evaluate`), phase 4 that followed phase 5 or 6 (at the
end of seeds 1 and 4) lost latency steps for small limits (single 0.1 s windows with a p99
of 0.1-1 s), while the same limits met the goal where phase 4 followed a gentle phase.
This script reruns that case without the rest of the evaluation: `evaluate_controllers` over the phases (6, 4) only,
seed 0 (order 6 then 4), every controller on its own middleware in this one process, as
`nvmw evaluate` runs them, and prints, per controller, the fraction of each segment's
windows whose interactive p99 met the latency goal and the worst window.

    python bench/phase4_after_contended.py [--controllers none fixed:15,15 ...]
        [--steps-per-phase 150] [--window 0.1] [--isolate] [--out FILE]

--isolate runs each controller and its middleware in a process of its own instead
(evaluate_controllers(isolate=True)), the turns kept.

Measured (docs/rl-history.md, "Six seeds together"; bench/results-phase4-after-contended.json and
-isolated.json): the loss was the harness's. A run that had ended left its workload
running until all envs were closed, so each controller's last segment ran under the
workloads of every controller before it (fixed:4,1, the last of six, met the goal on
0.09-0.58 of phase-4 windows); with every run paused when it ends, 0.85-1.00. A process
per controller (--isolate) did not remove it on its own.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from nvmw.lab.evaluation import EnvFactory, evaluate_controllers
from nvmw.lab.lineup import ControllerContext, build_controllers

from _report import emit

DEFAULT_CONTROLLERS = ["none", "fixed:15,15", "fixed:8,4", "fixed:32,1", "fixed:32,32", "fixed:4,1"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--controllers", nargs="+", default=DEFAULT_CONTROLLERS)
    p.add_argument("--steps-per-phase", type=int, default=150)
    p.add_argument("--window", type=float, default=0.1, help="monitor window, s (default 0.1)")
    p.add_argument("--isolate", action="store_true",
                   help="each controller and its middleware in a process of its own (turns kept)")
    p.add_argument("--out", help="also write the result as JSON here")
    args = p.parse_args(argv)
    if args.steps_per_phase < 1 or not args.window > 0:
        p.error("--steps-per-phase must be >= 1 and --window > 0")

    make = EnvFactory("real", dict(window_s=args.window, device="optane-1dimm", engine="memory",
                                   max_episode_steps=10**6))
    ctrls = args.controllers if args.isolate else build_controllers(args.controllers, ControllerContext())
    n = args.steps_per_phase
    load_before = os.getloadavg()
    t0 = time.time()
    # Seed 0 orders the two phases 6, 4.
    _summaries, traces = evaluate_controllers(make, ctrls, total_steps=2 * n, switch_every=n, seed=0,
                                              phases=(6, 4), progress=sys.stderr.isatty(),
                                              isolate=args.isolate, context=ControllerContext())
    result = {"run": {"controllers": args.controllers, "steps_per_phase": n, "window_s": args.window,
                      "processes": "one per controller" if args.isolate else "one for all controllers",
                      "load_before": load_before, "load_after": os.getloadavg(),
                      "wall_s": time.time() - t0,
                      "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0))},
              "controllers": {}}
    for name, tr in traces.items():
        segs = []
        for k in range(2):
            lo, hi = k * n, (k + 1) * n
            met = tr["sla_latency_met"][lo:hi]
            segs.append({"phase": tr["phase"][lo], "latency_met": sum(met) / len(met),
                         "p99_max_us": max(tr["p99_us"][lo:hi])})
        result["controllers"][name] = segs
        print(f"{name:14} " + "  ".join(f"phase {s['phase']}: latency goal met {s['latency_met']:.2f}, "
                                        f"worst p99 {s['p99_max_us'] / 1000:8.1f} ms" for s in segs))
    emit(result, args.out, indent=1, echo=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
