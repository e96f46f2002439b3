"""Control of the middleware's two pools: the SLA spec and its reward (thesis
Algorithm 1), controllers behind one interface, and the control loop every caller drives
(window -> stats -> controller -> thread counts)."""
from nvmw.control.controllers import (AIMD, AgentController, Controller, Fixed, Gradient, NoControl, OracleFixed,
                                      PolicyController)
from nvmw.control.loop import INFO_KEYS, ControlLoop, Reading, Window, drive
from nvmw.control.sla import Metrics, SLASpec, load_spec, reward

__all__ = ["SLASpec", "Metrics", "load_spec", "reward", "Controller", "NoControl", "Fixed", "OracleFixed", "AIMD",
           "Gradient", "AgentController", "PolicyController", "ControlLoop", "Reading", "Window", "INFO_KEYS",
           "drive"]
