"""`nvmw check POOL [--salvage OUT]`: report what is damaged in a pmem pool file (header,
links, entries) without modifying it; exit status 1 when anything is. With --salvage,
copy every intact entry into a new pool (docs/engine.md, "Damaged pools")."""
from __future__ import annotations

import argparse
import os
import sys

from nvmw.commands import SUMMARIES
from nvmw import _core
from nvmw.commands._util import print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help=SUMMARIES["check"],
                       description=__doc__)
    p.add_argument("pool", help="pool file to check (never modified)")
    p.add_argument("--salvage", metavar="OUT", default=None,
                   help="copy every intact entry into a new pool at OUT (must not exist)")
    p.add_argument("--salvage-size", type=int, default=None,
                   help="size of the salvage pool in bytes (default: the checked pool's size)")
    p.add_argument("--scratch-dir", default=None,
                   help="where libpmemobj maps a sparse scratch copy of the pool "
                        "(default: the pool's directory)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    size = args.salvage_size
    if args.salvage and size is None:
        size = max(os.path.getsize(args.pool), 8 << 20)
    report = dict(_core.check_pmem_pool(
        os.fspath(args.pool), salvage_to=os.fspath(args.salvage) if args.salvage else "",
        salvage_pool_size_bytes=size or (1 << 30), scratch_dir=args.scratch_dir or ""))
    report["problems"] = list(report["problems"])
    report["pool"] = args.pool
    if args.json:
        print_json(report)
        return 0 if report["clean"] else 1
    if not report["readable"]:
        # Not a pool, another layout, a damaged header: one line says which.
        msg = report["problems"][0] if report["problems"] else "unreadable pool"
        print(f"nvmw check: {msg.removeprefix('header: ').removeprefix('heap: ')}", file=sys.stderr)
        return 1
    status = "ok" if report["clean"] else "DAMAGED"
    print(f"{args.pool}: {status}: format {report['format_version']}, "
          f"{report['entries_ok']} intact entries, {report['entries_damaged']} damaged entries, "
          f"{report['links_damaged']} damaged links, {report['unreachable']} unreachable entries")
    for line in report["problems"]:
        print(f"  {line}")
    if args.salvage:
        print(f"salvaged {report['salvaged']} entries into {args.salvage}")
    return 0 if report["clean"] else 1
