"""Emulated device profiles: find and load them, build the device model, wrap engines.

Profiles are data (``nvmw/data/devices/<name>.toml`` naming FAST'20 CSV columns); they
are parsed by the one C++ loader, ``_core.load_device_profile``. See docs/device.md.
The comparison of model, data and emulation (tables, plot) is `nvmw.lab.device`."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from nvmw import _core
from nvmw.errors import InvalidArgumentError

#: Access size at which the profiles reproduce the bandwidth-vs-threads sweep.
REFERENCE_BYTES = 2 << 20

ProfileLike = Union[str, "os.PathLike[str]", "_core.DeviceProfile"]


def core_file_name(path: "str | os.PathLike[str]") -> str:
    """`path` as the core's file readers and writers take it (UTF-8 text).
    InvalidArgumentError naming it for a name that is not UTF-8 (Linux allows any bytes;
    Python carries them as surrogates, which the binding refused with a TypeError)."""
    name = os.fspath(path)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{os.fsencode(name)!r}: the file name is not UTF-8 (rename the file)") from None
    return name


def devices_dir() -> Path:
    """Directory holding the shipped profiles (``nvmw/data/devices``)."""
    return Path(__file__).resolve().parent / "data" / "devices"


def list_profiles() -> List[str]:
    """Names of the shipped profiles, sorted (``none``, ``optane-1dimm``, ...)."""
    return sorted(p.stem for p in devices_dir().glob("*.toml"))


def load_profile(name_or_path: ProfileLike) -> "_core.DeviceProfile":
    """A profile by name (see :func:`list_profiles`), by path to a ``.toml`` file, or
    an already built ``_core.DeviceProfile`` (validated and returned as is).

    Raises NotFoundError for an unknown name or missing file (the message lists the
    known profiles) and InvalidArgumentError for a malformed profile or CSV."""
    if isinstance(name_or_path, _core.DeviceProfile):
        name_or_path.validate()
        return name_or_path
    if isinstance(name_or_path, os.PathLike):
        name_or_path = os.fspath(name_or_path)
    if not isinstance(name_or_path, str):
        raise InvalidArgumentError(
            f"device profile must be a name, a path or a DeviceProfile, not {type(name_or_path).__name__}")
    return _core.load_device_profile(str(devices_dir()), core_file_name(name_or_path))


def model(profile: ProfileLike) -> "_core.DeviceModel":
    """The device model of a profile: ``service_time_ns(op, bytes, n)``,
    ``bandwidth(op, n, bytes)`` (GB/s), ``mixed_service_time_ns(op, bytes, readers, writers)``."""
    return _core.DeviceModel(load_profile(profile))


def wrap_engine(core_engine: "_core.Engine", name: Optional[ProfileLike], *,
                write_stalls: bool = True, seed: int = 42) -> "_core.Engine":
    """Wrap a ``_core.Engine`` in the emulated device `name`; ``None``, ``"none"`` or any
    passthrough profile returns `core_engine` itself (no wrapper at all). The wrapper
    keeps the wrapped engine alive."""
    if name is None or (isinstance(name, str) and name == "none"):
        return core_engine
    profile = load_profile(name)
    if profile.passthrough:
        return core_engine
    return _core.emulate_device(core_engine, profile, write_stalls=write_stalls, seed=seed)


def device_stats(engine: "_core.Engine") -> Dict[str, Any]:
    """The emulator's own accounting of an engine returned by :func:`wrap_engine`."""
    return _core.emulated_device_stats(engine)


def profile_to_dict(profile: ProfileLike) -> Dict[str, Any]:
    """Every field of a profile as plain Python (JSON-ready)."""
    p = load_profile(profile)
    out: Dict[str, Any] = {"name": p.name, "description": p.description,
                           "passthrough": p.passthrough}
    if p.passthrough:
        return out
    out.update(read_latency_ns=p.read_latency_ns, write_latency_ns=p.write_latency_ns,
               write_stall_ns=p.write_stall_ns, write_stall_probability=p.write_stall_probability)
    for field in ("read_bandwidth", "write_bandwidth", "read_size_efficiency",
                  "write_size_efficiency", "mix_factor"):
        c = getattr(p, field)
        out[field] = {"x": list(c.x), "y": list(c.y)}
    return out
