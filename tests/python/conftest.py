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


@pytest.fixture(params=["pmem", "memory"])
def mw(request, shm_dir):
    """A running middleware (2 interactive, 1 batch worker, 0.05 s windows) on a 64 MiB pmem
    pool in shm_dir, then on the memory engine."""
    import nvmw  # here, not at the top: PMEM_IS_PMEM_FORCE above must be set before the core loads

    path = os.path.join(shm_dir, "t.pool") if request.param == "pmem" else None
    m = nvmw.Middleware(path, engine=request.param, interactive_threads=2, batch_threads=1,
                        window_s=0.05, pool_size=64 << 20)
    yield m
    m.close()
