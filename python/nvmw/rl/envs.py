"""Gymnasium environments for the concurrency controller.

`RealEnv` drives the real middleware under a phase workload, one monitor window per step.
`SyntheticEnv` is a small analytic stand-in with the same spaces and info convention (for
unit tests and demos where no middleware is wanted; it is NOT the calibrated simulator,
which is `nvmw.rl.sim.SimEnv`). `SeqPhaseEnv` wraps any of them and switches phases in a
seeded random order (the evaluation's long run).

Every env is a plant of one `nvmw.control.loop.ControlLoop`: `step(action)` is one
iteration of that loop (action through the core's Table 3.3, next window, SLA verdict).
Info convention (every step, keys `nvmw.control.loop.INFO_KEYS`): "stats" (the full
window-stats dict, or None for synthetic envs without one), "p99_us" and "throughput"
(the values the SLA judges), "offered_ops_per_s", "phase", "threads" [i, b], "window_s",
"sla_latency_met", "sla_throughput_met", "control". Envs also offer `set_threads(i, b)`
and `switch_phase(n)` (threads kept) so controllers that set thread targets directly, and
the long run, can drive any of them."""
from __future__ import annotations

import math
from typing import Any, Mapping, Union

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from nvmw import _core
from nvmw.control.loop import ControlLoop, Reading, check_threads
from nvmw.control.sla import SLASpec, load_spec
from nvmw.middleware import Middleware
from nvmw.rl.simrun import check_steps, check_window_s
from nvmw.workloads.phases import DEFAULT_PHASES, Phase, PhaseWorkload, list_phases, load_phase


def check_count(value: Any, name: str, lo: int = 0) -> int:
    """`value` as an int; ValueError naming `name` unless it is a whole number >= lo
    (`warmup_windows`: a negative count used to discard no window without a word, 2.5 to
    discard two)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or int(value) != value or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


class ControlEnv(gym.Env):
    """Shared logic: spaces, seeding, thread bookkeeping, reward, info, truncation.

    Subclasses are the loop's plant: they implement `_restart(phase, threads, workload_seed)`,
    `apply_threads(i, b)`, `read_window() -> Reading`, `_switch_phase(phase)` and
    `_offered_ops_per_s()`."""

    metadata = {"render_modes": []}
    #: The phases this env can run: every shipped phase (thesis 1-4, contended 5-6).
    phases: tuple[int, ...] = tuple(list_phases())

    def __init__(self, phase: int = 1, *, max_episode_steps: int = 200, sla: SLASpec | str | None = None,
                 max_threads: int = 32, initial_threads: tuple[int, int] | None = None,
                 control: bool = True, window_s: float = 1.0):
        self._check_phase(phase)
        for name, value in (("max_episode_steps", max_episode_steps), ("max_threads", max_threads)):
            if isinstance(value, (bool, str)) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        window_s = check_window_s(window_s)
        if initial_threads is not None:
            check_threads(initial_threads, max_threads)
        self.phase = int(phase)
        self.max_episode_steps = int(max_episode_steps)
        # The loop holds the SLA spec, the thread bound and the control mode (see the properties).
        self.loop = ControlLoop(self, sla if isinstance(sla, SLASpec) else load_spec(sla),
                                max_threads=int(max_threads), control=bool(control))
        self.initial_threads = None if initial_threads is None else tuple(int(x) for x in initial_threads)
        self.window_s = float(window_s)
        # Finite bounds per feature of the core's state (names "<class>_<feature>"): threads <=
        # max, queues/blocks far above any real value, ratios in [0, 1].
        bound = {"threads": max_threads, "queue_size": 1e9, "block_size": 2.0**32, "write_ratio": 1.0}
        high = np.array([bound[name.partition("_")[2]] for name in _core.STATE_NAMES], dtype=np.float32)
        self.observation_space = spaces.Box(np.zeros(len(high), np.float32), high, dtype=np.float32)
        self.action_space = spaces.Discrete(_core.N_ACTIONS)
        self._t = 0
        self._reset_done = False

    def _check_phase(self, phase: Any) -> int:
        # bool is an int (True == 1) and 2.5 would truncate to 2: neither names a phase.
        if isinstance(phase, (bool, np.bool_)) or phase not in self.phases or int(phase) != phase:
            raise ValueError(f"phase must be one of {self.phases}, got {phase!r}")
        return int(phase)

    @property
    def sla(self) -> SLASpec:
        """The SLA spec that judges every window (and so the reward)."""
        return self.loop.sla

    @property
    def control(self) -> bool:
        """False: the no-control baseline (no pools; actions are ignored)."""
        return self.loop.control

    @property
    def max_threads(self) -> int:
        return self.loop.max_threads

    @property
    def threads(self) -> tuple[int, int]:
        return self.loop.threads

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        """Restart the phase workload and the thread configuration.

        options: "phase" (one of `phases`), "threads" ((i, b), "random", or "keep"). Without "threads"
        the constructor's initial_threads are used, else a random pair from np_random. The
        returned observation carries the new threads and zeros for the window features (no
        window of the new episode has been observed yet), so a seeded reset is reproducible."""
        super().reset(seed=seed)
        opts = dict(options or {})
        unknown = set(opts) - {"phase", "threads"}
        if unknown:
            raise ValueError(f"unknown reset options: {sorted(unknown)}")
        phase = self._check_phase(opts.get("phase", self.phase))
        spec = opts.get("threads", self.initial_threads if self.initial_threads is not None else "random")
        if isinstance(spec, str):
            if spec not in ("keep", "random"):
                raise ValueError(f"threads must be (interactive, batch), 'random' or 'keep', got {spec!r}")
            if spec == "keep":
                threads = self.loop.threads
            else:
                threads = tuple(int(x) for x in self.np_random.integers(1, self.max_threads + 1, size=2))
        else:
            threads = check_threads(spec, self.max_threads)
        workload_seed = int(self.np_random.integers(0, 2**31 - 1))
        self.phase = phase
        self.loop.restart(threads)
        self._t = 0
        self._restart(phase, threads, workload_seed)
        self._reset_done = True
        obs = np.zeros(8, dtype=np.float32)
        obs[0], obs[1] = threads
        return obs, {"phase": phase, "threads": list(threads), "window_s": self.window_s,
                     "control": self.control}

    def _check_reset(self, what: str) -> None:
        # Before the first reset (or after close) there is no backend: RealEnv and SimEnv
        # failed on None, SyntheticEnv made up a window.
        if not self._reset_done:
            raise RuntimeError(f"call reset() before {what}()")

    def set_threads(self, interactive: int, batch: int) -> None:
        """Set both pools directly (for controllers that output thread targets)."""
        self._check_reset("set_threads")
        self.loop.set_threads(interactive, batch)

    def switch_phase(self, phase: int) -> None:
        """Change the running workload to another phase, keeping the threads."""
        self._check_reset("switch_phase")
        self.phase = self._check_phase(phase)
        self._switch_phase(self.phase)

    def step(self, action):
        self._check_reset("step")
        # Discrete.contains takes True as action 1: a bool is not an action index.
        if isinstance(action, (bool, np.bool_)) or not self.action_space.contains(action):
            raise ValueError(f"action must be an int in [0, {_core.N_ACTIONS}), got {action!r}")
        w = self.loop.step(int(action))
        self._t += 1
        truncated = self._t >= self.max_episode_steps
        m = w.metrics
        info = {
            "stats": w.stats,
            "p99_us": m.p99_us,
            "throughput": m.throughput,
            "offered_ops_per_s": float(self._offered_ops_per_s()),
            "phase": self.phase,
            # No-control has no pools: report 0 workers (as the observation does).
            "threads": list(w.threads) if self.control else [0, 0],
            "window_s": self.window_s,
            "sla_latency_met": m.latency_met,
            "sla_throughput_met": m.throughput_met,
            "control": self.control,
        }
        obs = np.clip(np.asarray(w.obs, dtype=np.float32), self.observation_space.low, self.observation_space.high)
        return obs, float(m.reward), False, bool(truncated), info

    def close(self):
        """Release the backend; the env can be reset (and then stepped) again."""
        self._reset_done = False
        super().close()

    # --- backend hooks --------------------------------------------------------------
    def _restart(self, phase: int, threads: tuple[int, int], workload_seed: int) -> None:
        raise NotImplementedError

    def apply_threads(self, interactive: int, batch: int) -> None:
        raise NotImplementedError

    def read_window(self) -> Reading:
        raise NotImplementedError

    def _switch_phase(self, phase: int) -> None:
        raise NotImplementedError

    def _offered_ops_per_s(self) -> float:
        return float("nan")


class RealEnv(ControlEnv):
    """The real middleware under a phase workload (nvmw.workloads.phases), one window per step.

    The middleware and its engine are created at the first reset and reused; each reset
    restarts the phase workload (seeded from np_random) and sets the threads, then discards
    `warmup_windows` windows so the first step sees only the new episode. Nondeterministic
    by nature (real time), which its spec declares. `phase` may also be a loaded `Phase`
    (e.g. from a TOML file of one's own): the env then runs that phase only.
    `rate_scale` multiplies both classes' offered rates."""

    def __init__(self, phase: Union[int, Phase] = 1, *, window_s: float = 1.0, max_episode_steps: int = 200,
                 sla: SLASpec | str | None = None, engine: str = "memory", path: str | None = None,
                 device: str | None = "optane-1dimm", control: bool = True, max_threads: int = 32,
                 initial_threads: tuple[int, int] | None = None, warmup_windows: int = 1,
                 window_timeout_s: float | None = None, rate_scale: float = 1.0):
        window_s = check_window_s(window_s)
        self._phase_defs: dict[int, Phase] = {}
        if isinstance(phase, Phase):
            self._phase_defs[phase.number] = phase
            self.phases = (phase.number,)
            phase = phase.number
        super().__init__(phase, max_episode_steps=max_episode_steps, sla=sla, max_threads=max_threads,
                         initial_threads=initial_threads, control=control, window_s=window_s)
        self.engine = engine
        self.path = path
        self.device = device or "none"
        self.warmup_windows = check_count(warmup_windows, "warmup_windows")
        self.window_timeout_s = window_timeout_s or max(5.0, 20 * window_s)
        self.rate_scale = float(rate_scale)
        self.mw = None
        self.workload = None
        self._seq = 0
        self._workload_seed = 0
        self._paused = False
        self.spec = EnvSpec(id="nvmw/Real-v0", entry_point="nvmw.rl.envs:RealEnv", nondeterministic=True,
                            kwargs={"phase": phase, "window_s": window_s, "max_episode_steps": max_episode_steps,
                                    "engine": engine, "path": path, "device": device, "control": control,
                                    "max_threads": max_threads, "sla": sla if not isinstance(sla, SLASpec) else None})

    def _ensure_middleware(self, threads: tuple[int, int]) -> None:
        if self.mw is None:
            self.mw = Middleware(self.path, engine=self.engine, interactive_threads=threads[0],
                                 batch_threads=threads[1], max_threads=self.max_threads,
                                 window_s=self.window_s, control=self.control,
                                 device=None if self.device == "none" else self.device)

    def _start_workload(self, phase: int, seed: int) -> None:
        if self.workload is not None:
            self.workload.stop()
            self.workload = None
        definition = self._phase_defs.get(phase) or load_phase(phase)
        self.workload = PhaseWorkload(definition, self.mw.core, seed=seed, rate_scale=self.rate_scale)
        self.workload.start()

    def _restart(self, phase, threads, workload_seed):
        self._paused = False
        self._ensure_middleware(threads)
        if self.control:
            self.mw.set_threads(*threads)
        self._workload_seed = workload_seed
        self._start_workload(phase, workload_seed)
        self._seq = int(self.mw.get_stats()["seq"])
        for _ in range(self.warmup_windows):
            self._seq = int(self.mw.wait_for_window(self._seq, self.window_timeout_s)["seq"])

    def apply_threads(self, interactive, batch):
        self.mw.set_threads(interactive, batch)

    def _switch_phase(self, phase):
        # A new workload seed per switch, drawn from np_random, keeps the long run replayable.
        self._start_workload(phase, int(self.np_random.integers(0, 2**31 - 1)))
        if self._paused:
            # Windows closed while paused are empty: start over from a fresh one.
            self._paused = False
            self._seq = int(self.mw.get_stats()["seq"])
            for _ in range(self.warmup_windows):
                self._seq = int(self.mw.wait_for_window(self._seq, self.window_timeout_s)["seq"])

    def pause(self) -> dict | None:
        """Stop the workload (threads and store kept) until the next reset or phase switch:
        lets several envs take turns on one machine (the interleaved evaluation). Returns
        the stopped replays' results ({"interactive": ..., "batch": ...}), None if none ran."""
        if self.workload is None:
            return None
        results = self.workload.stop()
        self.workload = None
        self._paused = True
        return results

    def read_window(self) -> Reading:
        if self.mw is None:
            raise RuntimeError("call reset() before step()")
        stats = self.mw.wait_for_window(self._seq, self.window_timeout_s)
        self._seq = int(stats["seq"])
        state = list(self.mw.get_state())
        if not self.control:
            # No-control has no pools; report the callers' concurrency as "threads" 0.
            state[0], state[1] = 0.0, 0.0
        obs = np.maximum(np.asarray(state, dtype=np.float64), 0.0)
        return Reading(obs=obs, stats=stats)

    def _offered_ops_per_s(self):
        if self.workload is None:
            return float("nan")
        return float(self.workload.offered_ops_per_s())

    def close(self):
        super().close()
        if self.workload is not None:
            try:
                self.workload.stop()
            finally:
                self.workload = None
        if self.mw is not None:
            try:
                self.mw.close()
            finally:
                self.mw = None


class SyntheticEnv(ControlEnv):
    """Analytic two-pool model (no middleware, no real time): a cheap, seeded stand-in for
    tests and demos. Per phase: offered load per class, per-request service time, and an
    Optane-like contention knee where extra batch threads slow every request down.
    Not calibrated to any machine; use RealEnv (or the simulator) for measurements."""

    # phase -> (lam_i ops/s, lam_b ops/s, svc_i us, svc_b us, blk_i B, blk_b B, wr_i, wr_b, knee_b)
    PHASES = {
        1: (60_000, 50_000, 40.0, 100.0, 40, 800_000, 0.2, 0.5, 8),
        2: (45_000, 80_000, 40.0, 100.0, 40, 800_000, 0.2, 0.5, 10),
        3: (120_000, 60_000, 40.0, 25.0, 40, 4_096, 0.2, 0.0, 4),
        4: (90_000, 60_000, 60.0, 25.0, 500, 4_096, 0.9, 0.0, 5),
        # Contended variants of 1 and 2: the batch side offers far more than it can serve.
        5: (60_000, 200_000, 40.0, 100.0, 40, 800_000, 0.2, 0.5, 8),
        6: (45_000, 200_000, 40.0, 100.0, 40, 800_000, 0.2, 0.5, 10),
    }
    phases = tuple(PHASES)
    # Goals that this model can meet (the thesis's 250k ops/s is out of its range).
    DEFAULT_SLA = SLASpec(lat_goal=250.0, tp_goal=100_000.0, name="synthetic",
                          notes="goals for SyntheticEnv only; thesis scaling bounds")

    def __init__(self, phase: int = 1, *, max_episode_steps: int = 200, sla: SLASpec | str | None = None,
                 max_threads: int = 32, initial_threads: tuple[int, int] | None = None,
                 control: bool = True, noise: float = 0.05, window_s: float = 1.0):
        super().__init__(phase, max_episode_steps=max_episode_steps, sla=sla if sla is not None else self.DEFAULT_SLA,
                         max_threads=max_threads, initial_threads=initial_threads, control=control,
                         window_s=window_s)
        # NaN noise made every window's p99 and reward NaN; a negative one failed at the first step.
        if isinstance(noise, (bool, str)) or not 0.0 <= float(noise) < math.inf:
            raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
        self.noise = float(noise)
        self._backlog = [0.0, 0.0]
        self.spec = EnvSpec(id="nvmw/Synthetic-v0", entry_point="nvmw.rl.envs:SyntheticEnv",
                            kwargs={"phase": phase, "max_episode_steps": max_episode_steps,
                                    "max_threads": max_threads, "control": control, "noise": noise})

    def _restart(self, phase, threads, workload_seed):
        self._backlog = [0.0, 0.0]

    def apply_threads(self, interactive, batch):
        pass

    def _switch_phase(self, phase):
        pass

    def _offered_ops_per_s(self):
        lam_i, lam_b = self.PHASES[self.phase][:2]
        return float(lam_i + lam_b)

    def model(self, threads: tuple[int, int], phase: int | None = None) -> tuple[float, float, float, float]:
        """Noise-free (p99_us, throughput, interactive capacity, batch capacity) of a config."""
        lam_i, lam_b, svc_i, svc_b, *_rest, knee = self.PHASES[phase or self.phase]
        i, b = threads
        if not self.control:
            i, b = 200, 200  # callers run unthrottled: maximal contention
        # Past the knee every extra batch thread slows the device for everyone.
        slow = 1.0 + 0.15 * max(0, b - knee) + 0.03 * max(0, i - 12)
        cap_i = i * 1e6 / (svc_i * slow)
        cap_b = min(b, knee) * 1e6 / (svc_b * slow)
        rho = min(lam_i / cap_i, 0.999)
        p99 = svc_i * slow * (1.0 + 4.6 * rho / (1.0 - rho))
        if lam_i > cap_i:
            p99 += 5_000.0 * (lam_i / cap_i - 1.0) * 10
        tp = min(lam_i, cap_i) + min(lam_b, cap_b)
        return p99, tp, cap_i, cap_b

    def read_window(self) -> Reading:
        lam_i, lam_b, _si, _sb, blk_i, blk_b, wr_i, wr_b, _k = self.PHASES[self.phase]
        threads = self.loop.threads
        p99, tp, cap_i, cap_b = self.model(threads)
        z = self.np_random.normal(0.0, self.noise, size=2)
        p99 *= math.exp(z[0])
        tp *= math.exp(z[1])
        for k, (lam, cap) in enumerate(((lam_i, cap_i), (lam_b, cap_b))):
            self._backlog[k] = max(0.0, self._backlog[k] + (lam - cap) * self.window_s * 0.01)
        obs = np.array([threads[0], threads[1], self._backlog[0], self._backlog[1],
                        blk_i, blk_b, wr_i, wr_b], dtype=np.float64)
        return Reading(obs=obs, p99_us=p99, throughput=tp)


class SeqPhaseEnv(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """The long run: one episode of `total_steps` steps whose phase changes every
    `switch_every` steps, phases drawn in a seeded random order (each block of len(phases)
    segments is a shuffled permutation, so every phase gets equal time). Threads carry over
    across switches; only the first segment resets them. `total_steps` and `switch_every`
    are integers in [1, RUN_WINDOWS_MAX] (`nvmw.rl.simrun.check_steps`)."""

    def __init__(self, env: ControlEnv, *, total_steps: int = 4000, switch_every: int = 200,
                 phases: tuple[int, ...] = DEFAULT_PHASES, initial_threads: tuple[int, int] | None = (15, 15)):
        total_steps = check_steps(total_steps, "total_steps")
        switch_every = check_steps(switch_every, "switch_every")
        # Recorded so that Gymnasium (check_env, spec) can rebuild the wrapper.
        gym.utils.RecordConstructorArgs.__init__(self, total_steps=total_steps, switch_every=switch_every,
                                                 phases=phases, initial_threads=initial_threads)
        gym.Wrapper.__init__(self, env)
        self.total_steps = int(total_steps)
        self.switch_every = int(switch_every)
        inner = env.unwrapped
        # No phase at all used to make reset() loop forever drawing empty permutations.
        self.phases = tuple(inner._check_phase(p) for p in phases)
        if not self.phases:
            raise ValueError("phases must name at least one phase")
        self.initial_threads = initial_threads
        inner.max_episode_steps = max(inner.max_episode_steps, self.total_steps)
        self.schedule_: list[int] = []
        self._t = 0

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        rng = np.random.default_rng(seed)
        n_segments = -(-self.total_steps // self.switch_every)
        order: list[int] = []
        while len(order) < n_segments:
            order.extend(int(p) for p in rng.permutation(self.phases))
        self.schedule_ = order[:n_segments]
        self._t = 0
        opts = dict(options or {})
        opts["phase"] = self.schedule_[0]
        if self.initial_threads is not None and "threads" not in opts:
            opts["threads"] = self.initial_threads
        obs, info = self.env.reset(seed=seed, options=opts)
        info["segment"] = 0
        return obs, info

    def step(self, action):
        if self._t >= self.total_steps:
            raise RuntimeError(f"the long run ended after {self.total_steps} steps: call reset()")
        if self._t > 0 and self._t % self.switch_every == 0:
            self.env.unwrapped.switch_phase(self.schedule_[self._t // self.switch_every])
        obs, r, term, trunc, info = self.env.step(action)
        self._t += 1
        info["segment"] = (self._t - 1) // self.switch_every
        return obs, r, term, self._t >= self.total_steps, info
