"""Shared pytest set-up: pools on tmpfs are flushed with CPU instructions, not msync."""
import os
import tempfile

import pytest

os.environ.setdefault("PMEM_IS_PMEM_FORCE", "1")


@pytest.fixture
def shm_dir():
    """A fresh directory on /dev/shm (tmpfs), removed afterwards."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="nvmw-test-", dir=base) as d:
        yield d
