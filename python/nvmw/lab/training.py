"""The training schedule behind `nvmw train`: bootstrap the nine Q models on collected
transitions (thesis 3.4.3), then Q-learning episodes phase by phase (thesis Algorithm 2,
one epsilon schedule per phase as the thesis trains each workload separately), and the
learning-curve figure."""
from __future__ import annotations

import time
from typing import Any, Mapping, Optional, Sequence

from collections import deque

import numpy as np
from tqdm.auto import tqdm

from nvmw import jsonfiles
from nvmw.rl.agent import N_ACTIONS, QLearningAgent, make_pipeline
from nvmw.rl.episodes import EPISODES_MAX, TRAIN, EpisodeRunner, episode_seed
from nvmw.rl.simrun import check_count
from nvmw.workloads.phases import DEFAULT_PHASES

#: The most passes over the phases of a training run (`nvmw train --rounds`): enough to
#: interleave the phases episode by episode for 1,000 episodes per phase. A pass is
#: `episodes` episodes of every phase, and the history keeps about 1 KB per episode.
ROUNDS_MAX = 1_000


def load_tuned(path: str) -> list:
    """The per-action model parameters of a `nvmw tune` file ({"model_params": [one object
    per action]}); ValueError naming the file for anything else."""
    data = jsonfiles.load(path, "a tuned-parameters file")
    params = data.get("model_params") if isinstance(data, dict) else None
    if not (isinstance(params, list) and len(params) == N_ACTIONS and all(isinstance(p, dict) for p in params)):
        raise ValueError(f"{path}: not a tuned-parameters file from `nvmw tune` (model_params: one object for "
                         f"each of the {N_ACTIONS} actions)")
    for a, p in enumerate(params):
        degree = p.get("degree", 1)
        if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
            raise ValueError(f"{path}: model_params[{a}].degree must be an integer >= 1, got {degree!r}")
        try:
            make_pipeline(p)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: model_params[{a}]: {e}") from None
    return params


def pretrained_agent(data: Mapping[str, np.ndarray], *, tuned_path: Optional[str] = None, fqi_iterations: int = 0,
                     seed: int = 0, **hyperparameters: Any) -> QLearningAgent:
    """A new agent bootstrapped on `data` (from `nvmw collect`), with the per-action model
    parameters of `tuned_path` (from `nvmw tune`) if given. `hyperparameters` are
    QLearningAgent arguments (gamma, learning_rate, epsilon, ...)."""
    params = load_tuned(tuned_path) if tuned_path else None
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


def train_per_phase(agent: QLearningAgent, env=None, *, episodes: int, phases: Sequence[int] = DEFAULT_PHASES,
                    rounds: int = 1, epsilon: float = 0.9, epsilon_min: float = 0.0, seed: int = 0,
                    progress: bool = False, runner: Optional[EpisodeRunner] = None, update: str = "step",
                    batch: Optional[int] = None, in_flight: int = 2) -> tuple[list[dict], dict]:
    """`episodes` Q-learning episodes per phase, `rounds` passes over the phases (later
    rounds explore from a quarter of `epsilon`, so the agent does not forget the first
    phases). Returns (per-episode history with "phase" and "round", per-phase timings).

    Episodes run as tasks of `runner` (default: this process, on `env`), `batch` at a
    time (default: one per worker) with `in_flight` batches running while the agent
    learns: batch j acts with the agent as it was after learning batches 0 .. j -
    in_flight - 1, and the agent learns from the episodes in their order. Each episode's
    seed comes from (seed, its index in the run). So the agent depends on the seed and
    these settings only, not on the backend or the worker count. `update`: "step" applies
    Algorithm 2's update transition by transition after the episode; "episode" updates
    on the whole episode at once (`QLearningAgent.update_batch`: targets from the models
    before the episode), ~50x cheaper. `episodes` is an integer in [0, EPISODES_MAX],
    `rounds` in [1, ROUNDS_MAX] and `batch` (when given) in [1, EPISODES_MAX]
    (`nvmw.rl.episodes.EPISODES_MAX`: a batch that large runs each phase's episodes at once)."""
    episodes = check_count(episodes, "episodes", EPISODES_MAX, lo=0)
    rounds = check_count(rounds, "rounds", ROUNDS_MAX)
    if batch is not None and batch != 0:
        batch = check_count(batch, "batch", EPISODES_MAX)
    if update not in UPDATE_MODES:
        raise ValueError(f"update must be one of {UPDATE_MODES}, got {update!r}")
    own = runner is None
    if own:
        if env is None:
            raise ValueError("train_per_phase needs an env or a runner")
        runner = EpisodeRunner("local", env=env)
    batch = max(1, int(batch or runner.workers))
    in_flight = max(1, int(in_flight))
    history: list[dict] = []
    timings: dict = {}
    bar = None
    if progress:
        bar = tqdm(total=episodes * len(phases) * rounds, desc="q-learning", unit="ep")
    index = 0
    try:
        for rnd in range(rounds):
            for ph in phases:
                agent.epsilon_ = epsilon if rnd == 0 else max(epsilon_min, epsilon * 0.25)
                t0 = time.monotonic()
                eps, e = [], agent.epsilon_
                for _ in range(episodes):
                    eps.append(e)
                    e = agent.decayed_epsilon(e)
                tasks = [(ph, episode_seed(seed, index + k, TRAIN), eps[k]) for k in range(episodes)]
                index += episodes
                batches = [tasks[i:i + batch] for i in range(0, len(tasks), batch)]
                pending: deque = deque()
                nxt = 0
                while nxt < len(batches) and len(pending) < in_flight:
                    pending.append(runner.submit(batches[nxt], agent))
                    nxt += 1
                while pending:
                    done = runner.results(pending.popleft())
                    if nxt < len(batches):
                        pending.append(runner.submit(batches[nxt], agent))
                        nxt += 1
                    for ep in done:
                        row = _learn_episode(agent, ep, update)
                        row.update(phase=ph, round=rnd)
                        history.append(row)
                        if bar is not None:
                            bar.update(1)
                            bar.set_postfix(phase=ph, reward_med=f"{row['reward_median']:.3g}",
                                            eps=f"{agent.epsilon_:.3f}")
                t = timings.setdefault(str(ph), {"episodes": 0, "wall_s": 0.0})
                t["episodes"] += episodes
                t["wall_s"] = round(t["wall_s"] + time.monotonic() - t0, 1)
    finally:
        if bar is not None:
            bar.close()
        if own:
            runner.close()
    return history, timings


UPDATE_MODES = ("step", "episode")


def _learn_episode(agent: QLearningAgent, ep: Mapping[str, np.ndarray], update: str) -> dict:
    """The agent learns from one finished episode; returns its learning-curve row."""
    eps_used = agent.epsilon_
    if update == "episode":
        agent.update_batch(ep["states"], ep["actions"], ep["rewards"], ep["next_states"], ep["terminated"],
                           ep["truncated"])
    else:
        for k in range(len(ep["actions"])):
            agent.update(ep["states"][k], int(ep["actions"][k]), float(ep["rewards"][k]), ep["next_states"][k],
                         bool(ep["terminated"][k]), bool(ep["truncated"][k]))
    agent.end_episode()
    r = ep["rewards"]
    return {"episode": agent.n_episodes_, "steps": int(len(r)), "reward_sum": float(np.sum(r)),
            "reward_median": float(np.median(r)) if len(r) else float("nan"), "epsilon": eps_used,
            "p99_us_median": _median(ep["p99_us"]), "throughput_median": _median(ep["throughput"]),
            "both_sla_fraction": float(np.mean(ep["both"])) if "both" in ep else None}


def _median(x) -> float:
    a = np.asarray(x, np.float64)
    a = a[np.isfinite(a)]
    return float(np.median(a)) if a.size else float("nan")


def plot_curve(history: Sequence[Mapping[str, Any]], path: str, header: Mapping[str, Any]) -> None:
    """Median step reward, epsilon and (when recorded) the fraction of steps meeting both
    SLAs per episode, one line per phase (epsilon: one line when every phase has the same
    schedule)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    phases = sorted({h["phase"] for h in history})
    has_sla = any(h.get("both_sla_fraction") is not None for h in history)
    fig, axes = plt.subplots(1, 3 if has_sla else 2, figsize=(15 if has_sla else 10, 3.6))
    many = max([sum(1 for h in history if h["phase"] == ph) for ph in phases] or [0]) > 60
    # Every phase starts its own epsilon schedule; when they are all the same, six lines
    # drawn over each other would show only the last phase's colour.
    schedules = {tuple(r["epsilon"] for r in history if r["phase"] == ph) for ph in phases}
    shared_epsilon = len(phases) > 1 and len(schedules) == 1
    if shared_epsilon:
        eps = next(iter(schedules))
        axes[1].plot(np.arange(1, len(eps) + 1), eps, color="k", label="every phase")
    for ph in phases:
        rows = [h for h in history if h["phase"] == ph]
        x = np.arange(1, len(rows) + 1)
        rew = np.asarray([r["reward_median"] for r in rows], float)
        if many:  # hundreds of episodes: a running median over 25 reads better than dots
            axes[0].plot(x, _running(rew, 25, np.median), lw=1, label=f"phase {ph}")
        else:
            axes[0].plot(x, rew, marker=".", label=f"phase {ph}")
        if not shared_epsilon:
            axes[1].plot(x, [r["epsilon"] for r in rows], label=f"phase {ph}")
        if has_sla:
            both = np.asarray([np.nan if r.get("both_sla_fraction") is None else r["both_sla_fraction"]
                               for r in rows], float)
            axes[2].plot(x, _running(both, 25 if many else 1, np.mean), lw=1, label=f"phase {ph}")
    axes[0].set_yscale("symlog")
    axes[0].set_xlabel("episode (per phase)")
    axes[0].set_ylabel("median step reward" + ("\n(median of 25)" if many else ""))
    axes[1].set_xlabel("episode (per phase)")
    axes[1].set_ylabel("epsilon")
    if has_sla:
        axes[2].set_xlabel("episode (per phase)")
        axes[2].set_ylabel("fraction of steps meeting both SLAs" + ("\n(mean of 25)" if many else ""))
        axes[2].set_ylim(-0.02, 1.02)
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # episodes: no "2.5"
        if phases:  # no Q-learning episodes (pretraining only): empty axes, no legend
            ax.legend(fontsize=7)
    fig.suptitle(f"Q-learning: env {header['env']}, device {header['device']}, window {header['window_s']} s, "
                 f"SLA {header['sla']}", fontsize=8)
    fig.tight_layout()
    try:
        jsonfiles.save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)


def _running(x: np.ndarray, n: int, fn) -> np.ndarray:
    """fn over the last n values at every point (fewer at the start)."""
    return np.asarray([fn(x[max(0, i - n + 1):i + 1]) for i in range(len(x))], float)


__all__ = ["UPDATE_MODES", "ROUNDS_MAX", "pretrained_agent", "resumed_agent", "train_per_phase", "plot_curve"]
