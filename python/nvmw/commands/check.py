"""`nvmw check POOL [--salvage OUT]`: report what is damaged in a pmem pool file (header,
links, entries) without modifying it. With --salvage, copy every intact entry into a new
pool (docs/engine.md, "Damaged pools").

The exit status tells a damaged pool from a check that did not run, as fsck(8) tells
errors in a file system from operational errors: 0 intact, 1 damaged, 2 usage error,
8 not checked (no such file, not readable, not an nvmw pool of this format, open in
another process, an I/O error, or a --salvage that could not write its pool)."""
from __future__ import annotations

import argparse
import os
import re
import sys

from nvmw.commands import SUMMARIES
from nvmw import _core
from nvmw.commands._util import UsageError, plural, print_json
from nvmw.errors import NvmwError

# Exit statuses. 1 stays "damaged" (what it always meant); 2 is argparse's usage error,
# as for every nvmw command; a check that did not run takes fsck(8)'s "operational
# error", 8, rather than 3 or 4: fsck's 4 means errors left uncorrected, which a reader
# of fsck would take for damage.
EXIT_CLEAN = 0
EXIT_DAMAGED = 1
EXIT_USAGE = 2
EXIT_NOT_CHECKED = 8

EPILOG = f"""\
exit status:
  {EXIT_CLEAN}  the pool is intact (with --salvage: every entry copied)
  {EXIT_DAMAGED}  the pool is damaged: a damaged entry or link, or the header of a file that
     is an nvmw pool (its layout name says so) damaged or cut short (with --salvage:
     every intact entry copied; none when the header is damaged)
  {EXIT_USAGE}  usage error: an option refused
  {EXIT_NOT_CHECKED}  not checked, nothing said about the pool: no such file, not a regular
     file, permission denied, an I/O error, not an nvmw pool (no pmemobj signature,
     another program's layout, an older or newer nvmw format), a pool open in
     another process, the scratch copy not made, a --salvage target that exists,
     or a salvage pool that could not be written or filled up
"""

# The salvage pool's size: libpmemobj's smallest pool (PMEMOBJ_MIN_POOL, 8 MiB) up to the
# largest file size (an off_t). The core rounds it down to whole 4 KiB pages.
MIN_POOL_BYTES = 8 << 20
MAX_POOL_BYTES = (1 << 63) - 1
SIZE_RANGE = f"between {MIN_POOL_BYTES} (8 MiB) and {MAX_POOL_BYTES} (2^63-1)"


def _salvage_size(text: str) -> int:
    """argparse type of --salvage-size: int_in's words, with both ends of the range named
    (int_in leaves out an upper end of 2^63-1)."""
    if not re.fullmatch(r"-?[0-9]+", text):  # as int_in: not "1_000", "+5" or " 5"
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    value = int(text)
    if not MIN_POOL_BYTES <= value <= MAX_POOL_BYTES:
        raise argparse.ArgumentTypeError(f"{text} is out of range: must be {SIZE_RANGE}")
    return value


_salvage_size.__name__ = "integer"


def _path(text: str) -> str:
    """argparse type: a path, not the empty string (which the core reads as "none")."""
    if not text:
        raise argparse.ArgumentTypeError("empty path")
    return text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help=SUMMARIES["check"], description=__doc__, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pool", help="pool file to check (never modified)")
    p.add_argument("--salvage", metavar="OUT", type=_path, default=None,
                   help="copy every intact entry into a new pool at OUT (must not exist; its "
                        "directory must)")
    p.add_argument("--salvage-size", metavar="BYTES", type=_salvage_size, default=None,
                   help=f"with --salvage: size of the salvage pool in bytes, {MIN_POOL_BYTES} (8 MiB, the "
                        f"smallest pmem pool) to 2^63-1, rounded down to a multiple of 4096 (default: "
                        f"the checked pool's size, at least 8 MiB)")
    p.add_argument("--scratch-dir", metavar="DIR", type=_path, default=None,
                   help="existing directory where libpmemobj maps a sparse scratch copy of the "
                        "pool (default: the pool's directory)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _check_dirs(args: argparse.Namespace) -> None:
    """Refuse, before the scratch copy and the walk, a --salvage target that exists or
    whose directory does not, and a --scratch-dir that is not a writable directory."""
    if args.salvage is not None:
        if os.path.lexists(args.salvage):  # a dangling symbolic link too
            raise ValueError(f"{args.salvage}: salvage target exists; give a new path")
        parent = os.path.dirname(args.salvage) or "."
        if not os.path.isdir(parent):
            what = "is not a directory" if os.path.exists(parent) else "does not exist"
            raise ValueError(f"--salvage {args.salvage}: directory {parent} {what}")
    if args.scratch_dir is not None:
        if not os.path.isdir(args.scratch_dir):
            what = "not a directory" if os.path.exists(args.scratch_dir) else "no such directory"
            raise ValueError(f"--scratch-dir {args.scratch_dir}: {what}")
        if not os.access(args.scratch_dir, os.W_OK | os.X_OK):
            raise ValueError(f"--scratch-dir {args.scratch_dir}: directory is not writable")


def run(args: argparse.Namespace) -> int:
    if args.salvage_size is not None and args.salvage is None:
        raise UsageError("--salvage-size needs --salvage (it sizes the salvage pool)")
    try:
        report = _check(args)
    except (NvmwError, OSError, ValueError) as e:
        # The check did not run or did not finish: no finding about the pool.
        _error(e)
        return EXIT_NOT_CHECKED
    except MemoryError:
        _error("out of memory")
        return EXIT_NOT_CHECKED
    status = _status(report)
    if args.json:
        print_json(report)
        return status
    if not report["readable"]:
        # Not a pool, another layout, a damaged header: one line says which.
        msg = report["problems"][0] if report["problems"] else "unreadable pool"
        _error(msg.removeprefix('header: ').removeprefix('heap: '))
        return status
    print(f"{args.pool}: {'ok' if report['clean'] else 'DAMAGED'}: format {report['format_version']}, "
          f"{plural(report['entries_ok'], 'intact entry', 'intact entries')}, "
          f"{plural(report['entries_damaged'], 'damaged entry', 'damaged entries')}, "
          f"{plural(report['links_damaged'], 'damaged link')}, "
          f"{plural(report['unreachable'], 'unreachable entry', 'unreachable entries')}")
    for line in report["problems"]:
        print(f"  {line}")
    if args.salvage:
        print(f"salvaged {plural(report['salvaged'], 'entry', 'entries')} into {args.salvage}")
    return status


def _check(args: argparse.Namespace) -> dict:
    """The core's report on args.pool (and its salvage), as printed."""
    _check_dirs(args)
    size = args.salvage_size
    if args.salvage is not None and size is None:
        try:
            size = max(os.path.getsize(args.pool), MIN_POOL_BYTES)
        except OSError:
            size = MIN_POOL_BYTES  # the core names the missing or unreadable pool, before salvage
    report = dict(_core.check_pmem_pool(
        os.fspath(args.pool), salvage_to=args.salvage or "",
        salvage_pool_size_bytes=MIN_POOL_BYTES if size is None else size,
        scratch_dir=args.scratch_dir or ""))
    report["problems"] = list(report["problems"])
    report["pool"] = args.pool
    return report


def _status(report: dict) -> int:
    """What the report says: intact, damaged, or a file that is not an nvmw pool of this
    format, which the check cannot examine (nvmw_pool false: its header carries neither
    this format's layout name nor, where that name is damaged, its root object)."""
    if report["clean"]:
        return EXIT_CLEAN
    return EXIT_DAMAGED if report["nvmw_pool"] else EXIT_NOT_CHECKED


def _error(e: BaseException | str) -> None:
    """One line on stderr, in the form nvmw.cli gives every command's errors (the core's
    errors carry their whole message; nvmw.errors makes a NotFoundError's unquoted)."""
    print(f"nvmw check: error: {e}", file=sys.stderr)
