"""Temporary pools on tmpfs are removed also after a run that was killed (nvmw.scratch)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from nvmw.scratch import OWNER, remove_stale, scratch_dir

HOLD = textwrap.dedent("""
    import sys, time
    from nvmw.scratch import scratch_dir
    with scratch_dir("nvmw-test-", sys.argv[1]) as d:
        print(d, flush=True)
        time.sleep(600)
""")


def _holder(base) -> tuple[subprocess.Popen, str]:
    """A process holding a scratch directory under `base`; returns it and the directory."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(base)], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ))
    d = p.stdout.readline().strip()
    assert d and os.path.isdir(d), d
    return p, d


def test_directory_is_removed_on_exit_and_an_exception(tmp_path):
    with scratch_dir("nvmw-test-", str(tmp_path)) as d:
        open(os.path.join(d, "pool"), "w").close()
        assert os.path.isfile(os.path.join(d, OWNER))
    assert not os.path.exists(d)
    with pytest.raises(RuntimeError):
        with scratch_dir("nvmw-test-", str(tmp_path)) as d:
            raise RuntimeError("the run failed")
    assert not os.path.exists(d)


def test_killed_owner_directory_is_removed_and_live_or_foreign_ones_are_kept(tmp_path):
    killed, stale = _holder(tmp_path)
    live, kept = _holder(tmp_path)
    foreign = tmp_path / "nvmw-someone-else"
    foreign.mkdir()
    (foreign / "data").write_text("not ours")
    try:
        killed.kill()
        killed.wait(timeout=30)
        assert os.path.isdir(stale)  # SIGKILL: the process could not remove it
        removed = []
        with scratch_dir("nvmw-test-", str(tmp_path), removed=removed) as d:
            assert removed == [stale]
            assert not os.path.exists(stale)
            assert os.path.isdir(kept) and d != kept
        assert (foreign / "data").read_text() == "not ours"
        assert remove_stale(str(tmp_path)) == []
    finally:
        live.kill()
        live.wait(timeout=30)
        killed.stdout.close()
        live.stdout.close()
    assert remove_stale(str(tmp_path)) == [kept]


def test_prefix_outside_the_family_is_refused(tmp_path):
    with pytest.raises(ValueError, match="prefix"):
        with scratch_dir("pool-", str(tmp_path)):
            pass


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="temporary pools live on /dev/shm")
def test_a_served_temporary_pool_killed_with_sigkill_is_removed_by_the_next_run():
    env = dict(os.environ, PMEM_IS_PMEM_FORCE="1", PYTHONUNBUFFERED="1")
    server = subprocess.Popen([sys.executable, "-m", "nvmw", "serve", "--engine", "pmem", "--port", "0",
                               "--pool-mb", "64"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    try:
        line = server.stdout.readline()
        m = re.search(r"(/dev/shm/nvmw-serve-[^/ ]+)/nvmw\.pool", line)
        assert m, line + server.stderr.read() if server.poll() is not None else line
        pool_dir = m.group(1)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=30)
        assert os.path.isdir(pool_dir)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
        server.stdout.close()
        server.stderr.close()
    r = subprocess.run([sys.executable, "-m", "nvmw", "ycsb", "--engine", "pmem", "--duration", "0.2",
                        "--records", "100", "--threads", "1"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(pool_dir)
    assert f"removed {pool_dir}" in r.stderr
