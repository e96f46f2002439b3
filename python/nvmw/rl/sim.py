"""The simulator as a Gymnasium environment, and its parameter files.

`SimEnv` has the spaces, reward, info keys and methods of `nvmw.rl.envs.RealEnv`, but each
step advances a virtual-time discrete-event model of nvmw (`_core.Simulator`, C++) by one
window instead of waiting for one: the phase's own traces (the same `build_trace` as the
real replays), its client threads, the middleware's permits, a processor-shared CPU and
the device model. Each window's steady rest is fast-forwarded unless `exact=True`
(docs/sim.md): a 200-step episode at 1 s windows takes about 0.1 s of CPU.

It exists so that training (the thesis's hundreds of 200-step episodes per phase) takes
minutes, not days. The model's free parameters (CPU costs, wake-up cost, copy bandwidth,
jitter) live in a JSON file (`nvmw/data/sim/<device>.json`) written by
`nvmw.lab.simfit.fit` / `nvmw sim fit` from a sweep of the real system; the file also
records how well the fitted model reproduces that sweep (Spearman rank correlation of
configurations, median p99 and throughput errors).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.registration import EnvSpec

from nvmw import _core
from nvmw.control.loop import Reading
from nvmw.control.sla import SLASpec
from nvmw.devices import load_profile
from nvmw.rl.envs import ControlEnv, check_count
from nvmw.rl.simrun import check_window_s
from nvmw.workloads.phases import phase_workloads

# Parameter files: nvmw.rl.simparams (importable without NumPy or Gymnasium).
from nvmw.rl.simparams import FIT_NAMES, PARAM_NAMES, SIM_DIR, default_params, list_params, load_params  # noqa: E402,F401
from nvmw.rl.simparams import save_params  # noqa: E402,F401


#: Which window-stats key of its class each state feature is ("interactive_queue_size" ->
#: stats["interactive"]["queue_len_end"]), the order being the core's STATE_NAMES.
_STATE_STAT_KEYS = {"threads": "threads", "queue_size": "queue_len_end", "block_size": "mean_block_bytes",
                    "write_ratio": "write_ratio"}
_STATE_FEATURES = tuple((cls, feature) for cls, _, feature in (n.partition("_") for n in _core.STATE_NAMES))


class SimEnv(ControlEnv):
    """The simulated system under a phase workload, one (virtual) monitor window per step.

    Same constructor keywords as RealEnv where they apply, plus `params` (fitted parameter
    file, name or dict; default: the shipped fit for `device`), `trace_seeds` (how many
    distinct trace seeds episodes draw from; traces are cached per seed) and `exact`
    (True: simulate every window whole instead of fast-forwarding its steady rest, see
    docs/sim.md). Deterministic: the same reset seed gives the same episode."""

    def __init__(self, phase: int = 1, *, window_s: float = 1.0, max_episode_steps: int = 200,
                 sla: SLASpec | str | None = None, device: str | None = "optane-1dimm", control: bool = True,
                 max_threads: int = 32, initial_threads: tuple[int, int] | None = None,
                 params: Any = None, warmup_windows: int = 1, trace_seeds: int = 4,
                 no_control_max_inflight: int = 200, exact: bool = False):
        window_s = check_window_s(window_s)
        super().__init__(phase, max_episode_steps=max_episode_steps, sla=sla, max_threads=max_threads,
                         initial_threads=initial_threads, control=control, window_s=window_s)
        self.device = device or "none"
        self._profile = None if self.device == "none" else load_profile(self.device)
        self.params = load_params(params, self.device)
        self.warmup_windows = check_count(warmup_windows, "warmup_windows")
        self.trace_seeds = check_count(trace_seeds, "trace_seeds", 1)  # 0 or -3 used to be 1 without a word
        self.no_control_max_inflight = int(no_control_max_inflight)
        self.exact = bool(exact)
        self.sim = None
        self._offered = float("nan")
        self.spec = EnvSpec(id="nvmw/Sim-v0", entry_point="nvmw.rl.sim:SimEnv",
                            kwargs={"phase": phase, "window_s": window_s, "max_episode_steps": max_episode_steps,
                                    "device": device, "control": control, "max_threads": max_threads})

    def _load(self, phase: int, seed: int) -> None:
        wi, wb, self._offered = phase_workloads(int(phase), seed % self.trace_seeds)
        offset = float(self.np_random.uniform(0.0, wi["period_us"]))
        self.sim.set_workload(wi, wb, offset)

    def _restart(self, phase, threads, workload_seed):
        self.sim = _core.Simulator(self.params, self._profile, control=self.control,
                                   interactive_threads=threads[0], batch_threads=threads[1],
                                   max_threads=self.max_threads,
                                   no_control_max_inflight=self.no_control_max_inflight,
                                   window_s=self.window_s, seed=workload_seed, fast_forward=not self.exact)
        self._load(phase, workload_seed)
        for _ in range(self.warmup_windows):
            self.sim.run_window()

    def apply_threads(self, interactive, batch):
        self.sim.set_threads(interactive, batch)

    def _switch_phase(self, phase):
        self._load(phase, int(self.np_random.integers(0, 2**31 - 1)))

    def read_window(self) -> Reading:
        if self.sim is None:
            raise RuntimeError("call reset() before step()")
        stats = self.sim.run_window()
        # The state in the core's order (thesis Table 3.2), read off the window's stats.
        obs = np.array([stats[cls][_STATE_STAT_KEYS[feature]] for cls, feature in _STATE_FEATURES],
                       dtype=np.float64)
        return Reading(obs=obs, stats=stats)

    def _offered_ops_per_s(self):
        return self._offered

    def close(self):
        super().close()
        self.sim = None


__all__ = ["SimEnv", "load_params", "default_params", "list_params", "save_params", "PARAM_NAMES", "FIT_NAMES",
           "SIM_DIR"]
