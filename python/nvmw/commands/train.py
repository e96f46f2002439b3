"""`nvmw train`: bootstrap the nine Q models on collected transitions (with tuned
parameters if given), then run Q-learning episodes per phase (thesis Algorithm 2); writes
the agent (one joblib file) and a learning-curve PNG."""
from __future__ import annotations

import argparse
import json
import os
import time

from nvmw.rl.runs import add_env_args, env_from_args, run_header


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="pretrain + Q-learning per phase; saves the agent",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_env_args(p)
    p.add_argument("--transitions", default=None, help="pretraining data from `nvmw collect` (default: "
                   "collect --collect-episodes random episodes per phase first)")
    p.add_argument("--collect-episodes", type=int, default=2)
    p.add_argument("--init-agent", default=None, help="continue training this saved agent (skips pretraining; "
                   "its own hyperparameters are kept, --epsilon and the schedule options apply)")
    p.add_argument("--tuned", default=None, help="JSON from `nvmw tune` (per-action model parameters)")
    p.add_argument("--episodes", type=int, default=10, help="Q-learning episodes per phase (default %(default)s; "
                   "thesis: 700-1000)")
    p.add_argument("--rounds", type=int, default=1, help="repeat the pass over the phases this many times "
                   "(interleaves phases so the agent does not forget the first ones)")
    p.add_argument("--phases", type=int, nargs="+", default=[1, 2, 3, 4])
    p.add_argument("--gamma", type=float, default=0.95)
    p.add_argument("--learning-rate", type=float, default=0.7)
    p.add_argument("--learning-rate-mode", choices=["q_step", "sgd_eta0"], default="q_step")
    p.add_argument("--epsilon", type=float, default=0.9)
    p.add_argument("--epsilon-decay", type=float, default=0.1)
    p.add_argument("--epsilon-decay-mode", choices=["multiplicative", "linear"], default="multiplicative")
    p.add_argument("--epsilon-min", type=float, default=0.0)
    p.add_argument("--fqi-iterations", type=int, default=0,
                   help="fitted-Q refits of the bootstrap (0 = thesis: reward regression only)")
    p.add_argument("--out", required=True, help="agent file to write (.joblib)")
    p.add_argument("--curve", default=None, help="learning-curve PNG (default: next to --out)")
    p.set_defaults(func=run)


def run(args) -> int:
    from nvmw.rl.agent import QLearningAgent
    from nvmw.rl.pretrain import collect_transitions, load_transitions

    env = env_from_args(args)
    t_start = time.monotonic()
    timings: dict = {}
    history = []
    try:
        if args.init_agent:
            agent = QLearningAgent.load(args.init_agent)
            agent.epsilon, agent.epsilon_decay = args.epsilon, args.epsilon_decay
            agent.epsilon_decay_mode, agent.epsilon_min = args.epsilon_decay_mode, args.epsilon_min
            prior = getattr(agent, "metadata_", {}) or {}
            data = None
        else:
            prior = {}
            if args.transitions:
                data = load_transitions(args.transitions)
            else:
                data = collect_transitions(env, episodes_per_phase=args.collect_episodes, phases=args.phases,
                                           seed=args.seed, progress=True)
            params = None
            if args.tuned:
                with open(args.tuned, encoding="utf-8") as fh:
                    params = json.load(fh)["model_params"]
            agent = QLearningAgent(gamma=args.gamma, learning_rate=args.learning_rate,
                                   learning_rate_mode=args.learning_rate_mode, epsilon=args.epsilon,
                                   epsilon_decay=args.epsilon_decay, epsilon_decay_mode=args.epsilon_decay_mode,
                                   epsilon_min=args.epsilon_min, model_params=params, random_state=args.seed)
            agent.pretrain(data["states"], data["actions"], data["rewards"], data["next_states"],
                           data["terminated"], fqi_iterations=args.fqi_iterations)
        # One epsilon schedule per phase, as the thesis trains each workload separately.
        for rnd in range(args.rounds):
            for ph in args.phases:
                agent.epsilon_ = args.epsilon if rnd == 0 else max(args.epsilon_min, args.epsilon * 0.25)
                t0 = time.monotonic()
                h = agent.learn(env, args.episodes, reset_options={"phase": ph},
                                seed=args.seed + 1000 * ph + 100000 * rnd, progress=True)
                for row in h:
                    row["phase"] = ph
                    row["round"] = rnd
                history.extend(h)
                t = timings.setdefault(str(ph), {"episodes": 0, "wall_s": 0.0})
                t["episodes"] += len(h)
                t["wall_s"] = round(t["wall_s"] + time.monotonic() - t0, 1)
        header = run_header(args.env, env, seed=args.seed)
    finally:
        env.close()
    meta = {"args": {k: v for k, v in vars(args).items() if k != "func"}, "run": header, "training": timings,
            "history": history, "previous": {k: prior[k] for k in ("args", "training") if k in prior},
            "pretrain_transitions": None if data is None else int(len(data["actions"]))}
    agent.save(args.out, metadata=meta)
    curve = args.curve or os.path.splitext(args.out)[0] + ".curve.png"
    plot_curve(history, curve, header)
    print(json.dumps({"out": args.out, "curve": curve, "training": timings,
                      "total_wall_s": round(time.monotonic() - t_start, 1),
                      "final_median_reward_per_phase": {str(ph): [r["reward_median"] for r in history
                                                                  if r["phase"] == ph][-1] for ph in args.phases},
                      **header}, indent=2))
    return 0


def plot_curve(history, path, header) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    phases = sorted({h["phase"] for h in history})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ph in phases:
        rows = [h for h in history if h["phase"] == ph]
        x = np.arange(1, len(rows) + 1)
        axes[0].plot(x, [r["reward_median"] for r in rows], marker=".", label=f"phase {ph}")
        axes[1].plot(x, [r["epsilon"] for r in rows], label=f"phase {ph}")
    axes[0].set_yscale("symlog")
    axes[0].set_xlabel("episode (per phase)")
    axes[0].set_ylabel("median step reward")
    axes[1].set_xlabel("episode (per phase)")
    axes[1].set_ylabel("epsilon")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Q-learning: env {header['env']}, device {header['device']}, window {header['window_s']} s, "
                 f"SLA {header['sla']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
