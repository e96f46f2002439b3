"""Environments by name: `make_env("real" | "synthetic" | "sim", ...)`, the one place
commands and experiments build an environment."""
from __future__ import annotations

from typing import Any

from nvmw.control.sla import SLASpec, load_spec
from nvmw.rl.envs import ControlEnv, RealEnv, SyntheticEnv
from nvmw.rl.sim import SimEnv
from nvmw.rl.simrun import check_steps

ENV_KINDS = ("real", "synthetic", "sim")


def make_env(kind: str = "real", *, phase: int = 1, window_s: float = 1.0, sla: SLASpec | str | None = None,
             device: str = "optane-1dimm", engine: str = "memory", control: bool = True,
             max_episode_steps: int = 200, initial_threads=None, path: str | None = None,
             sim_params: Any = None) -> ControlEnv:
    """An environment by name. 'real': the middleware (RealEnv); 'synthetic': the analytic
    stand-in (tests/demos); 'sim': the fitted simulator (SimEnv, parameters `sim_params`:
    a fitted file, name or dict; default the shipped fit for `device`). ValueError for
    `max_episode_steps` outside [1, RUN_WINDOWS_MAX] (`nvmw.rl.simrun.check_steps`)."""
    max_episode_steps = check_steps(max_episode_steps, "max_episode_steps")
    if kind == "real":
        spec = sla if isinstance(sla, SLASpec) else load_spec(sla, device=device)
        return RealEnv(phase, window_s=window_s, sla=spec, device=device, engine=engine, control=control,
                       max_episode_steps=max_episode_steps, initial_threads=initial_threads, path=path)
    if kind == "synthetic":
        spec = sla if isinstance(sla, SLASpec) or sla is None else load_spec(sla)
        return SyntheticEnv(phase, sla=spec, control=control, max_episode_steps=max_episode_steps,
                            initial_threads=initial_threads, window_s=window_s)
    if kind == "sim":
        spec = sla if isinstance(sla, SLASpec) else load_spec(sla, device=device)
        return SimEnv(phase, window_s=window_s, sla=spec, device=device, control=control,
                      max_episode_steps=max_episode_steps, initial_threads=initial_threads, params=sim_params)
    raise ValueError(f"unknown env {kind!r}: use one of {ENV_KINDS}")


__all__ = ["ENV_KINDS", "make_env"]
