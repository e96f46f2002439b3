"""The CLI's bounds: nonsensical numbers, unwritable outputs and absurd trace sizes end
with one line in the library's own words and a non-zero exit, never a traceback."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _nvmw(*argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nvmw", *argv], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


@pytest.mark.parametrize("argv, option", [
    (["sweep", "--duration", "-1"], "--duration"),
    (["sweep", "--duration", "0"], "--duration"),
    (["sweep", "--clients", "0"], "--clients"),
    (["evaluate", "--steps", "0"], "--steps"),
    (["ycsb", "--threads", "99999999999999999999"], "--threads"),
    (["replay", "x.csv", "--accel", "nan"], "--accel"),
    (["run-phase", "1", "--duration", "-5"], "--duration"),
    (["calibrate", "--windows", "0", "--out", "x.toml"], "--windows"),
])
def test_nonsensical_numbers_are_usage_errors(argv, option):
    r = _nvmw(*argv)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f"argument {option}" in r.stderr


def test_unwritable_output_directory_fails_before_the_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = _nvmw("sweep", "--out", str(blocker / "sub"))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "--out" in r.stderr and "cannot create the output directory" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_unwritable_output_file_fails_before_collecting(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = _nvmw("collect", "--env", "synthetic", "--episodes", "1", "--out", str(blocker / "t.npz"))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "t.npz").exists()


def test_replay_refuses_a_size_over_the_middleware_cap(tmp_path):
    trace = tmp_path / "huge.csv"
    trace.write_text("time_ms,op,key,bytes\n0.000,W,a,128\n1.000,W,b,900000000000000\n")
    r = _nvmw("replay", str(trace), "--format", "native")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "bad_alloc" not in r.stderr
    assert "max_value_bytes" in r.stderr or "size" in r.stderr
