"""Controllers behind one interface: `reset()` and `act(obs, info) -> action | (i, b)`.

An int is a thesis Table 3.3 action (0..8); a pair is a target (interactive, batch) thread
count. The control loop (nvmw.control.loop) applies either. `info` is the previous
window's info (the reset info before the first window): it carries "p99_us",
"throughput", "phase", "threads" and "stats" (the keys of nvmw.control.loop.INFO_KEYS).
`requires_control` False means the run needs the middleware in no-control mode;
`initial_threads` is the (interactive, batch) pair a run starts from, or None to start
from whatever the run chooses (the controller's first decision takes over from there)."""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from nvmw import jsonfiles
from nvmw.control.sla import SLASpec, reward
from nvmw.middleware import DEFAULT_MAX_THREADS

Decision = "int | tuple[int, int]"


class Controller:
    """Base class. Subclasses override act(); reset() clears per-run state."""

    name = "controller"
    requires_control = True
    initial_threads: "tuple[int, int] | None" = None

    def reset(self) -> None:
        pass

    def act(self, obs: np.ndarray, info: Mapping[str, Any]):  # -> int | tuple[int, int]
        raise NotImplementedError


class NoControl(Controller):
    """The thesis baseline: no pools at all (the env runs the middleware with control=False)."""

    name = "no-control"
    requires_control = False

    def act(self, obs, info):
        return 0


class Fixed(Controller):
    """Fixed pool sizes (thesis baseline: I15/B15)."""

    def __init__(self, interactive: int = 15, batch: int = 15):
        if interactive < 1 or batch < 1:
            raise ValueError("fixed thread counts must be >= 1")
        self.interactive, self.batch = int(interactive), int(batch)
        self.name = f"fixed-I{self.interactive}B{self.batch}"
        self.initial_threads = (self.interactive, self.batch)

    def act(self, obs, info):
        return (self.interactive, self.batch)


class OracleFixed(Controller):
    """Per-phase best fixed configuration: knows the current phase (info["phase"]) and
    looks its best (i, b) up in a table built from a sweep. An upper reference, not a
    deployable controller (a real system is not told its phase).

    A phase the table lacks is an error, not a silent fallback: `check_phases` refuses
    the table before a run whose phases are known (the line-ups do this), and `act`
    raises if such a phase turns up anyway. Only a window told no phase at all (no
    "phase" in info, or a negative one, as the network service passes) gets `default`.
    `source` is the table's file, named in the errors (None for a table built in code)."""

    name = "oracle"

    def __init__(self, table: Mapping[int, Sequence[int]], default: Sequence[int] = (15, 15),
                 source: "str | os.PathLike | None" = None):
        if not table:
            raise ValueError("oracle table is empty")
        self.table = {int(k): (int(v[0]), int(v[1])) for k, v in table.items()}
        self.default = (int(default[0]), int(default[1]))
        self.source = None if source is None else os.fspath(source)

    def _label(self) -> str:
        return f"oracle table {self.source}" if self.source else "oracle table"

    def check_phases(self, phases: Sequence[int]) -> None:
        """ValueError naming the table (its file) and every phase of `phases` it has no
        entry for: a run over those phases would have nothing to look up."""
        missing = sorted({int(p) for p in phases} - set(self.table))
        if missing:
            raise ValueError(f"{self._label()} has no entry for phase{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(map(str, missing))}, which the run uses (it covers "
                             f"{', '.join(map(str, sorted(self.table)))}): calibrate over every phase of the "
                             "run (`nvmw calibrate`) or run only the phases the table covers")

    def act(self, obs, info):
        phase = int(info.get("phase", -1))
        if phase < 0:  # no phase told (e.g. the network service): nothing to look up
            return self.default
        try:
            return self.table[phase]
        except KeyError:
            raise ValueError(f"{self._label()} has no entry for phase {phase} (it covers "
                             f"{', '.join(map(str, sorted(self.table)))})") from None

    @staticmethod
    def best_configs(rows: Sequence[Mapping[str, Any]], spec: SLASpec) -> dict[int, tuple[int, int]]:
        """Best (i, b) per phase: the highest median Algorithm-1 reward over the windows of
        each configuration. rows: dicts with phase, interactive_threads, batch_threads,
        p99_us, throughput (one row per window, or one per configuration)."""
        by_cfg: dict[tuple[int, int, int], list[float]] = {}
        for r in rows:
            key = (int(r["phase"]), int(r["interactive_threads"]), int(r["batch_threads"]))
            by_cfg.setdefault(key, []).append(reward(float(r["p99_us"]), float(r["throughput"]), spec))
        if not by_cfg:
            raise ValueError("no sweep rows to choose from")
        best: dict[int, tuple[float, tuple[int, int]]] = {}
        for (ph, i, b), rs in by_cfg.items():
            med = float(np.median(rs))
            if ph not in best or med > best[ph][0]:
                best[ph] = (med, (i, b))
        return {ph: cfg for ph, (_m, cfg) in best.items()}

    @classmethod
    def from_sweep(cls, rows: Sequence[Mapping[str, Any]], spec: SLASpec) -> "OracleFixed":
        return cls(cls.best_configs(rows, spec))

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> "OracleFixed":
        """Load {"table": {"1": [i, b], ...}} as written by `nvmw calibrate`; ValueError
        naming the file for anything else (every phase an integer in ASCII digits 0-9, every
        entry two thread counts >= 1)."""
        data = jsonfiles.load(path, "an oracle table")
        table = data.get("table", data.get("oracle")) if isinstance(data, dict) else None
        if not isinstance(table, dict):
            raise ValueError(f"{path}: no 'table' mapping phase -> [i, b]")
        if not table:
            raise ValueError(f"{path}: the oracle table is empty")
        seen: dict[int, str] = {}
        for phase, cfg in table.items():
            # ASCII digits only: str.isdigit() is true for "١" (which int() reads as 1) and
            # for "²" (which int() refuses).
            if not (phase.strip().isascii() and phase.strip().isdigit()):
                raise ValueError(f"{path}: table key {phase!r} is not a phase number (decimal digits 0-9)")
            if int(phase) in seen:
                raise ValueError(f"{path}: table keys {seen[int(phase)]!r} and {phase!r} are both phase {int(phase)}")
            seen[int(phase)] = phase
            if not (isinstance(cfg, list) and len(cfg) == 2
                    and all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= DEFAULT_MAX_THREADS
                            for n in cfg)):
                # Past the pools' size the run would refuse the entry only when its phase came up.
                raise ValueError(f"{path}: phase {phase}: expected [interactive, batch] thread counts in "
                                 f"[1, {DEFAULT_MAX_THREADS}], got {cfg!r}")
        return cls(table, source=path)


def _clamp(x: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(x))))


class AIMD(Controller):
    """Additive-increase / multiplicative-decrease limits, one per class, aimed at the
    latency goal (Netflix concurrency-limits AIMDLimit, with 'p99 over goal' as the drop
    signal).

    Each window: if interactive p99 > goal, the batch limit is cut multiplicatively
    (batch work is what contends with interactive requests on the device), and the
    interactive limit grows by one if interactive requests are queueing (too few workers)
    or shrinks multiplicatively if they are not (too much concurrency). If p99 <= goal, the
    batch limit grows by one (probe for throughput) and the interactive limit grows by one
    only while its queue is backed up."""

    name = "aimd"

    def __init__(self, lat_goal_us: float, backoff: float = 0.75, initial: Sequence[int] = (8, 8),
                 min_threads: int = 1, max_threads: int = 32, queue_threshold: float = 1.0):
        if not 0 < backoff < 1:
            raise ValueError("backoff must be in (0, 1)")
        self.lat_goal_us = float(lat_goal_us)
        self.backoff = float(backoff)
        self.initial = (int(initial[0]), int(initial[1]))
        self.initial_threads = self.initial
        self.min_threads, self.max_threads = int(min_threads), int(max_threads)
        self.queue_threshold = float(queue_threshold)
        self.reset()

    def reset(self):
        self.limits_ = [float(self.initial[0]), float(self.initial[1])]

    def act(self, obs, info):
        p99 = info.get("p99_us")
        if p99 is None or not math.isfinite(p99):
            return self._target()
        queued_i = float(obs[2]) > self.queue_threshold
        i, b = self.limits_
        if p99 > self.lat_goal_us:
            b *= self.backoff
            i = i + 1 if queued_i else i * self.backoff
        else:
            b += 1
            if queued_i:
                i += 1
        self.limits_ = [min(self.max_threads, max(self.min_threads, i)),
                        min(self.max_threads, max(self.min_threads, b))]
        return self._target()

    def _target(self):
        return (_clamp(self.limits_[0], self.min_threads, self.max_threads),
                _clamp(self.limits_[1], self.min_threads, self.max_threads))


class Gradient(Controller):
    """Gradient limiter (Netflix Gradient2 / Envoy adaptive-concurrency style), one limit
    per class.

    gradient = clamp(reference / observed, min_gradient, 1); new = limit * gradient +
    queue_allowance(limit) (sqrt(limit)); limit <- (1 - smoothing) * limit + smoothing * new.
    Interactive: reference = latency goal, observed = interactive p99, so the limit shrinks
    only when the goal is missed and otherwise creeps up by the allowance. Batch: the same
    law driven by the interactive p99 (batch load is what hurts interactive latency) times
    the batch class's own gradient long-term/short-term p99 (exponential average vs this
    window), so a batch latency surge also backs it off."""

    name = "gradient"

    def __init__(self, lat_goal_us: float, smoothing: float = 0.3, min_gradient: float = 0.5,
                 initial: Sequence[int] = (8, 8), min_threads: int = 1, max_threads: int = 32,
                 long_window: int = 20):
        if not 0 < smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        self.lat_goal_us = float(lat_goal_us)
        self.smoothing = float(smoothing)
        self.min_gradient = float(min_gradient)
        self.initial = (int(initial[0]), int(initial[1]))
        self.initial_threads = self.initial
        self.min_threads, self.max_threads = int(min_threads), int(max_threads)
        self.long_window = int(long_window)
        self.reset()

    def reset(self):
        self.limits_ = [float(self.initial[0]), float(self.initial[1])]
        self.batch_long_p99_ = None

    def _grad(self, reference: float, observed: float) -> float:
        if observed <= 0 or not math.isfinite(observed):
            return 1.0
        return min(1.0, max(self.min_gradient, reference / observed))

    def _next(self, limit: float, gradient: float) -> float:
        new = limit * gradient + math.sqrt(limit)
        out = (1 - self.smoothing) * limit + self.smoothing * new
        return min(self.max_threads, max(self.min_threads, out))

    def act(self, obs, info):
        p99 = info.get("p99_us")
        if p99 is None or not math.isfinite(p99):
            return self._target()
        g_i = self._grad(self.lat_goal_us, p99)
        g_b = g_i
        stats = info.get("stats")
        if stats:
            bp99 = float(stats["batch"]["p99_us"])
            if bp99 > 0 and math.isfinite(bp99):  # an inf would stay in the long-term average for good
                if self.batch_long_p99_ is None:
                    self.batch_long_p99_ = bp99
                a = 2.0 / (self.long_window + 1)
                self.batch_long_p99_ = (1 - a) * self.batch_long_p99_ + a * bp99
                g_b *= self._grad(self.batch_long_p99_, bp99)
                g_b = max(self.min_gradient, g_b)
        self.limits_ = [self._next(self.limits_[0], g_i), self._next(self.limits_[1], g_b)]
        return self._target()

    def _target(self):
        return (_clamp(self.limits_[0], self.min_threads, self.max_threads),
                _clamp(self.limits_[1], self.min_threads, self.max_threads))


class AgentController(Controller):
    """A trained agent acting greedily (no exploration, no learning): a QLearningAgent, or
    the `nvmw.rl.policy.GreedyPolicy` saved beside one (same actions, no scikit-learn);
    anything with `greedy_action(obs) -> int`."""

    name = "q-learning"

    def __init__(self, agent, name: str | None = None):
        self.agent = agent
        if name:
            self.name = name

    def act(self, obs, info):
        return int(self.agent.greedy_action(obs))


class OnlineAgentController(AgentController):
    """A trained QLearningAgent that keeps learning while it controls (thesis Algorithm 2
    runs online): it acts greedily, and after every window updates its Q models on that
    transition plus `batch - 1` transitions drawn from a replay buffer of the last
    `replay` windows, with the Q step bounded to `learning_rate` (training uses 0.7). The
    replayed windows keep the phases seen earlier in the updates, so a long stretch of one
    phase does not overwrite what the agent knows of the others. The agent object is
    changed in place (save it afterwards to keep what it learned)."""

    name = "q-learning-online"

    def __init__(self, agent, *, learning_rate: float = 0.1, replay: int = 2000, batch: int = 16, seed: int = 0,
                 name: str | None = None):
        super().__init__(agent, name)
        if not 0.0 < learning_rate <= 1.0:
            raise ValueError("learning_rate must be in (0, 1]")
        if replay < 1 or batch < 1:
            raise ValueError("replay and batch must be >= 1")
        self.learning_rate = float(learning_rate)
        self.replay = int(replay)
        self.batch = int(batch)
        self.seed = int(seed)
        self.updates = 0
        self.reset()

    def reset(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self._buf: list[tuple] = []
        self._next = 0

    def observe(self, obs, action, reward_, next_obs, terminated, truncated, info) -> None:
        """Learn from one window (called by the run after every step)."""
        row = (np.asarray(obs, np.float64), int(action), float(reward_), np.asarray(next_obs, np.float64),
               bool(terminated), bool(truncated))
        if len(self._buf) < self.replay:
            self._buf.append(row)
        else:
            self._buf[self._next] = row
            self._next = (self._next + 1) % self.replay
        k = min(self.batch - 1, len(self._buf) - 1)
        picked = [row]
        if k > 0:
            newest = len(self._buf) - 1 if len(self._buf) < self.replay else (self._next - 1) % self.replay
            others = [i for i in self.rng.choice(len(self._buf), size=k + 1, replace=False) if i != newest][:k]
            picked += [self._buf[i] for i in others]
        cols = list(zip(*picked))
        self.agent.update_batch(np.stack(cols[0]), np.asarray(cols[1]), np.asarray(cols[2]), np.stack(cols[3]),
                                np.asarray(cols[4]), np.asarray(cols[5]), learning_rate=self.learning_rate)
        self.updates += 1


class PolicyController(Controller):
    """Any policy trained on the Gymnasium env: `policy(obs) -> action` (e.g.
    ``lambda o: sb3_model.predict(o, deterministic=True)[0]``)."""

    def __init__(self, policy: Callable[[np.ndarray], Any], name: str = "policy"):
        self.policy = policy
        self.name = name

    def act(self, obs, info):
        a = self.policy(obs)
        values = a if isinstance(a, tuple) and len(a) == 2 and not isinstance(a[0], np.ndarray) else (
            np.asarray(a).item(),)
        if any(int(v) != v for v in values):  # int() would truncate: 2.7 is not action 2
            raise ValueError(f"policy {self.name!r} returned {a!r}: actions and thread counts are integers")
        return tuple(int(v) for v in values) if len(values) == 2 else int(values[0])
