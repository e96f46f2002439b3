"""`nvmw train`: bootstrap the nine Q models on collected transitions (with tuned
parameters if given), then run Q-learning episodes per phase (thesis Algorithm 2); writes
the agent (one joblib file) and a learning-curve PNG. Episodes run in this process, in
--workers local processes or as Ray tasks (--backend ray); with the same seed and
--batch the agent is the same wherever they ran."""
from __future__ import annotations

import argparse
import json
import os
import time

from nvmw.commands import SUMMARIES
from nvmw.commands._args import (Distinct, add_backend_args, add_env_args, check_apart, check_beside,
                                 check_output_file, env_from_args, episodes_help, float_in, fraction, int_in,
                                 make_parent, phase_number, runner_from_args)
from nvmw.commands._util import report_stream
from nvmw.lab.runs import run_header
from nvmw.rl.agent import FQI_ITERATIONS_MAX, REWARD_TRANSFORMS
from nvmw.rl.episodes import EPISODES_MAX
from nvmw.lab.training import (ROUNDS_MAX, UPDATE_MODES, load_tuned, plot_curve, pretrained_agent, resumed_agent,
                                train_per_phase)
from nvmw.rl.policy import policy_path
from nvmw.rl.pretrain import collect_transitions, load_transitions
from nvmw.workloads.phases import DEFAULT_PHASES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help=SUMMARIES["train"],
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_env_args(p)
    p.add_argument("--transitions", default=None, help="pretraining data from `nvmw collect` (default: "
                   "collect --collect-episodes random episodes per phase first)")
    p.add_argument("--collect-episodes", type=int_in(0, EPISODES_MAX), default=2,
                   help=episodes_help("without --transitions or --init-agent: random episodes per phase collected "
                                      "to pretrain on", "%(default)s", kept=True))
    p.add_argument("--init-agent", default=None, help="continue training this saved agent (skips pretraining; "
                   "its own hyperparameters are kept, --epsilon and the schedule options apply)")
    p.add_argument("--tuned", default=None, help="JSON from `nvmw tune` (per-action model parameters)")
    p.add_argument("--episodes", type=int_in(0, EPISODES_MAX), default=10,
                   help=episodes_help("Q-learning episodes per phase", "%(default)s; thesis: 700-1000"))
    p.add_argument("--rounds", type=int_in(1, ROUNDS_MAX), default=1,
                   help=f"repeat the pass over the phases this many times, at most {ROUNDS_MAX:,} (interleaves "
                        "phases so the agent does not forget the first ones; each round runs --episodes episodes "
                        "of every phase, the history keeps about 1 KB per episode) (default %(default)s)")
    p.add_argument("--phases", type=phase_number, nargs="+", action=Distinct, default=list(DEFAULT_PHASES),
                   help="phases (default %(default)s)")
    p.add_argument("--gamma", type=fraction, default=0.95,
                   help="discount factor, in [0, 1] (default %(default)s, the thesis's Table D.3)")
    p.add_argument("--learning-rate", type=float_in(0.0, 1.0), default=0.7,
                   help="Q step (the SGD eta0 with --learning-rate-mode sgd_eta0), in (0, 1] (default %(default)s)")
    p.add_argument("--learning-rate-mode", choices=["q_step", "sgd_eta0"], default="q_step",
                   help="q_step: --learning-rate is the Q-learning step; sgd_eta0: the target is r + gamma "
                        "max Q and --learning-rate the models' SGD step (default %(default)s)")
    p.add_argument("--epsilon", type=fraction, default=0.9,
                   help="initial exploration rate, in [0, 1] (default %(default)s, the thesis's Table D.3)")
    p.add_argument("--epsilon-decay", type=fraction, default=0.1,
                   help="decay of the exploration rate after each episode, in [0, 1] (default %(default)s)")
    p.add_argument("--epsilon-decay-mode", choices=["multiplicative", "linear"], default="multiplicative",
                   help="multiplicative: epsilon * (1 - decay); linear: epsilon - decay (default %(default)s)")
    p.add_argument("--epsilon-min", type=fraction, default=0.0,
                   help="floor of the exploration rate, in [0, 1] (default %(default)s)")
    p.add_argument("--reward-transform", choices=REWARD_TRANSFORMS, default="symlog",
                   help="what the Q models learn from: symlog = sign(r) log(1 + |r|) (default), none = the raw "
                        "reward (the thesis); docs/rl.md compares them")
    p.add_argument("--fqi-iterations", type=int_in(0, FQI_ITERATIONS_MAX), default=0,
                   help=f"fitted-Q refits of the bootstrap, at most {FQI_ITERATIONS_MAX:,}: a refit fits the nine "
                        "models again on all the transitions, about 25 ms per 1,000 (default %(default)s = thesis: "
                        "reward regression only)")
    p.add_argument("--update", choices=UPDATE_MODES, default="step",
                   help="step: Algorithm 2's update for every transition (default); episode: one batched update "
                        "per episode, targets from the models before it (~50x cheaper, for hundreds of episodes)")
    p.add_argument("--batch", type=int_in(1, EPISODES_MAX), default=None,
                   help=f"episodes started at a time with the same agent, at most {EPISODES_MAX:,} (two batches' "
                        "episodes are held at once; one of --episodes or more runs a phase's episodes together) "
                        "(default: --workers); part of what the result depends on, with --seed")
    add_backend_args(p)
    p.add_argument("--out", required=True, help="agent file to write (.joblib; its greedy policy goes beside it, "
                   "NAME.policy.json, so not a device or FIFO)")
    p.add_argument("--curve", default=None, help="learning-curve PNG (default: next to --out)")
    p.set_defaults(func=run)


def run(args) -> int:
    check_output_file(args.out, "--out")
    check_output_file(args.curve, "--curve")
    check_beside(args.out, "--out", "the agent's policy file (NAME.policy.json)")
    # --init-agent may be --out: the agent is read whole before it is saved again.
    check_apart([("--out", args.out), ("--curve", args.curve or os.path.splitext(args.out)[0] + ".curve.png"),
                 ("its policy file", policy_path(args.out))],
                [("--transitions", args.transitions), ("--tuned", args.tuned), ("--sla", args.sla),
                 ("--sim-params", args.sim_params)])
    if args.tuned:
        load_tuned(args.tuned)  # refused now, not after the transitions are collected
    if args.collect_episodes == 0 and not (args.transitions or args.init_agent):
        raise ValueError("--collect-episodes 0 leaves nothing to pretrain on: name --transitions or --init-agent")
    env = env_from_args(args)
    t_start = time.monotonic()
    runner = None
    schedule = dict(epsilon=args.epsilon, epsilon_decay=args.epsilon_decay,
                    epsilon_decay_mode=args.epsilon_decay_mode, epsilon_min=args.epsilon_min)
    try:
        runner = runner_from_args(args, env)
        if args.init_agent:
            agent, prior = resumed_agent(args.init_agent, **schedule)
            data = None
        else:
            prior = {}
            if args.transitions:
                data = load_transitions(args.transitions)
            else:
                data = collect_transitions(env, episodes_per_phase=args.collect_episodes, phases=args.phases,
                                           seed=args.seed, progress=True, runner=runner)
            agent = pretrained_agent(data, tuned_path=args.tuned, fqi_iterations=args.fqi_iterations,
                                     seed=args.seed, gamma=args.gamma, learning_rate=args.learning_rate,
                                     learning_rate_mode=args.learning_rate_mode,
                                     reward_transform=args.reward_transform, **schedule)
        history, timings = train_per_phase(agent, env, episodes=args.episodes, phases=args.phases,
                                           rounds=args.rounds, epsilon=args.epsilon, epsilon_min=args.epsilon_min,
                                           seed=args.seed, progress=True, runner=runner, update=args.update,
                                           batch=args.batch)
        header = run_header(args.env, env, phases=args.phases, seed=args.seed, backend=runner.describe())
    finally:
        if runner is not None:
            runner.close()
        env.close()
    meta = {"args": {k: v for k, v in vars(args).items() if k != "func"}, "run": header, "training": timings,
            "history": history, "previous": {k: prior[k] for k in ("args", "training") if k in prior},
            "pretrain_transitions": None if data is None else int(len(data["actions"]))}
    make_parent(args.out)
    agent.save(args.out, metadata=meta)
    curve = args.curve or os.path.splitext(args.out)[0] + ".curve.png"
    make_parent(curve)
    plot_curve(history, curve, header)
    print(json.dumps({"out": args.out, "curve": curve, "training": timings,
                      "total_wall_s": round(time.monotonic() - t_start, 1),
                      # None for a phase without Q-learning episodes (--episodes 0: pretraining only)
                      "final_median_reward_per_phase": {str(ph): ([r["reward_median"] for r in history
                                                                   if r["phase"] == ph] or [None])[-1]
                                                        for ph in args.phases},
                      **header}, indent=2), file=report_stream(args.out, curve))
    return 0
