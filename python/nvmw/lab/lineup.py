"""Controllers by name, the one spelling every command and experiment uses:

    none          the no-control baseline (no pools)
    fixed:I,B     fixed pool sizes (thesis baseline: fixed:15,15)
    aimd          AIMD limits aimed at the SLA's latency goal
    gradient      gradient limits aimed at the SLA's latency goal
    q-learning    the trained agent (the shipped one for the device unless a file is given;
                  with ControllerContext(online=True) it keeps learning during the run);
                  acting greedily it uses the policy file beside the agent when it is
                  current (nvmw.rl.policy), else the agent
    q-learning:FILE  the agent saved in FILE, reported as "q-learning:<file name without
                  .joblib>" (so two agents can run in one line-up)
    q-learning-online  the same agent, always learning during the run (also :FILE)
    oracle        the per-phase best fixed configuration of a calibration sweep (refused
                  when its table lacks a phase the run uses)

Older spellings ("no-control", a bare "fixed") are still accepted with a deprecation
note on stderr. More kinds can be added with `register_controller`."""
from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from nvmw.control.controllers import (AIMD, AgentController, Controller, Fixed, Gradient, NoControl,
                                      OnlineAgentController, OracleFixed)
from nvmw.control.sla import SLASpec
from nvmw.lab.runs import shipped_agent_path, shipped_oracle_path
from nvmw.rl.policy import check_layout, load_beside

#: The built-in controller names (fixed takes ":I,B").
CONTROLLER_NAMES = ("none", "fixed:I,B", "oracle", "aimd", "gradient", "q-learning[:FILE]", "q-learning-online[:FILE]")
#: The evaluation's default line-up: every built-in kind, fixed at the thesis's I15/B15.
DEFAULT_LINEUP = ("none", "fixed:15,15", "oracle", "aimd", "gradient", "q-learning")
#: Old spelling -> current one.
DEPRECATED_NAMES = {"no-control": "none"}


@dataclass
class ControllerContext:
    """What a controller name may need to become a controller."""

    sla: Optional[SLASpec] = None
    """The run's SLA spec: aimd and gradient aim at its latency goal."""
    device: str = "optane-1dimm"
    """Which shipped agent and oracle table to load (the device, or the env kind for
    environments other than the real middleware and the simulator)."""
    agent_path: Optional[str] = None
    """q-learning: this agent file instead of the shipped one."""
    oracle_path: Optional[str] = None
    """oracle: this table (from `nvmw calibrate`) instead of the shipped one."""
    fixed: tuple = (15, 15)
    """What the deprecated bare name "fixed" means."""
    online: bool = False
    """q-learning: keep learning during the run (OnlineAgentController)."""
    seed: int = 0
    """Seeds what a controller draws at random (the online agent's replay sampling)."""
    phases: Optional[tuple] = None
    """The phases the run will run, when known: a controller that cannot serve one of
    them (an oracle table without an entry for it) is refused when it is built."""


#: kind -> factory(argument after "kind:" or "", context) returning a controller with
#: `requires_control`, `initial_threads`, `reset()` and `act(obs, info) -> action | (i, b)`.
CONTROLLER_FACTORIES: dict[str, Callable[[str, ControllerContext], Any]] = {}


def register_controller(kind: str, factory: Callable[[str, ControllerContext], Any]) -> None:
    """Make `make_controller("kind:args")` build controllers with `factory(args, context)`."""
    CONTROLLER_FACTORIES[kind] = factory


def deprecated(old: str, new: str) -> None:
    """The one deprecation note for an old spelling, on stderr (commands keep working); not
    again in a command that executed itself again (nvmw.commands._util.ensure_pmem_force)."""
    if os.environ.get("NVMW_NOTES_SHOWN") == "1":
        return
    print(f"nvmw: '{old}' is deprecated; use '{new}'", file=sys.stderr)


def _no_argument(kind: str, arg: str) -> None:
    if arg:
        raise ValueError(f"the '{kind}' controller takes no argument")


def _none(arg: str, ctx: ControllerContext) -> Controller:
    _no_argument("none", arg)
    return NoControl()


def _fixed(arg: str, ctx: ControllerContext) -> Controller:
    if not arg:
        i, b = ctx.fixed
        deprecated("fixed", f"fixed:{i},{b}")
        return Fixed(i, b)
    # Decimal digits only, as everywhere else: int() also takes "+5", "1_0" and " 5".
    if not re.fullmatch(r"-?[0-9]+,-?[0-9]+", arg):
        raise ValueError(f"fixed controller wants 'fixed:I,B' (e.g. fixed:10,10), got 'fixed:{arg}'")
    i, b = (int(x) for x in arg.split(","))
    if i < 1 or b < 1:
        raise ValueError(f"fixed:{arg}: thread counts must be >= 1")
    return Fixed(i, b)


def _lat_goal(kind: str, ctx: ControllerContext) -> float:
    if ctx.sla is None:
        raise ValueError(f"the '{kind}' controller needs the run's SLA spec (its latency goal)")
    return ctx.sla.lat_goal


def _aimd(arg: str, ctx: ControllerContext) -> Controller:
    _no_argument("aimd", arg)
    return AIMD(_lat_goal("aimd", ctx))


def _gradient(arg: str, ctx: ControllerContext) -> Controller:
    _no_argument("gradient", arg)
    return Gradient(_lat_goal("gradient", ctx))


def _oracle(arg: str, ctx: ControllerContext) -> Controller:
    _no_argument("oracle", arg)
    path = ctx.oracle_path or shipped_oracle_path(ctx.device)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no oracle table at {path}: make one with `nvmw calibrate` "
                                "(`nvmw evaluate` takes it as --oracle FILE)")
    return OracleFixed.from_json(path)


def _q_learning(arg: str, ctx: ControllerContext) -> Controller:
    path = arg or ctx.agent_path or shipped_agent_path(ctx.device)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no trained agent at {path}: train one with `nvmw train` and name it as "
                                "q-learning:FILE (`nvmw evaluate` also takes --agent FILE)")
    kind = "q-learning-online" if ctx.online else "q-learning"
    name = f"{kind}:{os.path.basename(path).removesuffix('.joblib')}" if arg else None
    # Acting greedily needs only the policy file saved beside the agent; the agent itself
    # (its module imports scikit-learn) only to learn, or without a current policy file.
    policy = None if ctx.online else load_beside(path)
    if policy is not None:
        check_layout(policy.n_actions, policy.n_features, path)
        return AgentController(policy, name=name)
    from nvmw.rl.agent import QLearningAgent

    agent = QLearningAgent.load(path)
    if ctx.online:
        return OnlineAgentController(agent, seed=ctx.seed, name=name)
    return AgentController(agent, name=name)


def _q_learning_online(arg: str, ctx: ControllerContext) -> Controller:
    return _q_learning(arg, dataclasses.replace(ctx, online=True))


for _kind, _factory in (("none", _none), ("fixed", _fixed), ("aimd", _aimd), ("gradient", _gradient),
                        ("oracle", _oracle), ("q-learning", _q_learning), ("q-learning-online", _q_learning_online)):
    register_controller(_kind, _factory)


@dataclass
class _CallableController:
    """A plain function ``f(obs, info) -> action | (i, b)`` as a controller."""

    fn: Callable
    name: str = "callable"
    requires_control: bool = True
    initial_threads: Optional[tuple] = None

    def reset(self) -> None:
        pass

    def act(self, obs, info):
        return self.fn(obs, info)


def canonical_name(spec: str) -> str:
    """`spec` in the current spelling (a deprecated one is noted on stderr)."""
    kind, sep, arg = str(spec).partition(":")
    if kind in DEPRECATED_NAMES:
        new = DEPRECATED_NAMES[kind] + sep + arg
        deprecated(spec, new)
        return new
    return str(spec)


def make_controller(spec: Any, context: Optional[ControllerContext] = None):
    """A controller from a name (see the module docstring) or any registered "kind[:args]";
    a controller object (has `act`) is returned as is, a plain callable ``f(obs, info)`` is
    wrapped. ValueError for an unknown name; FileNotFoundError when a q-learning or
    oracle file is missing. With `context.phases` set, a controller that has
    `check_phases` (the oracle) is checked against them: ValueError naming its table and
    the phases it lacks."""
    context = context or ControllerContext()
    if hasattr(spec, "act"):
        controller = spec
    elif callable(spec):
        return _CallableController(spec)
    else:
        kind, _, arg = canonical_name(spec).partition(":")
        if kind not in CONTROLLER_FACTORIES:
            raise ValueError(f"unknown controller {spec!r}: use one of {', '.join(CONTROLLER_NAMES)}"
                             f" (registered kinds: {', '.join(sorted(CONTROLLER_FACTORIES))})")
        controller = CONTROLLER_FACTORIES[kind](arg, context)
    check = getattr(controller, "check_phases", None)
    if context.phases is not None and check is not None:
        check(context.phases)
    return controller


def build_controllers(names: Sequence[str], context: Optional[ControllerContext] = None) -> list:
    """The controllers of a line-up, in order."""
    return [make_controller(n, context) for n in names]


__all__ = ["CONTROLLER_NAMES", "DEFAULT_LINEUP", "DEPRECATED_NAMES", "ControllerContext", "CONTROLLER_FACTORIES",
           "register_controller", "make_controller", "build_controllers", "canonical_name", "deprecated"]
