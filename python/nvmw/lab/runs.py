"""Shared plumbing of the rl commands: building environments by name, the shipped
agent/SLA/oracle files, the default controller line-up, and the run header every report
carries (cores, device, window, SLA)."""
from __future__ import annotations

import os
from importlib import resources
from typing import Any

from nvmw.rl.envs import ControlEnv, RealEnv, SyntheticEnv
from nvmw.rl.sla import SLASpec, load_spec

ENV_KINDS = ("real", "synthetic", "sim")


def data_path(*parts: str) -> str:
    return str(resources.files("nvmw").joinpath("data", *parts))


def shipped_agent_path(device: str = "optane-1dimm") -> str:
    return data_path("agents", f"qlearning-{device}.joblib")


def shipped_oracle_path(device: str = "optane-1dimm") -> str:
    return data_path("sla", f"oracle-{device}.json")


def make_env(kind: str = "real", *, phase: int = 1, window_s: float = 1.0, sla: SLASpec | str | None = None,
             device: str = "optane-1dimm", engine: str = "memory", control: bool = True,
             max_episode_steps: int = 200, initial_threads=None, path: str | None = None,
             sim_params: Any = None) -> ControlEnv:
    """An environment by name. 'real': the middleware (RealEnv); 'synthetic': the analytic
    stand-in (tests/demos); 'sim': the simulator of DESIGN section 7 (nvmw.lab.sim.SimEnv,
    parameters `sim_params`: a fitted file, name or dict; default the shipped fit)."""
    if kind == "real":
        spec = sla if isinstance(sla, SLASpec) else load_spec(sla, device=device)
        return RealEnv(phase, window_s=window_s, sla=spec, device=device, engine=engine, control=control,
                       max_episode_steps=max_episode_steps, initial_threads=initial_threads, path=path)
    if kind == "synthetic":
        spec = sla if isinstance(sla, SLASpec) or sla is None else load_spec(sla)
        return SyntheticEnv(phase, sla=spec, control=control, max_episode_steps=max_episode_steps,
                            initial_threads=initial_threads, window_s=window_s)
    if kind == "sim":
        from nvmw.lab.sim import SimEnv

        spec = sla if isinstance(sla, SLASpec) else load_spec(sla, device=device)
        return SimEnv(phase, window_s=window_s, sla=spec, device=device, control=control,
                      max_episode_steps=max_episode_steps, initial_threads=initial_threads, params=sim_params)
    raise ValueError(f"unknown env {kind!r}: use one of {ENV_KINDS}")


def run_header(env_kind: str, env: ControlEnv, **extra: Any) -> dict[str, Any]:
    """What every report states: machine cores, device profile, window length, SLA spec."""
    sla = env.sla
    h = {
        "cores": os.cpu_count() or 1,
        "env": env_kind,
        "device": getattr(env, "device", "synthetic" if env_kind == "synthetic" else "none"),
        "window_s": env.window_s,
        "sla": f"{sla.name or 'custom'} (p99 {sla.latency_class} <= {sla.lat_goal:g} us, "
               f"{sla.throughput_class} >= {sla.tp_goal:,.0f} ops/s)",
    }
    h.update(extra)
    return h


def add_env_args(p, *, window_default: float = 0.1, steps: bool = True) -> None:
    """The environment options shared by collect/train/evaluate/calibrate."""
    p.add_argument("--env", choices=ENV_KINDS, default="real",
                   help="environment: the real middleware (default), the analytic synthetic stand-in, "
                        "or the fitted simulator")
    p.add_argument("--sim-params", default=None, help="--env sim: fitted simulator parameters (JSON path "
                   "or shipped name; default: the shipped fit for --device)")
    p.add_argument("--window", type=float, default=window_default, help="monitor window per step, seconds "
                   "(default %(default)s)")
    p.add_argument("--device", default="optane-1dimm", help="emulated device profile for --env real "
                   "(default %(default)s; 'none' for the raw engine)")
    p.add_argument("--engine", choices=["memory", "pmem"], default="memory",
                   help="engine under the middleware (default %(default)s)")
    p.add_argument("--pool", default=None, help="pool file for --engine pmem")
    p.add_argument("--sla", default=None, help="SLA spec: a TOML path or a shipped name (thesis, "
                   "calibrated-optane-1dimm); default: the calibrated spec for --device")
    if steps:
        p.add_argument("--steps", type=int, default=200, help="steps per episode (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)


def env_from_args(args, *, control: bool = True, phase: int = 1) -> ControlEnv:
    return make_env(args.env, phase=phase, window_s=args.window, sla=args.sla, device=args.device,
                    engine=args.engine, control=control, path=args.pool,
                    max_episode_steps=getattr(args, "steps", 200), sim_params=getattr(args, "sim_params", None))
