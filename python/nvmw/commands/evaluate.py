"""`nvmw evaluate`: the long run (thesis 4.3, Appendix E). Every controller faces the same
seeded phase schedule (a switch every 200 steps); writes eval.json, eval.md (Tables E.1-E.3
plus SLA-met fractions), eval.png (like Figure E.1), traces.json and run.json."""
from __future__ import annotations

import argparse
import json
import os
import sys

from nvmw.commands import SUMMARIES
from nvmw.commands._args import check_beside, check_output_dir, check_output_file, int_in, positive_int, steps_help
from nvmw.control.controllers import OnlineAgentController
from nvmw.commands._args import add_env_args, controller_help, controller_spelling
from nvmw.errors import Interrupted
from nvmw.lab.evaluation import evaluate_lineup, write_outputs
from nvmw.lab.lineup import DEFAULT_LINEUP, ControllerContext, deprecated
from nvmw.rl.simrun import RUN_WINDOWS_MAX


#: --steps, --window and --switch-every by default, and with --quick.
_FULL = {"steps": 4000, "window": 1.0, "switch_every": 200}
_QUICK = {"steps": 400, "window": 0.1, "switch_every": 100}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help=SUMMARIES["evaluate"],
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_env_args(p, window_default=1.0, steps=False)
    # Left None when not given, so that --quick fills in only what the command line does not set.
    for action in p._actions:
        if action.dest == "window":
            action.default, action.help = None, f"monitor window, s (default {_FULL['window']:g}; --quick: " \
                                                f"{_QUICK['window']:g})"
    p.add_argument("--steps", type=int_in(1, RUN_WINDOWS_MAX), default=None,
                   help=steps_help("steps of the long run", f"{_FULL['steps']}; --quick: {_QUICK['steps']}",
                                   memory="per controller"))
    p.add_argument("--switch-every", type=int_in(1, RUN_WINDOWS_MAX), default=None,
                   help=f"steps per phase segment, at most {RUN_WINDOWS_MAX:,} (one segment when not less than "
                        f"--steps) (default {_FULL['switch_every']}; --quick: {_QUICK['switch_every']})")
    p.add_argument("--quick", action="store_true", help="400 steps, 0.1 s windows, switch every 100 (each unless "
                   "given: --quick --steps 40 runs 40 steps)")
    p.add_argument("--sequential", action="store_true", help="run each controller's whole run before the next "
                   "one's (default: controllers take turns, one phase segment each)")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=False,
                   help="run each controller and its env (its own middleware and workload) in a process of its "
                        "own, the turns kept: the parent tells one process at a time to run its segment "
                        "(default: all in this process). With --online or q-learning-online the agent as it "
                        "ended the run comes back from its process, so --save-agent works")
    p.add_argument("--controllers", nargs="+", default=list(DEFAULT_LINEUP), type=controller_spelling(),
                   help=controller_help(" ".join(DEFAULT_LINEUP)))
    p.add_argument("--agent", default=None, help="trained agent (default: the shipped one for --device)")
    p.add_argument("--online", action="store_true",
                   help="q-learning keeps learning during the run (thesis Algorithm 2 online): after every window "
                        "it updates on that window and 15 from a replay buffer of the last 2,000, Q step 0.1; "
                        "reported as q-learning-online (the controller name q-learning-online does the same "
                        "for one entry of --controllers, so both can run side by side)")
    p.add_argument("--save-agent", default=None, help="with --online (or the q-learning-online controller): write "
                   "the agent as it ended the run (.joblib; its greedy policy goes beside it, NAME.policy.json, "
                   "so not a device or FIFO)")
    p.add_argument("--oracle", default=None, help="oracle table JSON from `nvmw calibrate` (default: shipped)")
    p.add_argument("--fixed", type=positive_int, nargs=2, default=None, metavar=("I", "B"), help=argparse.SUPPRESS)
    p.add_argument("--out", default="nvmw-eval", help="output directory (default %(default)s). The run's files "
                   "there (eval.json, run.json, eval.md, eval.png, traces.json) replace an earlier run's, and one it "
                   "does not write (eval.png after Ctrl-C) is removed, saying so; other files are left alone")
    p.set_defaults(func=run)


def _lineup(args) -> list:
    """--controllers; the deprecated --fixed I B replaces the default line-up's fixed:15,15
    (and is what a bare "fixed" means)."""
    names = list(args.controllers)
    if args.fixed is not None:
        new = f"fixed:{args.fixed[0]},{args.fixed[1]}"
        deprecated(f"--fixed {args.fixed[0]} {args.fixed[1]}", f"the controller name {new}")
        if names == list(DEFAULT_LINEUP):
            names = [new if n == "fixed:15,15" else n for n in names]
    return names


def _say(line: str) -> None:
    print(f"nvmw evaluate: {line}", file=sys.stderr, flush=True)


def run(args) -> int:
    # Checked, not made: a run refused here or while its controllers are built leaves no
    # directory behind. write_outputs makes --out, and --save-agent's directory is made
    # when the agent is saved.
    check_output_dir(args.out, "--out", create=False)
    if args.save_agent and not (args.online or "q-learning-online" in args.controllers):
        raise ValueError("--save-agent needs --online or the q-learning-online controller "
                         "(without either the agent does not change)")
    check_output_file(args.save_agent, "--save-agent", create=False)
    check_beside(args.save_agent, "--save-agent", "the agent's policy file (NAME.policy.json)")
    for key, value in (_QUICK if args.quick else _FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    context = ControllerContext(device=args.device if args.env in ("real", "sim") else args.env,
                                agent_path=args.agent, oracle_path=args.oracle,
                                fixed=tuple(args.fixed) if args.fixed else (15, 15), online=args.online,
                                seed=args.seed)
    controllers: list = []
    try:
        summaries, traces, header = evaluate_lineup(
            args.env, _lineup(args), window_s=args.window, steps=args.steps, switch_every=args.switch_every,
            seed=args.seed, sla=args.sla, device=args.device, engine=args.engine, path=args.path,
            sim_params=args.sim_params, context=context, interleave=not args.sequential, progress=True,
            built=controllers, isolate=args.isolate,
            **({"online": "q-learning learns during the run (replay 2,000 windows, 16 per update, Q step 0.1)"}
               if args.online else {}),
            order="sequential" if args.sequential else "interleaved (controllers take turns per segment)",
            processes="one per controller" if args.isolate else "one for all controllers")
    except Interrupted as e:
        # Ctrl-C: the steps taken so far, written like a finished run (no figure), marked
        # as interrupted in run.json and eval.md.
        summaries, traces, header = e.partial
        if not traces:
            raise Interrupted(f"{e.note}; nothing written") from None
        paths = write_outputs(summaries, traces, header, args.out, args.switch_every, plot=False, progress=_say)
        raise Interrupted(f"{e.note}; partial results in {args.out}: "
                          + ", ".join(os.path.basename(p) for p in paths.values())) from None
    paths = write_outputs(summaries, traces, header, args.out, args.switch_every, progress=_say)
    if args.save_agent:
        for c in controllers:
            if isinstance(c, OnlineAgentController):
                os.makedirs(os.path.dirname(os.path.abspath(args.save_agent)), exist_ok=True)
                c.agent.save(args.save_agent, metadata={**dict(getattr(c.agent, "metadata_", {}) or {}),
                                                        "online": {"updates": c.updates, "run": dict(header)}})
                paths["agent"] = args.save_agent
    with open(paths["markdown"], encoding="utf-8") as fh:
        print(fh.read())
    print(json.dumps(paths, indent=2))
    return 0
