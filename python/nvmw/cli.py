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
from nvmw.commands._util import UsageError
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
    try:
        try:
            if argv[:1] == ["serve"]:  # its module installs its own stop signals
                return _main(argv)
            undo = _sigterm_as_ctrl_c()
            try:
                return _main(argv)
            finally:
                undo()
        finally:
            # Written now, not at interpreter exit, where a failure is only "Exception ignored".
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError as e:
        if not _stdout_broken(e):
            raise
        return _stop_quietly()
    except SystemExit as e:
        # argparse's --help ignores a failed write to stdout and exits with 0.
        if e.code in (0, None) and _reader_gone():
            return _stop_quietly()
        raise


def _stdout_broken(e: BaseException) -> bool:
    """Whether `e` is a write to stdout failing because stdout's reader went away
    (`nvmw ... | head`): EPIPE (the core's StorageIOError, writing --output /dev/stdout,
    carries no errno: its message ends with the system's words) while stdout is a pipe
    or socket with no reader left. An EPIPE from elsewhere (a client's socket) is not."""
    import errno

    if not isinstance(e, OSError):
        return False
    if e.errno != errno.EPIPE and not str(e).endswith(os.strerror(errno.EPIPE)):
        return False
    return _reader_gone()


def _reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader went away."""
    import select

    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
    except (AttributeError, ValueError, OSError):  # no file behind stdout (captured, closed)
        return False
    poll.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))


def _stop_quietly() -> int:
    """Stop as `cat` does when its reader went away: no message, and the status a shell
    shows for a process SIGPIPE ended (128 + 13), so that a pipeline under
    `set -o pipefail` reads it as it reads `cat`'s. What is still buffered for stdout
    goes to /dev/null, so the interpreter's exit does not complain about it either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


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
            return _call(run, "sim run")
    try:
        parser = build_parser(argv[0] if argv else "")
        args = parser.parse_args(argv)  # the listing parser never returns: it has only -h
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    args.argv = list(argv)  # commands that re-exec themselves need the original words
    return _call(lambda: args.func(args), _command_words(parser, args), _file_options(parser, args))


def _command_words(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The words naming the command run ("ycsb", "sim check"): its errors begin with them,
    as argparse's usage errors do."""
    import argparse

    words = []
    while True:
        action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        word = getattr(args, action.dest, None) if action is not None else None
        if word is None or word not in action.choices:
            return " ".join(words)
        words.append(word)
        parser = action.choices[word]


def _file_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """Each string the command line gave an option (or a positional argument, by its
    name), mapped to the option: how an error about a file names where the file came from."""
    import argparse

    options: dict = {}
    while parser is not None:
        sub = None
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                sub = action.choices.get(getattr(args, action.dest, None) or "")
                continue
            values = getattr(args, action.dest, None)
            for value in values if isinstance(values, list) else [values]:
                if isinstance(value, (str, os.PathLike)) and action.option_strings:
                    options.setdefault(os.fspath(value), action.option_strings[-1])
        parser = sub
    return options


def _message(e: BaseException, options: dict) -> str:
    """An expected failure's one line. An OSError says which file and what the system
    said ("--params p.json: No such file or directory"), without Python's "[Errno N]";
    str() of a KeyError (NotFoundError is one) is the repr of its message: the message."""
    if isinstance(e, OSError) and e.strerror:
        if e.filename is None:
            return e.strerror
        name = _name(e.filename)
        option = options.get(name)
        where = f"{option} {name}" if option else name
        if e.filename2 is not None:
            where += f" -> {_name(e.filename2)}"
        return f"{where}: {e.strerror}"
    return str(e.args[0] if isinstance(e, KeyError) and len(e.args) == 1 else e)


def _name(filename) -> str:
    """An OSError's file as text: a path, or a file descriptor's number."""
    return os.fsdecode(filename) if isinstance(filename, (str, bytes, os.PathLike)) else str(filename)


def _call(run, command: str, options: dict | None = None) -> int:
    try:
        return int(run() or 0)
    except KeyboardInterrupt as e:
        note = getattr(e, "note", "")  # nvmw.errors.Interrupted: what the run kept
        print(f"interrupted: {note}" if note else "interrupted", file=sys.stderr)
        return 130
    except (NvmwError, OSError, ValueError, OverflowError) as e:
        # Expected failures (bad input, missing or unwritable files, pool errors): one clear line.
        if _stdout_broken(e):
            return _stop_quietly()
        print(f"nvmw {command}: error: {_message(e, options or {})}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
    except MemoryError:
        print(f"nvmw {command}: error: out of memory", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
