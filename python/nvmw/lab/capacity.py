"""Measure this machine's capacity (`nvmw calibrate --capacity`): what the contended phases
(nvmw.workloads.phases, 5 and 6) are scaled to.

- Device bandwidth: the peak write and read bandwidth of the device profile's model over
  1-32 concurrent accessors (at the profile's reference access size). The contended phases
  run on the emulated device over the memory engine, which holds every access for the
  model's service time, so the model's peak is what the device can move.
- Interactive capacity: the most small requests per second that closed-loop clients get
  through the middleware (no-control mode, no limit) on the memory engine wrapped in the
  emulated device, over a few client counts. It depends on the machine's cores and load."""
from __future__ import annotations

import os
import platform
import time
from typing import Callable, Optional, Sequence

from nvmw.devices import REFERENCE_BYTES, model
from nvmw.middleware import Middleware
from nvmw.rl.simrun import check_count
from nvmw.workloads.capacity import capacity_from_dict
from nvmw.workloads.ycsb import THREADS_MAX, YcsbConfig, YcsbWorkload

#: Client counts tried for the interactive capacity (the best one counts).
DEFAULT_CLIENTS = (1, 2, 4, 16, 64)
#: The most closed-loop clients of one measurement (`nvmw calibrate --capacity-clients`),
#: as `nvmw ycsb --threads`: one thread each, with its own stack.
CLIENTS_MAX = THREADS_MAX


def device_bandwidth(device: str, threads: Sequence[int] = range(1, 33), bytes: int = REFERENCE_BYTES) -> dict:
    """Peak write and read bandwidth (bytes/s) of the profile's model and where it peaks."""
    m = model(device)
    if m.profile.passthrough:
        raise ValueError(f"device profile {device!r} has no model (passthrough): the contended phases "
                         f"need an emulated device such as optane-1dimm")
    out = {"access_bytes": int(bytes), "source": "device model (FAST'20 curves), peak over "
           f"{min(threads)}-{max(threads)} concurrent accessors"}
    for op in ("write", "read"):
        curve = [(n, m.bandwidth(op, n, bytes) * 1e9) for n in threads]
        n_best, bw = max(curve, key=lambda t: t[1])
        out[f"{op}_bytes_per_s"] = bw
        out[f"{op}_peak_accessors"] = n_best
        out[f"{op}_bytes_per_s_at_32"] = dict(curve).get(32, curve[-1][1])
    return out


def interactive_capacity(device: str, *, engine: str = "memory", clients: Sequence[int] = DEFAULT_CLIENTS,
                         duration_s: float = 2.0, value_bytes: int = 64, read_proportion: float = 0.8,
                         records: int = 10_000, seed: int = 1,
                         progress: Optional[Callable[[str], None]] = None) -> dict:
    """Closed-loop YCSB clients (small values, phase-1-like 80/20 reads/updates, zipfian)
    through a fresh no-control middleware per client count; the best ops/s is the capacity.
    Each of `clients` is an integer in [1, CLIENTS_MAX]."""
    clients = [check_count(n, "clients", CLIENTS_MAX) for n in clients]
    rows = []
    for n in clients:
        with Middleware(None, engine=engine, device=None if device == "none" else device, control=False,
                        window_s=1.0) as mw:
            w = YcsbWorkload(mw, YcsbConfig(record_count=records, duration_s=duration_s,
                                            read_proportion=read_proportion, update_proportion=1 - read_proportion,
                                            distribution="zipfian", value_bytes=value_bytes, threads=int(n),
                                            load_threads=2, request_class="interactive", seed=seed))
            w.load()
            r = w.run()["all"]
        rows.append({"clients": int(n), "ops_per_s": float(r["ops_per_s"]), "p50_us": float(r["p50_us"]),
                     "p99_us": float(r["p99_us"]), "errors": int(r["errors"])})
        if progress is not None:
            progress(f"{n} client{'' if n == 1 else 's'}: {r['ops_per_s']:,.0f} ops/s, p99 {r['p99_us']:.1f} us")
    best = max(rows, key=lambda r: r["ops_per_s"])
    return {"ops_per_s": best["ops_per_s"], "clients": best["clients"], "engine": engine,
            "value_bytes": int(value_bytes), "read_proportion": float(read_proportion),
            "duration_s": float(duration_s), "mode": "no-control middleware, closed-loop clients",
            "per_clients": rows}


def measure_capacity(device: str = "optane-1dimm", *, engine: str = "memory",
                     clients: Sequence[int] = DEFAULT_CLIENTS, duration_s: float = 2.0,
                     command: str = "", progress: Optional[Callable[[str], None]] = None) -> dict:
    """The capacity file's content (as `nvmw.workloads.capacity.load_capacity` reads it)."""
    load_before = os.getloadavg()
    t0 = time.monotonic()
    out = {
        "device": device,
        "device_bandwidth": device_bandwidth(device),
        "interactive": interactive_capacity(device, engine=engine, clients=clients, duration_s=duration_s,
                                            progress=progress),
        "cores": os.cpu_count() or 1,
        "machine": platform.machine(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.monotonic() - t0, 1),
        "command": command or f"nvmw calibrate --capacity --device {device}",
    }
    capacity_from_dict(out, source="measurement")  # the file must load back
    return out


__all__ = ["DEFAULT_CLIENTS", "CLIENTS_MAX", "device_bandwidth", "interactive_capacity", "measure_capacity"]
