"""What experiments share: the shipped agent and oracle files, and the run header every
report carries (cores, env, device, window, SLA)."""
from __future__ import annotations

import os
from importlib import resources
from typing import Any

from nvmw.rl.envs import ControlEnv


def data_path(*parts: str) -> str:
    """A file shipped in the package's data directory."""
    return str(resources.files("nvmw").joinpath("data", *parts))


def shipped_agent_path(device: str = "optane-1dimm") -> str:
    return data_path("agents", f"qlearning-{device}.joblib")


def shipped_oracle_path(device: str = "optane-1dimm") -> str:
    return data_path("sla", f"oracle-{device}.json")


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


__all__ = ["data_path", "shipped_agent_path", "shipped_oracle_path", "run_header"]
