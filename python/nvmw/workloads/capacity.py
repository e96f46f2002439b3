"""This machine's measured capacity, the yardstick of the contended phases.

A capacity file (JSON, written by ``nvmw calibrate --capacity``; one ships per device in
``nvmw/data/capacity/``) states what the device profile can move (peak write and read
bandwidth of the device model) and what the middleware serves (interactive capacity: the
most small requests per second closed-loop clients get through it on this machine). A
contended phase states its offered load relative to these numbers (``offered_write_bw =
1.75``: 1.75 x the device's peak write bandwidth), and `nvmw.workloads.phases.load_phase`
turns the factors into request rates with `rate_for`.

Which file: an explicit argument (a path, a shipped device name, a dict or a `Capacity`),
else the environment variable ``NVMW_CAPACITY`` (a path or a shipped name), else the
shipped ``optane-1dimm`` file."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from nvmw import jsonfiles

CAPACITY_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "capacity")
#: Environment variable naming the capacity file (a path or a shipped name) to use by default.
CAPACITY_ENV = "NVMW_CAPACITY"
#: The capacity file used when none is named.
DEFAULT_CAPACITY = "optane-1dimm"
#: Phase-file keys that state a class's offered load relative to capacity, and what they scale.
FACTOR_KEYS = {
    "offered_write_bw": "the device's peak write bandwidth",
    "offered_read_bw": "the device's peak read bandwidth",
    "capacity_rate": "the middleware's interactive capacity",
}
#: Factors outside (0, MAX_FACTOR] are rejected as typos.
MAX_FACTOR = 100.0
#: The largest numbers a capacity file may hold: far above any device (the FAST'20 Optane
#: DIMMs peak near 40 GB/s interleaved) or middleware (about 1.4 M requests/s measured
#: here). Past them a contended phase offers so many requests per window that the
#: simulator takes minutes, then hours, per window.
MAX_CAPACITY = {"write_bytes_per_s": 1e12, "read_bytes_per_s": 1e12, "interactive_ops_per_s": 1e9}

CapacityLike = Union[str, "os.PathLike[str]", Mapping[str, Any], "Capacity", None]


@dataclass(frozen=True)
class Capacity:
    """The numbers a contended phase is scaled to."""

    device: str
    """Device profile the bandwidths come from."""
    write_bytes_per_s: float
    """Peak write bandwidth of the device model (over concurrent accessors)."""
    read_bytes_per_s: float
    """Peak read bandwidth of the device model."""
    interactive_ops_per_s: float
    """Most small requests per second closed-loop clients got through the middleware."""
    source: str = ""
    """Where the numbers came from (file path, or "dict")."""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """The rest of the file (how it was measured)."""

    def describe(self) -> str:
        source = self.source
        if source and os.path.dirname(os.path.abspath(source)) == CAPACITY_DIR:
            # A shipped file by its name: the install path says nothing about the numbers.
            source = f"shipped {os.path.basename(source)}"
        return (f"capacity {self.device}: write {self.write_bytes_per_s / 1e9:.2f} GB/s, read "
                f"{self.read_bytes_per_s / 1e9:.2f} GB/s, interactive {self.interactive_ops_per_s:,.0f} ops/s"
                + (f" ({source})" if source else ""))


def shipped_capacity_path(device: str = DEFAULT_CAPACITY) -> str:
    return os.path.join(CAPACITY_DIR, f"{device}.json")


def list_capacities() -> list[str]:
    """Devices with a shipped capacity file."""
    if not os.path.isdir(CAPACITY_DIR):
        return []
    return sorted(n[:-5] for n in os.listdir(CAPACITY_DIR) if n.endswith(".json"))


def capacity_from_dict(d: Mapping[str, Any], source: str = "dict") -> Capacity:
    """A `Capacity` from the JSON layout `nvmw calibrate --capacity` writes; ValueError
    naming the missing or bad field otherwise."""
    try:
        device = d["device"]
        values = {"write_bytes_per_s": d["device_bandwidth"]["write_bytes_per_s"],
                  "read_bytes_per_s": d["device_bandwidth"]["read_bytes_per_s"],
                  "interactive_ops_per_s": d["interactive"]["ops_per_s"]}
    except (KeyError, TypeError) as e:
        raise ValueError(f"{source}: not a capacity file (missing {e}); write one with "
                         f"`nvmw calibrate --capacity --out FILE`") from None
    for k, v in values.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{source}: {k} must be a positive number, got {v!r}")
        if v > MAX_CAPACITY[k]:
            raise ValueError(f"{source}: {k} must be at most {MAX_CAPACITY[k]:g}, got {v!r}")
    return Capacity(device=str(device), source=source, extra=dict(d),
                    **{k: float(v) for k, v in values.items()})


def load_capacity(spec: CapacityLike = None) -> Capacity:
    """The capacity to scale to: `spec` (a `Capacity`, a dict, a path, or the name of a
    shipped file such as "optane-1dimm"), else $NVMW_CAPACITY, else the shipped
    optane-1dimm file. ValueError when the file is missing or malformed."""
    if isinstance(spec, Capacity):
        return spec
    if isinstance(spec, Mapping):
        return capacity_from_dict(spec)
    if spec is None:
        spec = os.environ.get(CAPACITY_ENV) or DEFAULT_CAPACITY
    spec = os.fspath(spec)
    path = spec
    if not os.path.exists(path) and os.sep not in spec and not spec.endswith(".json"):
        path = shipped_capacity_path(spec)
    if not os.path.exists(path):
        raise ValueError(f"no capacity file {spec!r} (shipped: {list_capacities()}); measure one with "
                         f"`nvmw calibrate --capacity --out FILE` and name it with --capacity or ${CAPACITY_ENV}")
    try:
        data = jsonfiles.load(path, "a capacity file")
    except OSError as e:
        raise ValueError(f"{path}: cannot read the capacity file ({e.strerror})") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: not a capacity file (expected a JSON object)")
    return capacity_from_dict(data, source=path)


def check_factor(key: str, value: Any, where: str) -> float:
    """A capacity factor as a float; ValueError unless it is a number in (0, MAX_FACTOR]."""
    if key not in FACTOR_KEYS:
        raise ValueError(f"{where}: unknown capacity factor {key!r} (one of {sorted(FACTOR_KEYS)})")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= MAX_FACTOR:
        raise ValueError(f"{where}: {key} must be a number in (0, {MAX_FACTOR:g}] "
                         f"(x {FACTOR_KEYS[key]}), got {value!r}")
    return float(value)


def rate_for(key: str, factor: float, cap: Capacity, *, request_bytes: Optional[int],
             write_ratio: Optional[float], where: str = "") -> float:
    """Requests per second that offer `factor` x the capacity quantity `key` names:

    offered_write_bw: factor x write bandwidth / (write_ratio x request_bytes): the class's
      writes alone offer that many bytes per second (its reads come on top);
    offered_read_bw:  factor x read bandwidth / ((1 - write_ratio) x request_bytes);
    capacity_rate:    factor x interactive capacity (requests of any size)."""
    factor = check_factor(key, factor, where)
    if key == "capacity_rate":
        return factor * cap.interactive_ops_per_s
    if not request_bytes or request_bytes <= 0:
        raise ValueError(f"{where}: {key} needs fixed_bytes (the request size the bandwidth is divided by)")
    if write_ratio is None:
        raise ValueError(f"{where}: {key} needs write_ratio (the share of requests that move the bytes)")
    share = float(write_ratio) if key == "offered_write_bw" else 1.0 - float(write_ratio)
    if share <= 0:
        raise ValueError(f"{where}: {key} with write_ratio {write_ratio} offers no "
                         f"{'writes' if key == 'offered_write_bw' else 'reads'}")
    bw = cap.write_bytes_per_s if key == "offered_write_bw" else cap.read_bytes_per_s
    return factor * bw / (share * float(request_bytes))


__all__ = ["Capacity", "CAPACITY_DIR", "CAPACITY_ENV", "DEFAULT_CAPACITY", "FACTOR_KEYS", "MAX_FACTOR",
           "capacity_from_dict", "check_factor", "list_capacities", "load_capacity", "rate_for",
           "shipped_capacity_path"]
