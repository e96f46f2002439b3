"""Small helpers shared by the CLI commands."""
from __future__ import annotations

import json
import os
import stat
import sys
from typing import IO, Any, Optional


class UsageError(ValueError):
    """A command line argparse accepts that the command refuses as a whole (an option that
    needs another one): printed as the command's other errors are, with argparse's exit
    status 2 (nvmw.cli)."""


def plural(count: int, noun: str, nouns: Optional[str] = None) -> str:
    """"1 entry", "2 entries": a count with its noun (`nouns`, default noun + "s")."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def ensure_pmem_force(argv_tail: list) -> None:
    """Re-exec this command with PMEM_IS_PMEM_FORCE=1 unless it is already set.

    libpmem decides how to flush when it initialises; pools on tmpfs (/dev/shm) are
    then flushed with CPU cache-line instructions (DRAM speed) instead of msync. Only
    commands whose pools live on tmpfs call this (benchmarks, demo); a pool on a disk
    filesystem keeps msync, which durability needs there.
    """
    if os.environ.get("PMEM_IS_PMEM_FORCE") == "1":
        return
    # NVMW_NOTES_SHOWN: the new process parses the same words again, and its deprecation
    # notes were printed here already (nvmw.lab.lineup.deprecated).
    env = dict(os.environ, PMEM_IS_PMEM_FORCE="1", NVMW_NOTES_SHOWN="1")
    os.execve(sys.executable, [sys.executable, "-m", "nvmw", *argv_tail], env)


def is_stream(path: Optional[str]) -> bool:
    """Whether the output `path` is stdout itself or is there and not a regular file (a
    pipe, a device, a FIFO): what is written there cannot be replaced, only followed."""
    if path is None:
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return True
    try:
        out = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file behind stdout (captured, closed)
        return False
    return (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino)


def report_stream(*paths: Optional[str]) -> IO:
    """Where a command prints its closing report: stdout, unless a file it wrote (`paths`;
    None is skipped) `is_stream` (as in `nvmw device plot /dev/stdout | display`), where a
    report on stdout would follow the file's bytes down the same stream; then stderr."""
    return sys.stderr if any(is_stream(p) for p in paths) else sys.stdout


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))


def cores() -> int:
    return os.cpu_count() or 1
