"""The pmem pool's mapping moves to 2 MiB pages after the open unless asked not to."""
import os
import time

import pytest

from nvmw.errors import InvalidArgumentError
from nvmw.middleware import Middleware, open_engine


def huge_mapped_kib(path: str) -> int:
    """KiB of this process's mapping of `path` backed by 2 MiB pages (-1: not mapped)."""
    kib, inside = -1, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            first = line.split(" ", 1)[0]
            if "-" in first and all(c in "0123456789abcdef-" for c in first):
                inside = line.rstrip("\n").endswith(path)
                if inside and kib < 0:
                    kib = 0
            elif inside and line.split(":")[0] in ("ShmemPmdMapped", "FilePmdMapped"):
                kib += int(line.split()[1])
    return kib


def kernel_collapses(directory: str) -> bool:
    """Whether this kernel can move a tmpfs file's pages to a 2 MiB page (Linux 6.1+):
    a 2 MiB file mapped at a 2 MiB-aligned address, then MADV_COLLAPSE."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    huge = 2 << 20
    path = os.path.join(directory, "probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, huge)
        os.pwrite(fd, b"x" * huge, 0)
        prot_none = 0
        room = libc.mmap(None, 2 * huge, prot_none, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if room in (None, ctypes.c_void_p(-1).value):
            return False
        try:
            at = (room + huge - 1) & ~(huge - 1)
            fixed = 0x10  # MAP_FIXED, inside the reservation
            got = libc.mmap(at, huge, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | fixed, fd, 0)
            return got == at and libc.madvise(at, huge, getattr(mmap, "MADV_COLLAPSE", 25)) == 0
        finally:
            libc.munmap(room, 2 * huge)
    finally:
        os.close(fd)
        os.unlink(path)


def test_pool_moves_to_huge_pages_unless_turned_off(shm_dir):
    if not kernel_collapses(shm_dir):
        pytest.skip("this kernel cannot move tmpfs pages to 2 MiB pages (MADV_COLLAPSE)")
    kept = os.path.join(shm_dir, "kept.pool")
    moved = os.path.join(shm_dir, "moved.pool")
    small = open_engine("pmem", kept, pool_size=32 << 20, huge_pages=False)
    big = open_engine("pmem", moved, pool_size=32 << 20)
    for i in range(2000):
        for e in (small, big):
            e.put(b"k%d" % i, b"v%d" % i * 20)
    deadline = time.monotonic() + 120  # the pass runs at idle priority
    while huge_mapped_kib(moved) <= 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert huge_mapped_kib(moved) > 0
    assert huge_mapped_kib(kept) == 0
    for i in range(2000):
        assert big.get(b"k%d" % i) == b"v%d" % i * 20
        assert small.get(b"k%d" % i) == b"v%d" % i * 20


def test_huge_pages_off_needs_a_pool():
    with pytest.raises(InvalidArgumentError, match="huge_pages"):
        open_engine("memory", huge_pages=False)
    with pytest.raises(InvalidArgumentError, match="huge_pages"):
        Middleware(engine="memory", huge_pages=False)
    with pytest.raises(TypeError):
        open_engine("memory", huge_pages="no")


def test_engine_bench_times_the_pool_on_the_pages_asked_for(shm_dir):
    from nvmw import _core
    if not kernel_collapses(shm_dir):
        pytest.skip("this kernel cannot move tmpfs pages to 2 MiB pages (MADV_COLLAPSE)")
    args = dict(engine="pmem", pool_dir=shm_dir, threads=1, small_keys=2000, large_keys=4)
    on = _core.run_engine_bench(**args)
    off = _core.run_engine_bench(**args, huge_pages=False)
    assert on["huge_pages_mib"] > 0
    assert off["huge_pages_mib"] == 0
    assert os.listdir(shm_dir) == []  # both temporary pools removed
