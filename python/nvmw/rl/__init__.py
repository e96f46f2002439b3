"""Reinforcement-learning control of the middleware's thread pools (thesis 3.4, 4.3).

Reward and SLA specs (`reward`, `SLASpec`), the Q-learning agent (`QLearningAgent`),
Gymnasium environments (`RealEnv`, `SyntheticEnv`, `SeqPhaseEnv`), controllers behind one
interface, and the evaluation's long run. Importing this package does not start anything."""
from nvmw.rl.sla import SLASpec, load_spec, reward
from nvmw.rl.agent import QLearningAgent
from nvmw.rl.demo import demo_comparison
from nvmw.rl.envs import ACTION_DELTAS, STATE_NAMES, ControlEnv, RealEnv, SeqPhaseEnv, SyntheticEnv, apply_action

__all__ = [
    "SLASpec", "load_spec", "reward", "QLearningAgent", "RealEnv", "SyntheticEnv", "SeqPhaseEnv",
    "ControlEnv", "ACTION_DELTAS", "STATE_NAMES", "apply_action", "demo_comparison",
]
