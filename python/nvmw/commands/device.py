"""`nvmw device`: inspect the emulated-device profiles (list, show, curve), measure
the emulated device with real threads (bench) and plot model vs FAST'20 data."""
from __future__ import annotations

import argparse
import json
import os

from nvmw.commands import SUMMARIES
from nvmw.commands._args import int_in
from nvmw.commands._util import report_stream
from nvmw.devices import list_profiles, load_profile, profile_to_dict
from nvmw.lab.device import bench, curve_table, plot


_UINT32_MAX = (1 << 32) - 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("device", help=SUMMARIES["device"],
                       description=__doc__)
    dsub = p.add_subparsers(dest="device_command", metavar="ACTION")
    dsub.required = True

    q = dsub.add_parser("list", help="names of the shipped profiles")
    q.set_defaults(func=_list)

    q = dsub.add_parser("show", help="a profile's parameters")
    q.add_argument("profile", help="profile name or .toml path")
    q.add_argument("--json", action="store_true", help="machine-readable output")
    q.set_defaults(func=_show)

    q = dsub.add_parser("curve", help="model bandwidth and service time vs threads")
    q.add_argument("profile", help="profile name or .toml path")
    q.add_argument("--bytes", type=int_in(1, 1 << 40), default=2 << 20,
                   help="access size, bytes (default %(default)s)")
    q.add_argument("--max-threads", type=int_in(1, 4096), default=32,
                   help="the curve runs from 1 to this many threads (default %(default)s)")
    q.add_argument("--json", action="store_true", help="machine-readable output")
    q.set_defaults(func=_curve)

    q = dsub.add_parser("bench", help="real threads through the emulated device (JSON)")
    q.add_argument("profile", help="profile name or .toml path")
    q.add_argument("--op", choices=["read", "write"], default="write",
                   help="access type every thread issues (default %(default)s)")
    q.add_argument("--threads", type=int_in(1, 4096), default=1,
                   help="threads accessing the device at once (default %(default)s)")
    q.add_argument("--bytes", type=int_in(1, 1 << 40), default=1 << 20,
                   help="access size, bytes (default %(default)s)")
    # The core counts both in 32 bits (about 49 days).
    q.add_argument("--duration-ms", type=int_in(1, _UINT32_MAX), default=250,
                   help="measured time, ms, at most 2^32-1 (default %(default)s)")
    q.add_argument("--warmup-ms", type=int_in(0, _UINT32_MAX), default=50,
                   help="unmeasured time before it, ms, at most 2^32-1 (default %(default)s)")
    q.set_defaults(func=_bench)

    q = dsub.add_parser("plot", help="PNG of model vs FAST'20 data")
    q.add_argument("out", help="output PNG path")
    q.add_argument("--emulate", action="store_true", help="add emulated points (a few seconds)")
    q.set_defaults(func=_plot)


def _list(args: argparse.Namespace) -> int:
    for name in list_profiles():
        print(f"{name:16s} {load_profile(name).description}")
    return 0


def _show(args: argparse.Namespace) -> int:
    d = profile_to_dict(args.profile)
    if args.json:
        print(json.dumps(d, indent=1))
        return 0
    for key, value in d.items():
        if isinstance(value, dict):
            pts = ", ".join(f"{x:g}:{y:.3g}" for x, y in zip(value["x"], value["y"]))
            print(f"{key}: {pts or '(none)'}")
        else:
            print(f"{key}: {value}")
    return 0


def _curve(args: argparse.Namespace) -> int:
    rows = curve_table(args.profile, range(1, args.max_threads + 1), args.bytes)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'threads':>7} {'read GB/s':>10} {'write GB/s':>10} {'read us':>10} {'write us':>10}"
          f"   (access {args.bytes} B)")
    for r in rows:
        print(f"{r['threads']:7d} {r['read_gbps']:10.3f} {r['write_gbps']:10.3f} "
              f"{r['read_service_us']:10.2f} {r['write_service_us']:10.2f}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    result = bench(args.profile, args.op, args.threads, args.bytes, args.warmup_ms,
                   args.duration_ms)
    result["cores"] = os.cpu_count()
    print(json.dumps(result, indent=1))
    return 0


def _plot(args: argparse.Namespace) -> int:
    path = plot(args.out, emulate=args.emulate)
    print(path, file=report_stream(path))
    return 0
