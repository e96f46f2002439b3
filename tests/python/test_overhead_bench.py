"""`nvmw bench overhead` (`_core.run_overhead_bench`): every series it reports is measured,
consistent with its ratios, and the durable Puts it times through the middleware land."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from nvmw import _core

SMALL = dict(ops=300, warmup_ops=20, keys=32, condvar_rounds=100, nospin_ops=100,
             async_ops=2000, async_window=64)
SERIES = ["direct", "direct_timed", "permits", "handoff_mode"]
PMEM_SERIES = ["pmem_direct", "pmem_permits", "pmem_put_direct", "pmem_put_permits"]


def _check_series(r: dict, name: str) -> None:
    p50, p99, mean = r[name + "_p50_us"], r[name + "_p99_us"], r[name + "_mean_us"]
    assert 0 < p50 <= p99, name
    assert mean > 0 and r[name + "_ops_per_s"] > 0, name


def test_every_series_and_ratio_with_a_pmem_pool(shm_dir):
    r = _core.run_overhead_bench(pmem_pool_dir=shm_dir, **SMALL)
    for name in SERIES + PMEM_SERIES:
        _check_series(r, name)
    assert r["ratio_p50_permits_vs_direct"] == pytest.approx(r["permits_p50_us"] / r["direct_p50_us"])
    assert r["ratio_p50_pmem_put_permits_vs_direct"] == pytest.approx(
        r["pmem_put_permits_p50_us"] / r["pmem_put_direct_p50_us"])
    assert r["ratio_mean_pmem_put_permits_vs_direct"] == pytest.approx(
        r["pmem_put_permits_mean_us"] / r["pmem_put_direct_mean_us"])
    assert r["async_ops_per_s"] > 0 and r["async_handoff_ops_per_s"] > 0
    assert r["ops"] == SMALL["ops"] and r["value_bytes"] == 128
    # The temporary pool is removed afterwards.
    assert not [f for f in os.listdir(shm_dir) if f.startswith("nvmw-overhead-bench-")]


def test_without_a_pool_dir_the_pmem_series_are_skipped():
    r = _core.run_overhead_bench(pmem_pool_dir="", **SMALL)
    for name in SERIES:
        _check_series(r, name)
    assert not [k for k in r if k.startswith("pmem_") or "pmem" in k]


@pytest.mark.parametrize("bad", [dict(ops=99), dict(keys=0), dict(async_submitters=0),
                                 dict(async_put_fraction=1.5), dict(spin_ns=-1)])
def test_bad_options_are_refused(bad):
    with pytest.raises(ValueError):
        _core.run_overhead_bench(pmem_pool_dir="", **dict(SMALL, **bad))


def test_cli_prints_the_put_series():
    r = subprocess.run([sys.executable, "-m", "nvmw", "bench", "overhead", "--ops", "300",
                        "--async-ops", "2000"], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for name in SERIES + PMEM_SERIES:
        _check_series(out, name)
    assert out["ratio_p50_pmem_put_permits_vs_direct"] > 0
