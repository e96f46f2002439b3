"""`nvmw evaluate`: the long run (thesis 4.3, Appendix E). Every controller faces the same
seeded phase schedule (a switch every 200 steps); writes eval.json, eval.md (Tables E.1-E.3
plus SLA-met fractions), eval.png (like Figure E.1), traces.json and run.json."""
from __future__ import annotations

import argparse
import json
import os

CONTROLLERS = ("no-control", "fixed", "oracle", "aimd", "gradient", "q-learning")


def register(sub: argparse._SubParsersAction) -> None:
    from nvmw.rl.runs import add_env_args

    p = sub.add_parser("evaluate", help="long-run comparison of controllers (JSON, Markdown, PNG)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_env_args(p, window_default=1.0, steps=False)
    p.add_argument("--steps", type=int, default=4000, help="steps of the long run (default %(default)s)")
    p.add_argument("--switch-every", type=int, default=200, help="steps per phase segment (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="400 steps, 0.1 s windows, switch every 100")
    p.add_argument("--sequential", action="store_true", help="run each controller's whole run before the next "
                   "one's (default: controllers take turns, one phase segment each)")
    p.add_argument("--controllers", nargs="+", choices=CONTROLLERS, default=list(CONTROLLERS))
    p.add_argument("--agent", default=None, help="trained agent (default: the shipped one for --device)")
    p.add_argument("--oracle", default=None, help="oracle table JSON from `nvmw calibrate` (default: shipped)")
    p.add_argument("--fixed", type=int, nargs=2, default=[15, 15], metavar=("I", "B"))
    p.add_argument("--out", default="nvmw-eval", help="output directory (default %(default)s)")
    p.set_defaults(func=run)


def build_controllers(names, *, spec, device: str, agent_path=None, oracle_path=None, fixed=(15, 15),
                      env_kind: str = "real"):
    from nvmw.rl.agent import QLearningAgent
    from nvmw.rl.controllers import AIMD, AgentController, Fixed, Gradient, NoControl, OracleFixed
    from nvmw.rl.runs import shipped_agent_path, shipped_oracle_path

    out = []
    for n in names:
        if n == "no-control":
            out.append(NoControl())
        elif n == "fixed":
            out.append(Fixed(*fixed))
        elif n == "oracle":
            path = oracle_path or shipped_oracle_path(device if env_kind in ("real", "sim") else env_kind)
            if not os.path.exists(path):
                raise FileNotFoundError(f"no oracle table at {path}: run `nvmw calibrate` and pass --oracle")
            out.append(OracleFixed.from_json(path))
        elif n == "aimd":
            out.append(AIMD(spec.lat_goal))
        elif n == "gradient":
            out.append(Gradient(spec.lat_goal))
        elif n == "q-learning":
            path = agent_path or shipped_agent_path(device if env_kind in ("real", "sim") else env_kind)
            if not os.path.exists(path):
                raise FileNotFoundError(f"no trained agent at {path}: run `nvmw train` and pass --agent")
            out.append(AgentController(QLearningAgent.load(path)))
    return out


def run(args) -> int:
    from nvmw.rl.evaluation import evaluate_controllers, write_outputs
    from nvmw.rl.runs import make_env, run_header

    if args.quick:
        args.steps, args.window, args.switch_every = 400, 0.1, 100
    probe = make_env(args.env, window_s=args.window, sla=args.sla, device=args.device, engine=args.engine)
    spec = probe.sla
    header = run_header(args.env, probe, steps=args.steps, switch_every=args.switch_every, seed=args.seed,
                        order="sequential" if args.sequential else "interleaved (controllers take turns per segment)")
    probe.close()
    ctrls = build_controllers(args.controllers, spec=spec, device=args.device, agent_path=args.agent,
                              oracle_path=args.oracle, fixed=tuple(args.fixed), env_kind=args.env)

    def factory(control: bool):
        return make_env(args.env, window_s=args.window, sla=spec, device=args.device, engine=args.engine,
                        control=control, path=args.pool, max_episode_steps=args.steps,
                        sim_params=args.sim_params)

    summaries, traces = evaluate_controllers(factory, ctrls, total_steps=args.steps,
                                             switch_every=args.switch_every, seed=args.seed, progress=True,
                                             interleave=not args.sequential)
    paths = write_outputs(summaries, traces, header, args.out, args.switch_every)
    with open(paths["markdown"], encoding="utf-8") as fh:
        print(fh.read())
    print(json.dumps(paths, indent=2))
    return 0
