"""The `nvmw` command line. Each command is a module of nvmw.commands, commands/NAME.py
registering the command NAME with `register(subparsers)`; this file only wires them up,
importing only the module of the command a command line names."""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Callable

from nvmw.commands import SUMMARIES, _sim_fast
from nvmw.errors import NvmwError

if TYPE_CHECKING:
    import argparse


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser. With no command: every command, each module imported
    (what the tests walk). With a command's name: that command alone, only its module
    imported; importing them all takes a second or more, since the RL commands import
    Gymnasium and scikit-learn. With anything else (an option, a typo, ""): the commands
    listed from their summaries, no module imported: enough for `nvmw --help` and for
    the "invalid choice" error."""
    import argparse
    import importlib

    parser = argparse.ArgumentParser(
        prog="nvmw",
        description="Workload-aware, SLA-driven concurrency control for persistent key-value storage.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    if command is not None and command not in SUMMARIES:
        for name, summary in SUMMARIES.items():
            sub.add_parser(name, help=summary)
        return parser
    for name in [command] if command is not None else SUMMARIES:
        importlib.import_module(f"nvmw.commands.{name.replace('-', '_')}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    argv = list(argv)
    if argv[:1] == ["serve"]:  # its module installs its own stop signals
        return _main(argv)
    undo = _sigterm_as_ctrl_c()
    try:
        return _main(argv)
    finally:
        undo()


def _sigterm_as_ctrl_c() -> Callable[[], None]:
    """SIGTERM (kill, timeout, a batch system ending the job) stops a run as Ctrl-C does:
    the run's work is stopped and joined, a temporary pool removed, what the run keeps
    written, exit status 130. Left alone where SIGTERM is already ignored or handled, and
    off the main thread (where no handler can be set). A process forked from this one
    takes SIGTERM's default action. Returns what puts the previous handler back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        return lambda: None
    pid = os.getpid()

    def handler(signum, _frame) -> None:
        if os.getpid() != pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str]) -> int:
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
        parser = build_parser(argv[0] if argv else "")
        args = parser.parse_args(argv)  # the listing parser never returns: it has only -h
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
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
        # str() of a KeyError (NotFoundError is one) is the repr of its message: print the message.
        message = e.args[0] if isinstance(e, KeyError) and len(e.args) == 1 else e
        print(f"nvmw {command}: error: {message}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"nvmw {command}: error: out of memory", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
