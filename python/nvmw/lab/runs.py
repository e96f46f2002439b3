"""What experiments share: the shipped agent and oracle files, and the run header every
report carries (cores, processor, env, device, window, SLA, phase set)."""
from __future__ import annotations

import os
import platform
from importlib import resources
from typing import TYPE_CHECKING, Any, Optional, Sequence

from nvmw.workloads.phases import DEFAULT_PHASES, describe_phase_set

if TYPE_CHECKING:  # the shipped files' paths are wanted without Gymnasium (nvmw.commands._sim_fast)
    from nvmw.rl.envs import ControlEnv


def data_path(*parts: str) -> str:
    """A file shipped in the package's data directory."""
    return str(resources.files("nvmw").joinpath("data", *parts))


def shipped_agent_path(device: str = "optane-1dimm") -> str:
    return data_path("agents", f"qlearning-{device}.joblib")


def shipped_oracle_path(device: str = "optane-1dimm") -> str:
    return data_path("sla", f"oracle-{device}.json")


def cpu_model() -> str:
    """The processor's model name (Linux: /proc/cpuinfo), else what `platform` knows.
    Latency figures move with it (the same phases give a different p99 on another
    processor), so every report states it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def phase_set_label(env_kind: str, phases: Optional[Sequence[int]] = None) -> str:
    """The phase set a run used (default `DEFAULT_PHASES`) and how its contended phases
    were scaled; the synthetic env has its own analytic phases."""
    phases = tuple(int(p) for p in (phases if phases is not None else DEFAULT_PHASES))
    if env_kind == "synthetic":
        return f"{','.join(map(str, phases))} (synthetic analytic model)"
    return describe_phase_set(phases)


def run_header(env_kind: str, env: ControlEnv, phases: Optional[Sequence[int]] = None, **extra: Any) -> dict[str, Any]:
    """What every report states: machine cores and processor, device profile, window
    length, SLA spec, phase set (`phases`, default `DEFAULT_PHASES`)."""
    sla = env.sla
    h = {
        "cores": os.cpu_count() or 1,
        "cpu": cpu_model(),
        "env": env_kind,
        "device": getattr(env, "device", "synthetic" if env_kind == "synthetic" else "none"),
        "window_s": env.window_s,
        "sla": f"{sla.name or 'custom'} (p99 {sla.latency_class} <= {sla.lat_goal:g} us, "
               f"{sla.throughput_class} >= {sla.tp_goal:,.0f} ops/s)",
        "phases": phase_set_label(env_kind, phases),
    }
    h.update(extra)
    return h


__all__ = ["cpu_model", "data_path", "shipped_agent_path", "shipped_oracle_path", "run_header", "phase_set_label"]
