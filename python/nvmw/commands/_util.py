"""Small helpers shared by the CLI commands."""
from __future__ import annotations

import json
import os
import sys
from typing import Any


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


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))


def cores() -> int:
    return os.cpu_count() or 1
