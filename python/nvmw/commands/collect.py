"""`nvmw collect`: run a random agent on the environment and save its transitions (.npz)
for offline pretraining (thesis: 150 episodes per phase). Episodes run in this process, in
--workers local processes or as Ray tasks (--backend ray); each episode's seed comes from
--seed and its index, so the file is the same wherever they ran."""
from __future__ import annotations

import argparse
import json
import time

from nvmw.commands import SUMMARIES
from nvmw.commands._args import Distinct, check_apart, check_kept_transitions, check_output_file, episodes_help, int_in
from nvmw.commands._args import make_parent, phase_number
from nvmw.commands._args import add_backend_args, add_env_args, env_from_args, runner_from_args
from nvmw.commands._util import report_stream
from nvmw.errors import Interrupted
from nvmw.lab.runs import run_header
from nvmw.rl.episodes import EPISODES_MAX
from nvmw.rl.pretrain import collect_transitions, save_transitions
from nvmw.workloads.phases import DEFAULT_PHASES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collect", help=SUMMARIES["collect"],
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_env_args(p)
    p.add_argument("--episodes", type=int_in(1, EPISODES_MAX), default=150,
                   help=episodes_help("episodes per phase", "%(default)s, as the thesis", kept=True))
    p.add_argument("--phases", type=phase_number, nargs="+", action=Distinct, default=list(DEFAULT_PHASES),
                   help="phases (default %(default)s)")
    p.add_argument("--out", required=True, help="transitions file to write (.npz)")
    add_backend_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    check_output_file(args.out, "--out")
    check_apart([("--out", args.out)], [("--sla", args.sla), ("--sim-params", args.sim_params)])
    check_kept_transitions(args.episodes, len(args.phases), args.steps)
    env = env_from_args(args)
    t0 = time.monotonic()
    runner = None
    try:
        runner = runner_from_args(args, env)
        data = collect_transitions(env, episodes_per_phase=args.episodes, phases=args.phases, seed=args.seed,
                                   progress=True, runner=runner)
        header = run_header(args.env, env, episodes_per_phase=args.episodes, steps=args.steps,
                            phases=args.phases, seed=args.seed, backend=runner.describe())
    except Interrupted as e:
        # Ctrl-C: keep the transitions collected so far (each stands alone for pretraining).
        n = int(len(e.partial["actions"]))
        if n == 0:
            raise Interrupted("no transition collected; nothing written") from None
        header = run_header(args.env, env, episodes_per_phase=args.episodes, steps=args.steps,
                            phases=args.phases, seed=args.seed, interrupted=e.note,
                            wall_s=round(time.monotonic() - t0, 1))
        make_parent(args.out)
        save_transitions(args.out, e.partial, meta=header)
        raise Interrupted(f"saved the {n} transitions collected to {args.out}") from None
    finally:
        if runner is not None:
            runner.close()
        env.close()
    header["wall_s"] = round(time.monotonic() - t0, 1)
    make_parent(args.out)
    save_transitions(args.out, data, meta=header)
    print(json.dumps({"out": args.out, "transitions": int(len(data["actions"])), **header}, indent=2),
          file=report_stream(args.out))
    return 0
