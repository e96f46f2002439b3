"""Emulated Optane device, the lab side: compare model, FAST'20 data and emulation
(curve tables, closed-loop benchmark through the emulator, the model-vs-data plot).
Profiles themselves are loaded by `nvmw.devices`. See docs/device.md.

    python -m nvmw.lab.device --plot device.png [--emulate]
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, Iterable, List, Optional

from nvmw import _core, jsonfiles
from nvmw.devices import REFERENCE_BYTES, ProfileLike, load_profile, model
from nvmw.errors import InvalidArgumentError


def curve_table(profile: ProfileLike, threads: Iterable[int] = range(1, 33),
                bytes: int = REFERENCE_BYTES) -> List[Dict[str, float]]:
    """Per thread count: model bandwidth (GB/s) and service time (us) of one access of
    `bytes` for reads and writes, with that many accessors of the same kind."""
    m = model(profile)
    if m.profile.passthrough:
        raise InvalidArgumentError(f"profile {m.profile.name!r} has no device model")
    rows = []
    for n in threads:
        rows.append({
            "threads": n,
            "read_gbps": m.bandwidth("read", n, bytes),
            "write_gbps": m.bandwidth("write", n, bytes),
            "read_service_us": m.service_time_ns("read", bytes, n) / 1e3,
            "write_service_us": m.service_time_ns("write", bytes, n) / 1e3,
        })
    return rows


def bench(profile: ProfileLike, op: str = "write", threads: int = 1, bytes: int = 1 << 20,
          warmup_ms: int = 50, duration_ms: int = 250) -> Dict[str, Any]:
    """Closed-loop real threads through the emulated device (C++): bandwidth from the
    emulator's accounting (``emulated_gbps``) and the clients' wall clock (``wall_gbps``)."""
    return _core.device_bench(load_profile(profile), op, threads, bytes, warmup_ms, duration_ms)


def plot(path: str, profiles: Iterable[str] = ("optane-1dimm", "optane-6dimm"),
         emulate: bool = False) -> str:
    """Model vs FAST'20 data: bandwidth vs threads (read, write) per profile and access-
    size efficiency; with `emulate`, add points measured through the emulated device with
    real threads (writes, 1 MB; takes a few seconds). Writes a PNG and returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = list(profiles)
    fig, axes = plt.subplots(1, len(profiles) + 1, figsize=(5 * (len(profiles) + 1), 4))
    dense = list(range(1, 33))
    for ax, name in zip(axes, profiles):
        p = load_profile(name)
        m = _core.DeviceModel(p)
        for op, colour in (("read", "tab:blue"), ("write", "tab:red")):
            data = getattr(p, f"{op}_bandwidth")
            ax.plot(data.x, data.y, "o", color=colour, ms=4, label=f"{op}: FAST'20 data")
            ax.plot(dense, [m.bandwidth(op, n, REFERENCE_BYTES) for n in dense], "-",
                    color=colour, label=f"{op}: model, 2 MB")
            ax.plot(dense, [n * 4096 / m.service_time_ns(op, 4096, n) for n in dense], ":",
                    color=colour, label=f"{op}: model, 4 KB incl. latency")
        if emulate:
            pts = [1, 2, 4, 8, 16, 24]
            got = [bench(p, "write", n, 1 << 20, 30, 150)["emulated_gbps"] for n in pts]
            ax.plot(pts, got, "x", color="black", ms=7, label="write: emulated, real threads")
        ax.set_title(p.description or name)
        ax.set_xlabel("concurrent accessors")
        ax.set_ylabel("bandwidth (GB/s)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax = axes[-1]
    for name, style in zip(profiles, ("-", "--")):
        p = load_profile(name)
        m = _core.DeviceModel(p)
        for op, colour in (("read", "tab:blue"), ("write", "tab:red")):
            eff = getattr(p, f"{op}_size_efficiency")
            sizes = [32, *eff.x]
            ref = m.bandwidth(op, 1, REFERENCE_BYTES)
            ax.plot(eff.x, eff.y, "o", color=colour, ms=3)
            ax.plot(sizes, [m.bandwidth(op, 1, int(s)) / ref for s in sizes], style, color=colour,
                    label=f"{name} {op}")
    ax.set_xscale("log", base=2)
    ax.set_title("access-size efficiency (points: data)")
    ax.set_xlabel("access size (bytes)")
    ax.set_ylabel("bandwidth / bandwidth at 2 MB")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        jsonfiles.save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nvmw.lab.device", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plot", metavar="PNG", help="write the model-vs-data figure")
    parser.add_argument("--emulate", action="store_true",
                        help="add emulated points measured with real threads (slower)")
    parser.add_argument("--table", metavar="PROFILE", help="print the model's curve as JSON")
    args = parser.parse_args(argv)
    if not args.plot and not args.table:
        parser.error("nothing to do: give --plot PNG and/or --table PROFILE")
    if args.table:
        json.dump(curve_table(args.table), sys.stdout, indent=1)
        print()
    if args.plot:
        print(plot(args.plot, emulate=args.emulate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
