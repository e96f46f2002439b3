"""The `nvmw` command line. Every module in nvmw.commands that defines
`register(subparsers)` adds its own subcommand(s); this file only wires them up."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from nvmw import commands
from nvmw.commands import _sim_fast
from nvmw.errors import NvmwError

if TYPE_CHECKING:
    import argparse


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of `command` alone: each command module is named
    after its command (run_phase.py registers run-phase), and importing all of them takes
    a second or more (the RL commands import Gymnasium and scikit-learn), so a command
    line that names its command imports that module only."""
    import argparse
    import importlib
    import pkgutil

    parser = argparse.ArgumentParser(
        prog="nvmw",
        description="Workload-aware, SLA-driven concurrency control for persistent key-value storage.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    names = sorted(i.name for i in pkgutil.iter_modules(commands.__path__) if not i.name.startswith("_"))
    module_name = (command or "").replace("-", "_")
    if module_name in names and command == module_name.replace("_", "-"):
        names = [module_name]
    for name in names:
        module = importlib.import_module(f"nvmw.commands.{name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    argv = list(argv)
    if argv[:2] == ["sim", "run"]:
        # A static-configuration simulator run skips the full parser (its imports take
        # longer than the run; nvmw.commands._sim_fast).
        try:
            run = _sim_fast.parse(argv[2:])
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        if run is not None:
            return _call(run, "sim")
    try:
        parser = build_parser(argv[0] if argv else None)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    args = parser.parse_args(argv)
    args.argv = list(argv)  # commands that re-exec themselves need the original words
    return _call(lambda: args.func(args), args.command)


def _call(run, command: str) -> int:
    try:
        return int(run() or 0)
    except KeyboardInterrupt as e:
        note = getattr(e, "note", "")  # nvmw.errors.Interrupted: what the run kept
        print(f"interrupted: {note}" if note else "interrupted", file=sys.stderr)
        return 130
    except (NvmwError, OSError, ValueError, OverflowError) as e:
        # Expected failures (bad input, missing or unwritable files, pool errors): one clear line.
        print(f"nvmw {command}: error: {e}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"nvmw {command}: error: out of memory", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
