"""The simulator as a Gymnasium environment, and its parameter files.

`SimEnv` has the spaces, reward, info keys and methods of `nvmw.rl.envs.RealEnv`, but each
step advances a virtual-time discrete-event model of nvmw (`_core.Simulator`, C++) by one
window instead of waiting for one: the phase's own traces (the same `build_trace` as the
real replays), its client threads, the two queues and pools, a processor-shared CPU and
the device model. A 200-step episode takes well under a second.

It exists so that training (the thesis's hundreds of 200-step episodes per phase) takes
minutes, not days. The model's free parameters (CPU costs, wake-up cost, copy bandwidth,
jitter) live in a JSON file (`nvmw/data/sim/<device>.json`) written by
`nvmw.lab.simfit.fit` / `nvmw sim fit` from a sweep of the real system; the file also
records how well the fitted model reproduces that sweep (Spearman rank correlation of
configurations, median p99 and throughput errors).
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np
from gymnasium.envs.registration import EnvSpec

from nvmw import _core
from nvmw.control.loop import Reading
from nvmw.control.sla import SLASpec
from nvmw.devices import load_profile
from nvmw.rl.envs import ControlEnv
from nvmw.workloads.phases import phase_workloads

SIM_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "sim")
PARAM_NAMES = tuple(_core.SIM_PARAM_NAMES)
#: Parameters the fit moves (cores is the machine's, not fitted).
FIT_NAMES = ("background", "client_cpu_us", "wake_cpu_us", "op_cpu_us", "copy_bytes_per_ns", "jitter",
             "quantum_us")


#: Which window-stats key of its class each state feature is ("interactive_queue_size" ->
#: stats["interactive"]["queue_len_end"]), the order being the core's STATE_NAMES.
_STATE_STAT_KEYS = {"threads": "threads", "queue_size": "queue_len_end", "block_size": "mean_block_bytes",
                    "write_ratio": "write_ratio"}
_STATE_FEATURES = tuple((cls, feature) for cls, _, feature in (n.partition("_") for n in _core.STATE_NAMES))


def default_params() -> dict:
    """The C++ defaults (a rough 2-core VM; use a fitted file for measurements)."""
    return dict(_core.sim_default_params())


def load_params(name_or_path: "str | os.PathLike | Mapping | None" = None, device: str = "optane-1dimm") -> dict:
    """Simulator parameters: a dict (checked), a JSON path, a shipped name, or None for the
    shipped fit of `device` (falls back to the defaults when there is none)."""
    if isinstance(name_or_path, Mapping):
        params = dict(name_or_path.get("params", name_or_path))
    else:
        if name_or_path is None:
            path = os.path.join(SIM_DIR, f"{device}.json")
            if not os.path.exists(path):
                return default_params()
        else:
            path = os.fspath(name_or_path)
            if not os.path.exists(path) and not path.endswith(".json"):
                path = os.path.join(SIM_DIR, f"{path}.json")
        if not os.path.exists(path):
            raise FileNotFoundError(f"no simulator parameter file {name_or_path!r} (shipped: {list_params()})")
        with open(path) as fh:
            try:
                params = dict(json.load(fh)["params"])
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}: not a simulator parameter file ({e})") from None
    unknown = set(params) - set(PARAM_NAMES)
    if unknown:
        raise ValueError(f"unknown simulator parameters {sorted(unknown)}; known: {list(PARAM_NAMES)}")
    out = default_params()
    out.update({k: float(v) for k, v in params.items()})
    return out


def list_params() -> list[str]:
    if not os.path.isdir(SIM_DIR):
        return []
    return sorted(n[:-5] for n in os.listdir(SIM_DIR) if n.endswith(".json"))


class SimEnv(ControlEnv):
    """The simulated system under a phase workload, one (virtual) monitor window per step.

    Same constructor keywords as RealEnv where they apply, plus `params` (fitted parameter
    file, name or dict; default: the shipped fit for `device`) and `trace_seeds` (how many
    distinct trace seeds episodes draw from; traces are cached per seed). Deterministic:
    the same reset seed gives the same episode."""

    def __init__(self, phase: int = 1, *, window_s: float = 1.0, max_episode_steps: int = 200,
                 sla: SLASpec | str | None = None, device: str | None = "optane-1dimm", control: bool = True,
                 max_threads: int = 32, initial_threads: tuple[int, int] | None = None,
                 params: Any = None, warmup_windows: int = 1, trace_seeds: int = 4,
                 no_control_max_inflight: int = 200):
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        super().__init__(phase, max_episode_steps=max_episode_steps, sla=sla, max_threads=max_threads,
                         initial_threads=initial_threads, control=control, window_s=window_s)
        self.device = device or "none"
        self._profile = None if self.device == "none" else load_profile(self.device)
        self.params = load_params(params, self.device)
        self.warmup_windows = int(warmup_windows)
        self.trace_seeds = max(1, int(trace_seeds))
        self.no_control_max_inflight = int(no_control_max_inflight)
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
                                   window_s=self.window_s, seed=workload_seed)
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


def save_params(result: Mapping, path: str) -> None:
    """Write a parameter file ({"params", "fit", "run"}) as `load_params` reads it."""
    with open(path, "w") as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
        fh.write("\n")


__all__ = ["SimEnv", "load_params", "default_params", "list_params", "save_params", "PARAM_NAMES", "FIT_NAMES",
           "SIM_DIR"]
