"""The simulator's parameter files (`nvmw/data/sim/<device>.json`, written by `nvmw sim
fit`): load, save, list. Standard library only, so that a fixed-configuration simulator
run (`nvmw.rl.simrun`) starts without NumPy or Gymnasium; `nvmw.rl.sim` re-exports all of
it."""
from __future__ import annotations

import json
import math
import numbers
import os
from typing import Mapping

from nvmw import _core, jsonfiles

SIM_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "sim")
PARAM_NAMES = tuple(_core.SIM_PARAM_NAMES)
#: Parameters the fit moves by default (cores is the machine's, not fitted).
FIT_NAMES = ("background", "client_cpu_us", "wake_cpu_us", "op_cpu_us", "copy_bytes_per_ns", "jitter",
             "quantum_us")


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
        data = jsonfiles.load(path, "a simulator parameter file")
        try:
            params = dict(data["params"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: not a simulator parameter file ({e})") from None
        return _checked(params, path)
    return _checked(params, "simulator parameters")


#: Parameters that must be > 0 (the others >= 0, and background < 1), as the core checks them.
_POSITIVE = ("cores", "copy_bytes_per_ns")
#: The shortest round-robin quantum taken, us (0 means processor sharing): the simulator
#: slices every piece of CPU work into quanta, so a window at 1e-300 us never ends, and
#: even 1e-4 us takes seconds per window. No scheduler slices finer than this; the fit
#: searches 1 to 20,000 us.
MIN_QUANTUM_US = 0.1


def _checked(params: dict, where: str) -> dict:
    """The defaults updated with `params`; ValueError naming `where` and the parameter for
    an unknown name or a value that is not a finite number (the core checks the ranges)."""
    unknown = set(params) - set(PARAM_NAMES)
    if unknown:
        raise ValueError(f"{where}: unknown simulator parameters {sorted(unknown)}; known: {list(PARAM_NAMES)}")
    for k, v in params.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"{where}: simulator parameter {k} must be a finite number, got {v!r}")
        if k in _POSITIVE and not v > 0:
            raise ValueError(f"{where}: simulator parameter {k} must be > 0, got {v!r}")
        if not v >= 0 or (k == "background" and not v < 1):
            raise ValueError(f"{where}: simulator parameter {k} must be "
                             f"{'in [0, 1)' if k == 'background' else '>= 0'}, got {v!r}")
        if k == "quantum_us" and 0 < v < MIN_QUANTUM_US:
            raise ValueError(f"{where}: simulator parameter quantum_us must be 0 (processor sharing) or at least "
                             f"{MIN_QUANTUM_US:g}, got {v!r}")
    out = default_params()
    out.update({k: float(v) for k, v in params.items()})
    return out


def list_params() -> list[str]:
    if not os.path.isdir(SIM_DIR):
        return []
    return sorted(n[:-5] for n in os.listdir(SIM_DIR) if n.endswith(".json"))


def save_params(result: Mapping, path: str) -> None:
    """Write a parameter file ({"params", "fit", "run"}) as `load_params` reads it."""
    with jsonfiles.open_output(path) as fh:
        json.dump(result, fh, indent=2, sort_keys=True)
        fh.write("\n")


__all__ = ["load_params", "default_params", "list_params", "save_params", "PARAM_NAMES", "FIT_NAMES", "SIM_DIR"]
