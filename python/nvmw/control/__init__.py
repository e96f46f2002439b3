"""Control of the middleware's two pools: the SLA spec and its reward (thesis
Algorithm 1), controllers behind one interface, and the control loop every caller drives
(window -> stats -> controller -> thread counts).

The names below are imported on first use, so that `nvmw.control.sla` (standard library
only) can be imported without NumPy (the simulator's fixed-configuration runs)."""
from __future__ import annotations

import importlib

_WHERE = {
    **{n: "nvmw.control.controllers" for n in ("AIMD", "AgentController", "Controller", "Fixed", "Gradient",
                                                "NoControl", "OnlineAgentController", "OracleFixed",
                                                "PolicyController")},
    **{n: "nvmw.control.loop" for n in ("INFO_KEYS", "ControlLoop", "Reading", "Window", "drive")},
    **{n: "nvmw.control.sla" for n in ("Metrics", "SLASpec", "load_spec", "reward")},
}

__all__ = ["SLASpec", "Metrics", "load_spec", "reward", "Controller", "NoControl", "Fixed", "OracleFixed", "AIMD",
           "Gradient", "AgentController", "OnlineAgentController", "PolicyController", "ControlLoop", "Reading", "Window", "INFO_KEYS",
           "drive"]


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nvmw.control' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
