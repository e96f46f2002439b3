"""Temporary directories for pools on tmpfs that a killed run does not leave behind.

A run on a temporary pmem pool keeps it in /dev/shm, where it holds memory (1 GiB by
default) until the file is removed. A run that ends normally, or by Ctrl-C or SIGTERM,
removes it; a run killed with SIGKILL (or by the out-of-memory killer) cannot. So each
directory made here holds a lock file that its process keeps locked (`flock`) while it
lives. The kernel drops the lock when the process dies however it dies, and the next
directory made here removes every directory whose lock nobody holds any more.

Only directories made here are ever removed: an "nvmw-" directory without the lock file
(another tool's, or one being made) is left alone.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from typing import Iterator, Optional

#: The lock file each scratch directory holds; it appears (by a rename) only once locked.
OWNER = ".nvmw-owner"
PREFIX = "nvmw-"


def default_base() -> Optional[str]:
    """/dev/shm where there is one (a pmem pool on tmpfs), else the system's temp dir."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


def remove_stale(base: Optional[str] = None) -> list[str]:
    """Remove the scratch directories under `base` whose process is gone; returns them."""
    base = base if base is not None else (default_base() or tempfile.gettempdir())
    try:
        names = os.listdir(base)
    except OSError:
        return []
    removed = []
    for name in names:
        if not name.startswith(PREFIX):
            continue
        d = os.path.join(base, name)
        try:
            fd = os.open(os.path.join(d, OWNER), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # not a scratch directory, another user's, or gone already
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # locked: its process is alive
            os.close(fd)
            continue
        shutil.rmtree(d, ignore_errors=True)
        os.close(fd)
        removed.append(d)
    return removed


@contextlib.contextmanager
def scratch_dir(prefix: str, base: Optional[str] = None, *,
                removed: Optional[list] = None) -> Iterator[str]:
    """A new directory `base/prefix*` (prefix starts with "nvmw-"), removed with its
    contents on exit; stale ones of killed runs are removed first (appended to `removed`
    when given)."""
    if not prefix.startswith(PREFIX):
        raise ValueError(f"prefix must start with {PREFIX!r}, got {prefix!r}")
    base = base if base is not None else default_base()
    gone = remove_stale(base)
    if removed is not None:
        removed.extend(gone)
    d = tempfile.mkdtemp(prefix=prefix, dir=base)
    fd = None
    try:
        # Locked under a temporary name, then renamed: a lock file that can be seen is
        # always one its process locked first.
        fd = os.open(os.path.join(d, OWNER + ".new"), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(os.path.join(d, OWNER + ".new"), os.path.join(d, OWNER))
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
        if fd is not None:
            os.close(fd)
