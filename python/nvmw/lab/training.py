"""The training schedule behind `nvmw train`: bootstrap the nine Q models on collected
transitions (thesis 3.4.3), then Q-learning episodes phase by phase (thesis Algorithm 2,
one epsilon schedule per phase as the thesis trains each workload separately), and the
learning-curve figure."""
from __future__ import annotations

import json
import time
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from nvmw.rl.agent import QLearningAgent
from nvmw.workloads.phases import DEFAULT_PHASES


def pretrained_agent(data: Mapping[str, np.ndarray], *, tuned_path: Optional[str] = None, fqi_iterations: int = 0,
                     seed: int = 0, **hyperparameters: Any) -> QLearningAgent:
    """A new agent bootstrapped on `data` (from `nvmw collect`), with the per-action model
    parameters of `tuned_path` (from `nvmw tune`) if given. `hyperparameters` are
    QLearningAgent arguments (gamma, learning_rate, epsilon, ...)."""
    params = None
    if tuned_path:
        with open(tuned_path, encoding="utf-8") as fh:
            params = json.load(fh)["model_params"]
    agent = QLearningAgent(model_params=params, random_state=seed, **hyperparameters)
    return agent.pretrain(data["states"], data["actions"], data["rewards"], data["next_states"],
                          data["terminated"], fqi_iterations=fqi_iterations)


def resumed_agent(path: str, *, epsilon: float, epsilon_decay: float, epsilon_decay_mode: str,
                  epsilon_min: float) -> tuple[QLearningAgent, dict]:
    """A saved agent to train further (its own hyperparameters kept, the exploration
    schedule replaced) and the metadata it was saved with."""
    agent = QLearningAgent.load(path)
    agent.epsilon, agent.epsilon_decay = epsilon, epsilon_decay
    agent.epsilon_decay_mode, agent.epsilon_min = epsilon_decay_mode, epsilon_min
    return agent, dict(getattr(agent, "metadata_", {}) or {})


def train_per_phase(agent: QLearningAgent, env, *, episodes: int, phases: Sequence[int] = DEFAULT_PHASES,
                    rounds: int = 1, epsilon: float = 0.9, epsilon_min: float = 0.0, seed: int = 0,
                    progress: bool = False) -> tuple[list[dict], dict]:
    """`episodes` Q-learning episodes per phase, `rounds` passes over the phases (later
    rounds explore from a quarter of `epsilon`, so the agent does not forget the first
    phases). Returns (per-episode history with "phase" and "round", per-phase timings)."""
    history: list[dict] = []
    timings: dict = {}
    for rnd in range(rounds):
        for ph in phases:
            agent.epsilon_ = epsilon if rnd == 0 else max(epsilon_min, epsilon * 0.25)
            t0 = time.monotonic()
            h = agent.learn(env, episodes, reset_options={"phase": ph}, seed=seed + 1000 * ph + 100000 * rnd,
                            progress=progress)
            for row in h:
                row["phase"] = ph
                row["round"] = rnd
            history.extend(h)
            t = timings.setdefault(str(ph), {"episodes": 0, "wall_s": 0.0})
            t["episodes"] += len(h)
            t["wall_s"] = round(t["wall_s"] + time.monotonic() - t0, 1)
    return history, timings


def plot_curve(history: Sequence[Mapping[str, Any]], path: str, header: Mapping[str, Any]) -> None:
    """Median step reward and epsilon per episode, one line per phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    if phases:  # no Q-learning episodes (pretraining only): empty axes, no legend
        axes[0].legend(fontsize=7)
    fig.suptitle(f"Q-learning: env {header['env']}, device {header['device']}, window {header['window_s']} s, "
                 f"SLA {header['sla']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["pretrained_agent", "resumed_agent", "train_per_phase", "plot_curve"]
