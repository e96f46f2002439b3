"""Small helpers shared by the CLI commands."""
from __future__ import annotations

import json
import os
import stat
import sys
from typing import IO, Any, Optional


def ensure_pmem_force(argv_tail: list) -> None:
    """Re-exec this command with PMEM_IS_PMEM_FORCE=1 unless it is already set.

    libpmem decides how to flush when it initialises; pools on tmpfs (/dev/shm) are
    then flushed with CPU cache-line instructions (DRAM speed) instead of msync. Only
    commands whose pools live on tmpfs call this (benchmarks, demo); a pool on a disk
    filesystem keeps msync, which durability needs there.
    """
    if os.environ.get("PMEM_IS_PMEM_FORCE") == "1":
        return
    env = dict(os.environ, PMEM_IS_PMEM_FORCE="1")
    os.execve(sys.executable, [sys.executable, "-m", "nvmw", *argv_tail], env)


def report_stream(*paths: Optional[str]) -> IO:
    """Where a command prints its closing report: stdout, unless a file it wrote (`paths`;
    None is skipped) is stdout itself or not a regular file (a pipe, a device, a FIFO,
    as in `nvmw device plot /dev/stdout | display`), where a report on stdout would follow
    the file's bytes down the same stream; then stderr."""
    for path in paths:
        if path is None:
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            return sys.stderr
        try:
            out = os.fstat(sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # no file behind stdout (captured, closed)
            continue
        if (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino):
            return sys.stderr
    return sys.stdout


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))


def cores() -> int:
    return os.cpu_count() or 1
