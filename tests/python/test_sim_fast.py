"""The simulator's fast paths: fast-forward against the exact mode, static runs without
Gymnasium (same rows as the env), their NumPy-free seeding, the trace cache, and the
`nvmw sim run` shortcut past the full command line."""
import json
import marshal
import os
import subprocess
import sys

import numpy as np
import pytest

from nvmw import _core
from nvmw.cli import main
from nvmw.control.controllers import Fixed, NoControl
from nvmw.devices import load_profile
from nvmw.lab.phase_run import simulate_phase
from nvmw.rl.sim import SimEnv, load_params
from nvmw.rl.simrun import Pcg64, run_static, static_config
from nvmw.workloads import phases


@pytest.mark.parametrize("seed", [0, 1, 2, 99, 2**31 - 5, 2**32 + 7, 2**64 - 1, 10**30])
def test_pcg64_draws_as_numpy(seed):
    g, p = np.random.default_rng(seed), Pcg64(seed)
    for high in (2**31 - 1, 33, 4, 2**32 - 1):
        assert p.integers(0, high) == int(g.integers(0, high))
        assert p.uniform(0.0, 150_494.8) == float(g.uniform(0.0, 150_494.8))


def test_static_config_names():
    assert static_config("none") == (False, 15, 15)
    assert static_config("fixed:32,8") == (True, 32, 8)
    for other in ("aimd", "fixed:0,3", "fixed", "q-learning", Fixed(3, 4), None):
        assert static_config(other) is None


@pytest.mark.parametrize("phase", [2, 5])
def test_static_run_gives_the_env_rows(phase):
    # simulate_phase with a controller object goes through SimEnv and the control loop; a
    # static name goes through run_static. Same seed, same rows, bit for bit.
    for seed in (0, 3):
        assert simulate_phase(phase, controller="fixed:7,3", windows=4, window_s=0.2, seed=seed) == \
            simulate_phase(phase, controller=Fixed(7, 3), windows=4, window_s=0.2, seed=seed)
        assert simulate_phase(phase, controller="none", windows=3, window_s=0.2, seed=seed) == \
            simulate_phase(phase, controller=NoControl(), windows=3, window_s=0.2, seed=seed)
    exact = simulate_phase(phase, controller=Fixed(7, 3), windows=2, window_s=1.0, seed=1, exact=True)
    assert exact == run_static(phase, threads=(7, 3), windows=2, window_s=1.0, seed=1, exact=True)


def _sim(fast_forward, phase=6):
    sim = _core.Simulator(load_params(None), load_profile("optane-1dimm"), interactive_threads=16, batch_threads=4,
                          window_s=1.0, seed=2, fast_forward=fast_forward)
    wi, wb, _ = phases.phase_workloads(phase, 1)
    sim.set_workload(wi, wb, 1000.0)
    return sim


def test_fast_forward_simulates_part_of_each_window_and_keeps_throughput():
    fast, exact = _sim(True), _sim(False)
    f = [fast.run_window() for _ in range(11)][1:]
    e = [exact.run_window() for _ in range(11)][1:]
    assert fast.now_s == exact.now_s == exact.virtual_s == 11.0
    assert fast.virtual_s < 0.5 * fast.now_s
    # Mean over ten windows: the two modes draw different sample paths, and a window's
    # batch count (about 3,000 large requests) moves by a few percent between paths.
    for key in ("interactive", "batch"):
        fo = np.mean([w[key]["ops_per_s"] for w in f])
        eo = np.mean([w[key]["ops_per_s"] for w in e])
        assert fo == pytest.approx(eo, rel=0.03)
    # The batch side of phase 6 floods the device: every client waits in both modes.
    assert f[-1]["batch"]["queue_len_end"] == e[-1]["batch"]["queue_len_end"]
    fp = np.median([w["interactive"]["p99_us"] for w in f])
    ep = np.median([w["interactive"]["p99_us"] for w in e])
    assert fp == pytest.approx(ep, rel=0.3)


def test_env_exact_flag_reaches_the_simulator():
    env = SimEnv(1, window_s=1.0, exact=True, max_episode_steps=2)
    env.reset(seed=0, options={"threads": (4, 4)})
    env.step(0)
    assert env.sim.virtual_s == env.sim.now_s
    env = SimEnv(1, window_s=1.0, max_episode_steps=2)
    env.reset(seed=0, options={"threads": (4, 4)})
    env.step(0)
    assert env.sim.virtual_s < env.sim.now_s


def test_phase_workloads_are_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("NVMW_CACHE_DIR", str(tmp_path))
    build = phases.phase_workloads.__wrapped__  # past the in-memory cache
    first = build(3, 2)
    files = os.listdir(tmp_path / "sim-workloads")
    assert len(files) == 1 and files[0].startswith("phase3-")
    assert build(3, 2) == first  # read back
    # Empty, unreadable, the wrong shape: each is rebuilt (and written again).
    cached = tmp_path / "sim-workloads" / files[0]
    for junk in (b"", b"\x00not marshal", marshal.dumps([1, 2]), marshal.dumps(5)):
        cached.write_bytes(junk)
        assert build(3, 2) == first
        assert tuple(marshal.loads(cached.read_bytes())) == first
    build(3, 1)
    assert len(os.listdir(tmp_path / "sim-workloads")) == 2
    monkeypatch.setenv("NVMW_CACHE_DIR", "")
    assert phases.workload_cache_dir() is None
    assert build(3, 2) == first


def test_sim_run_shortcut_prints_what_the_full_command_prints(capsys):
    assert main(["sim", "run", "--phase", "4", "--controller", "fixed:4,2", "--windows", "3", "--window", "0.2"]) == 0
    fast = capsys.readouterr().out
    # --threads is an old spelling the shortcut leaves to the full parser.
    assert main(["sim", "run", "--phase", "4", "--threads", "4", "2", "--windows", "3", "--window", "0.2"]) == 0
    full = capsys.readouterr().out
    assert fast == full
    rows = [json.loads(line) for line in fast.splitlines()]
    assert len(rows) == 3 and all(r["threads"] == [4, 2] for r in rows)
    # Bad values still get the full parser's error.
    with pytest.raises(SystemExit):
        main(["sim", "run", "--phase", "4", "--windows", "0"])


def test_sim_run_shortcut_needs_neither_numpy_nor_gymnasium():
    # Nor the command-line parser: the shortcut never builds it.
    code = ("import sys; from nvmw.cli import main; rc = main(['sim', 'run', '--phase', '6', '--windows', '2', "
            "'--window', '0.2', '--controller', 'none']); "
            "print(rc, *(m in sys.modules for m in ('numpy', 'gymnasium', 'argparse')), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.split()[-4:] == ["0", "False", "False", "False"]
    assert len(proc.stdout.splitlines()) == 2


@pytest.mark.parametrize("seed", [str(2**63), str(2**64), "9" * 30])
def test_sim_run_shortcut_refuses_a_seed_the_full_parser_refuses(capsys, seed):
    # Was: the shortcut ran a seed past 2^63-1 (2^64 as some other seed), without a word.
    with pytest.raises(SystemExit) as e:
        main(["sim", "run", "--phase", "1", "--windows", "1", "--seed", seed])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--seed" in err and "2^63-1" in err and "Traceback" not in err
