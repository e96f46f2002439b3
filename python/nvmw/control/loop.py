"""The control loop, written once: window -> stats -> controller -> thread counts.

`ControlLoop` is the plant side of one iteration: apply a decision (a thesis Table 3.3
action, through the core's own action table and clamping, or a target (interactive,
batch) pair), read the plant's next window, and judge it with the SLA spec. Every
Gymnasium environment steps through one. `drive` is the controller side: ask the
controller about the last window, apply its decision, step. Phase runs, the evaluation's
long run, calibration sweeps and agent training all drive their environment with it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

import numpy as np

from nvmw import _core
from nvmw.control.sla import Metrics, SLASpec

#: Keys of the info dict every environment step returns (and controllers receive).
INFO_KEYS = ("stats", "p99_us", "throughput", "offered_ops_per_s", "phase", "threads", "window_s",
             "sla_latency_met", "sla_throughput_met", "control")


@dataclass(frozen=True)
class Reading:
    """What a plant reports for one closed window."""

    obs: np.ndarray
    """The 8 state features (thesis Table 3.2, names in `_core.STATE_NAMES`)."""
    stats: Optional[Mapping[str, Any]] = None
    """The full window-stats dict (`_core.CLASS_STAT_KEYS` per class); None for an
    analytic model that has none."""
    p99_us: Optional[float] = None
    """Only when `stats` is None: the tail latency the model computed."""
    throughput: Optional[float] = None
    """Only when `stats` is None: the throughput the model computed."""


class Plant(Protocol):
    """What the loop controls: a source of monitor windows with resizable pools."""

    def apply_threads(self, interactive: int, batch: int) -> None:
        """Resize the two pools (only called in control mode)."""

    def read_window(self) -> Reading:
        """Block until the next window closes (or simulate it) and report it."""


@dataclass(frozen=True)
class Window:
    """One iteration's outcome: the plant's reading, the SLA's verdict, the threads."""

    obs: np.ndarray
    stats: Optional[Mapping[str, Any]]
    metrics: Metrics
    threads: tuple


def check_threads(threads: Sequence[int], max_threads: int) -> tuple[int, int]:
    """(i, b) as ints, or ValueError when either is outside [1, max_threads]."""
    i, b = threads
    if int(i) != i or int(b) != b or not (1 <= int(i) <= max_threads and 1 <= int(b) <= max_threads):
        raise ValueError(f"threads must be integers in [1, {max_threads}], got {tuple(threads)}")
    return int(i), int(b)


class ControlLoop:
    """Thread bookkeeping, decisions and window judging over one plant.

    In no-control mode (`control=False`) there are no pools: decisions are ignored and the
    plant is never resized."""

    def __init__(self, plant: Plant, sla: SLASpec, *, max_threads: int = 32, control: bool = True):
        self.plant = plant
        self.sla = sla
        self.max_threads = int(max_threads)
        self.control = bool(control)
        self._threads = (1, 1)

    @property
    def threads(self) -> tuple[int, int]:
        return self._threads

    def restart(self, threads: Sequence[int]) -> None:
        """Record the threads a plant was (re)started with, without resizing it."""
        self._threads = check_threads(threads, self.max_threads)

    def set_threads(self, interactive: int, batch: int) -> None:
        """Set both pools directly (checked against [1, max_threads])."""
        self._threads = check_threads((interactive, batch), self.max_threads)
        if self.control:
            self.plant.apply_threads(*self._threads)

    def apply(self, decision) -> None:
        """Apply a controller decision: a Table 3.3 action (the core's table and clamping)
        or a target (i, b) pair. The plant is resized only when the threads change."""
        if not self.control:
            return
        if isinstance(decision, (tuple, list)):
            new = check_threads(decision, self.max_threads)
        else:
            new = tuple(_core.apply_action(self._threads, int(decision), self.max_threads))
        if new != self._threads:
            self.set_threads(*new)

    def read(self) -> Window:
        """The plant's next window, judged by the SLA spec."""
        r = self.plant.read_window()
        nan = np.isnan(np.asarray(r.obs, dtype=np.float64))
        if nan.any():
            # NaN features would reach a controller as is (an agent's argmax then picks action 0).
            names = [n for n, bad in zip(_core.STATE_NAMES, nan) if bad]
            raise ValueError(f"the plant reported NaN state features: {', '.join(names)}")
        metrics = self.sla.evaluate(r.stats) if r.stats is not None else self.sla.judge(r.p99_us, r.throughput)
        return Window(obs=r.obs, stats=r.stats, metrics=metrics, threads=self._threads)

    def step(self, decision) -> Window:
        """One iteration: apply the decision, then read and judge the next window."""
        self.apply(decision)
        return self.read()


#: on_step(obs, action, reward, next_obs, terminated, truncated, info)
StepCallback = Callable[[np.ndarray, int, float, np.ndarray, bool, bool, dict], None]


def drive(env, controller, steps: int, obs, info, *, on_step: Optional[StepCallback] = None):
    """Run `controller` on a Gymnasium env built on a ControlLoop (possibly wrapped) for at
    most `steps` windows: act on the last window's (obs, info), apply the decision, step.

    A target pair is applied through the env's loop and the env steps with action 0 (keep);
    an action goes to `env.step`, so controllers that only return actions (an agent in
    training) can drive any Gymnasium env with a discrete action space. Returns (obs,
    info, steps_taken, ended), ended when the env terminated or truncated."""
    loop = getattr(env.unwrapped, "loop", None)
    for n in range(int(steps)):
        decision = controller.act(obs, info)
        if isinstance(decision, (tuple, list)):
            if loop is None:
                raise TypeError("a target (interactive, batch) pair needs an env built on a ControlLoop")
            loop.apply(decision)
            action = 0
        else:
            action = int(decision)
            if action != decision:  # int() would truncate 2.7 to action 2
                raise ValueError(f"controller {getattr(controller, 'name', controller)!r} decided {decision!r}: "
                                 f"an action is an integer in [0, {_core.N_ACTIONS})")
        next_obs, r, terminated, truncated, next_info = env.step(action)
        if on_step is not None:
            on_step(obs, action, r, next_obs, terminated, truncated, next_info)
        obs, info = next_obs, next_info
        if terminated or truncated:
            return obs, info, n + 1, True
    return obs, info, int(steps), False


__all__ = ["ControlLoop", "Plant", "Reading", "Window", "INFO_KEYS", "check_threads", "drive"]
