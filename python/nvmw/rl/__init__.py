"""Reinforcement learning for the middleware's thread pools (thesis 3.4): Gymnasium
environments (`RealEnv`, `SimEnv`, `SyntheticEnv`, `SeqPhaseEnv`, `make_env`), the
Q-learning agent of Algorithm 2 (`QLearningAgent`) and its offline pretraining
(`nvmw.rl.pretrain`). The SLA spec, reward and controllers are `nvmw.control`.
Importing this package does not start anything, and imports the names below on first
use (the agent pulls in scikit-learn, which a simulator run does not need)."""
from __future__ import annotations

import importlib

_WHERE = {
    "QLearningAgent": "nvmw.rl.agent",
    **{n: "nvmw.rl.envs" for n in ("ControlEnv", "RealEnv", "SeqPhaseEnv", "SyntheticEnv")},
    **{n: "nvmw.rl.registry" for n in ("ENV_KINDS", "make_env")},
    "SimEnv": "nvmw.rl.sim",
}

__all__ = ["QLearningAgent", "ControlEnv", "RealEnv", "SimEnv", "SyntheticEnv", "SeqPhaseEnv", "ENV_KINDS",
           "make_env"]


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nvmw.rl' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
