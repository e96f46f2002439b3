"""Reinforcement learning for the middleware's thread pools (thesis 3.4): Gymnasium
environments (`RealEnv`, `SimEnv`, `SyntheticEnv`, `SeqPhaseEnv`, `make_env`), the
Q-learning agent of Algorithm 2 (`QLearningAgent`) and its offline pretraining
(`nvmw.rl.pretrain`). The SLA spec, reward and controllers are `nvmw.control`.
Importing this package does not start anything."""
from nvmw.rl.agent import QLearningAgent
from nvmw.rl.envs import ControlEnv, RealEnv, SeqPhaseEnv, SyntheticEnv
from nvmw.rl.registry import ENV_KINDS, make_env
from nvmw.rl.sim import SimEnv

__all__ = ["QLearningAgent", "ControlEnv", "RealEnv", "SimEnv", "SyntheticEnv", "SeqPhaseEnv", "ENV_KINDS",
           "make_env"]
