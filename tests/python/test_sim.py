"""The simulator (nvmw.rl.sim, fitted by nvmw.lab.simfit): Gymnasium conformance, determinism,
the behaviour the fit relies on, its calibration tooling and the `nvmw sim` command."""
import json
import os

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from nvmw import _core
from nvmw.cli import main
from nvmw.control.controllers import Fixed, NoControl
from nvmw.lab.calibration import derive_spec, promise_configs
from nvmw.lab.evaluation import evaluate_controllers
from nvmw.lab.runs import data_path
from nvmw.lab.simfit import compare, fit, per_config, simulate_sweep
from nvmw.rl.sim import SimEnv, default_params, load_params
from nvmw.workloads.phases import DEFAULT_PHASES


def test_check_env_passes_including_determinism():
    env = SimEnv(1, window_s=0.05, max_episode_steps=20)
    check_env(env, skip_render_check=True)


def _trajectory(seed, phase=1, steps=15):
    env = SimEnv(phase, window_s=0.05)
    obs, _ = env.reset(seed=seed)
    out = [obs.tolist()]
    for k in range(steps):
        obs, r, term, trunc, info = env.step(k % 9)
        out.append((obs.tolist(), r, info["p99_us"], info["throughput"]))
    return out


def test_same_seed_same_episode_other_seed_other_episode():
    assert _trajectory(4) == _trajectory(4)
    assert _trajectory(4) != _trajectory(5)


def test_close_releases_the_simulator_and_a_reset_brings_it_back():
    env = SimEnv(1, window_s=0.05)
    env.reset(seed=0)
    env.step(0)
    env.close()
    env.close()
    # A closed env used to keep its simulator and step on.
    assert env.sim is None
    with pytest.raises(RuntimeError, match="reset"):
        env.step(1)
    # These failed on the missing simulator (AttributeError on None).
    with pytest.raises(RuntimeError, match=r"reset\(\) before set_threads"):
        env.set_threads(3, 3)
    with pytest.raises(RuntimeError, match=r"reset\(\) before switch_phase"):
        env.switch_phase(2)
    env.reset(seed=0)
    assert env.step(0)[4]["stats"]["all"]["ops"] > 0


def test_info_and_observation_follow_the_env_convention():
    env = SimEnv(4, window_s=0.1, max_episode_steps=3)
    obs, info = env.reset(seed=0, options={"threads": (5, 7)})
    assert obs[0] == 5 and obs[1] == 7 and info["phase"] == 4
    obs, r, term, trunc, info = env.step(1)  # +1 interactive
    assert info["threads"] == [6, 7] and obs[0] == 6 and obs[1] == 7
    assert set(info) >= {"stats", "p99_us", "throughput", "offered_ops_per_s", "phase", "threads", "window_s",
                         "sla_latency_met", "sla_throughput_met", "control"}
    s = info["stats"]
    assert s["interactive"]["threads"] == 6 and s["batch"]["threads"] == 7
    # Phase 4's interactive side writes 90 %, batch reads 4 KB (phase file).
    assert obs[4] > 0 and obs[5] == pytest.approx(4096) and obs[7] == 0.0
    assert 0.5 < obs[6] <= 1.0
    assert info["offered_ops_per_s"] == pytest.approx(10_000, rel=0.01)
    env.step(0)
    _o, _r, _t, trunc, _i = env.step(0)
    assert trunc


def _median_p99(phase, threads, windows=30, control=True, seed=0):
    env = SimEnv(phase, window_s=0.1, control=control, max_episode_steps=windows)
    env.reset(seed=seed, options={"threads": threads})
    return float(np.median([env.step(0)[4]["p99_us"] for _ in range(windows)]))


def test_fitted_model_keeps_the_measured_shape():
    # What the real sweep shows (bench/results-calibration-sweep.json, caller-runs
    # middleware, the 2-vCPU AMD EPYC VM): in phase 4 one interactive permit is worse than
    # several (median p99 I1/B1 127 us vs I8/B1 46 us), and many batch permits raise the
    # interactive p99 (I8/B32 56 us, 1.23x). The fit keeps both directions but not the
    # first one's size: its phase-4 p99 has a floor near 150 us, so I1/B1 comes out only
    # ~1.2x I8/B1 (docs/sim.md). (With caller-runs, phase 1 no longer shows the first
    # effect: its interactive load is light enough for one permit.)
    assert _median_p99(4, (1, 1)) > 1.1 * _median_p99(4, (8, 1))
    assert _median_p99(4, (8, 32)) > 1.1 * _median_p99(4, (8, 1))


def test_switch_phase_keeps_threads_and_changes_load():
    env = SimEnv(1, window_s=0.1, max_episode_steps=50)
    env.reset(seed=1, options={"threads": (9, 3)})
    env.step(0)
    env.unwrapped.switch_phase(4)
    for _ in range(3):
        _o, _r, _t, _tr, info = env.step(0)
    assert info["phase"] == 4 and info["threads"] == [9, 3]
    assert info["throughput"] > 8000  # phase 4 offers 10k ops/s, phase 1 4.5k


def test_no_control_reports_zero_threads():
    env = SimEnv(2, window_s=0.1, control=False, max_episode_steps=5)
    env.reset(seed=0)
    obs, _r, _t, _tr, info = env.step(0)
    assert obs[0] == 0 and obs[1] == 0 and info["threads"] == [0, 0] and info["throughput"] > 3000


def test_parameters_bad_input():
    with pytest.raises(ValueError, match="unknown simulator parameters"):
        load_params({"cpus": 2})
    with pytest.raises(FileNotFoundError, match="no simulator parameter file"):
        load_params("/nonexistent/params.json")
    with pytest.raises(ValueError):
        SimEnv(99)
    p = default_params()
    p["background"] = 1.5
    with pytest.raises(ValueError, match="sim params out of range"):
        _core.Simulator(p)
    sim = _core.Simulator(default_params())
    with pytest.raises(ValueError, match="sorted"):
        sim.set_workload({"times_us": [0, 5, 1], "writes": [0, 0, 0], "bytes": [8, 8, 8], "clients": 1},
                         {"times_us": [0], "writes": [0], "bytes": [8], "clients": 1})
    with pytest.raises(ValueError, match="unknown workload key"):
        sim.set_workload({"time": [0]}, {"times_us": [0], "writes": [0], "bytes": [8], "clients": 1})


@pytest.mark.parametrize("window_s", [0.0, 86400.5, 1e300])
def test_simulator_window_is_at_most_a_day(window_s):
    # 1e300 s used to be taken: the virtual clock overflowed and the second window never ended.
    with pytest.raises(ValueError, match=r"window_s must be in \(0, 86400\]"):
        _core.Simulator(default_params(), window_s=window_s)
    _core.Simulator(default_params(), window_s=86400.0)


def test_shipped_fit_loads_and_records_its_quality():
    with open(data_path("sim", "optane-1dimm.json")) as fh:
        shipped = json.load(fh)
    assert load_params() == {**default_params(), **shipped["params"]}
    overall = shipped["fit"]["overall"]
    assert -1 <= overall["spearman_p99"] <= 1 and overall["p99_median_abs_rel_error"] >= 0


# The recorded real sweep lives in the repository's bench/ (tests run from the source tree).
SWEEP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                     "results-calibration-sweep.json")


@pytest.fixture
def small_sweep():
    with open(SWEEP) as fh:
        rows = json.load(fh)["rows"]
    return [r for r in rows if r["phase"] == 1 and r["interactive_threads"] in (1, 8)
            and r["batch_threads"] in (1, 32)]


def test_compare_identity_and_fit_improves_a_bad_start(small_sweep):
    from nvmw.lab.simfit import _loss

    real = per_config(small_sweep)
    rep = compare(real, real)
    assert rep["overall"]["spearman_p99"] == pytest.approx(1.0)
    assert rep["overall"]["p99_median_abs_rel_error"] == 0.0
    bad = dict(default_params(), wake_cpu_us=300.0, jitter=0.0)
    before = _loss(real, simulate_sweep(real, bad, window_s=0.1, windows=3))
    res = fit(small_sweep, window_s=0.1, start=bad, windows=3, max_evals=25)
    assert res["fit"]["loss"] < before
    assert set(res["params"]) == set(default_params())


def test_sim_commands(small_sweep, tmp_path, capsys):
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"rows": small_sweep, "run": {"device": "optane-1dimm", "window_s": 0.1,
                                                               "cores": 2}}))
    assert main(["sim", "fit", str(sweep), "--out", str(tmp_path / "p.json"), "--max-evals", "3",
                 "--windows", "2"]) == 0
    assert load_params(str(tmp_path / "p.json"))["cores"] == 2.0
    capsys.readouterr()
    assert main(["sim", "check", str(sweep), "--params", str(tmp_path / "p.json"), "--windows", "2",
                 "--plot", str(tmp_path / "c.png")]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["per_phase"]["1"]["configs"] == 4 and (tmp_path / "c.png").stat().st_size > 1000
    assert main(["sim", "run", "--phase", "3", "--threads", "4", "2", "--windows", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["threads"] == [4, 2]
    assert main(["sim", "check", str(tmp_path / "missing.json")]) == 1


def _sweep_rows(configs, windows: int = 10) -> list[dict]:
    """Sweep rows of (phase, interactive threads, p99(k), throughput(k)) configurations, one
    batch thread each, for windows k = 0 .. windows - 1."""
    return [{"phase": ph, "interactive_threads": i, "batch_threads": 1, "p99_us": lat(k), "throughput": tp(k)}
            for k in range(windows) for ph, i, lat, tp in configs]


def test_attain_rule_hand_computed():
    # Phase 1: config A's window p99s are 100..190 (q0.9 = 181), B's 50..950 (q0.9 = 860);
    # throughputs 1000..1900 for both (q0.1 = 1090). Phase 2: one config at 200..290 (q0.9 =
    # 281), throughput 2000..2900 (q0.1 = 2090). lat_goal = max(181, 281), tp_goal = min(1090, 2090).
    rows = _sweep_rows([(1, 1, lambda k: 100 + 10 * k, lambda k: 1000 + 100 * k),
                        (1, 2, lambda k: 50 + 100 * k, lambda k: 1000 + 100 * k),
                        (2, 1, lambda k: 200 + 10 * k, lambda k: 2000 + 100 * k)])
    spec, rep = derive_spec(rows, rule="attain", attain=0.9)
    assert spec.lat_goal == pytest.approx(281.0) and spec.tp_goal == pytest.approx(1090.0)
    assert rep["promise_per_phase"]["1"]["config"] == "I1B1"
    with pytest.raises(ValueError, match="rule"):
        derive_spec(rows, rule="median")
    spec_q, _ = derive_spec(rows, rule="quantile", quantile=0.5)
    assert spec_q.lat_goal != spec.lat_goal


def test_attain_rule_pools_throughput_windows_of_configurations_delivering_the_same():
    # The latency promise is A's (p99 100..190). A's throughputs 1000..1090 (median 1045,
    # own q0.1 = 1009); B delivers the same median with a wider spread (595..1495 by 100);
    # C falls behind (median 504.5) and is not pooled. Pooled A and B: 20 windows, q0.1 at
    # index 1.9 of the sorted values 595, 695, 795, ... = 695 + 0.9 * 100 = 785.
    rows = _sweep_rows([(1, 1, lambda k: 100 + 10 * k, lambda k: 1000 + 10 * k),
                        (1, 2, lambda k: 500 + 10 * k, lambda k: 595 + 100 * k),
                        (1, 4, lambda k: 900 + 10 * k, lambda k: 500 + k)])
    spec, rep = derive_spec(rows, rule="attain", attain=0.9)
    promise = rep["promise_per_phase"]["1"]
    assert promise["config"] == "I1B1" and promise["throughput_peer_configs"] == 2
    assert promise["throughput_windows"] == 20
    assert promise["throughput_own_windows"] == pytest.approx(1009.0)
    assert spec.tp_goal == pytest.approx(785.0)
    # With no tolerance only configurations of exactly the promise's median are pooled.
    spec0, _ = derive_spec(rows, rule="attain", attain=0.9, tp_peer=0.0)
    assert spec0.tp_goal == pytest.approx(785.0)
    with pytest.raises(ValueError, match="tp_peer"):
        derive_spec(rows, tp_peer=1.5)


def test_attain_rule_takes_the_promise_from_confirmation_windows():
    # The sweep chooses I1B1 (q0.9 181 < I1B2's 860); its confirmation windows, measured
    # later, are 300..390 (q0.9 381): the promise and lat_goal are 381, not 181. Windows
    # of another configuration in the confirmation are ignored.
    rows = _sweep_rows([(1, 1, lambda k: 100 + 10 * k, lambda k: 1000.0),
                        (1, 2, lambda k: 50 + 100 * k, lambda k: 1000.0)])
    again = _sweep_rows([(1, 1, lambda k: 300 + 10 * k, lambda k: 1000.0),
                         (1, 2, lambda k: 10.0, lambda k: 1000.0)])
    spec, rep = derive_spec(rows, rule="attain", attain=0.9, confirm_rows=again)
    promise = rep["promise_per_phase"]["1"]
    assert rep["confirmed"] is True and promise["config"] == "I1B1" and promise["confirm_windows"] == 10
    assert spec.lat_goal == pytest.approx(381.0) and promise["p99_us_in_sample"] == pytest.approx(181.0)
    assert promise_configs(rows) == {1: (1, 1)}
    with pytest.raises(ValueError, match="I1B1"):
        derive_spec(rows, confirm_rows=_sweep_rows([(1, 2, lambda k: 10.0, lambda k: 1000.0)]))


def test_confirmation_corrects_the_winners_curse_of_a_sweep():
    # 36 configurations that are all alike: a window's p99 is 100 us x exp(0.5 a + 0.3 e),
    # a drawn once per stretch of workload and e per window. A sweep runs each
    # configuration on one stretch (12 windows), so the smallest of the 36 quantiles is the
    # configuration that got the calmest stretch; the confirmation (4 new stretches of 30
    # windows) estimates what the choice keeps. The promise every configuration truly keeps
    # is the 0.9-quantile over stretches and windows, here from a large sample.
    rng = np.random.default_rng(7)
    truth = float(np.quantile(100.0 * np.exp(0.5 * rng.standard_normal(200_000)
                                             + 0.3 * rng.standard_normal(200_000)), 0.9))

    def stretch(i, b, n, phase=1):
        a = rng.standard_normal()
        return [{"phase": phase, "interactive_threads": i, "batch_threads": b, "throughput": 1000.0,
                 "p99_us": float(100.0 * np.exp(0.5 * a + 0.3 * rng.standard_normal()))} for _ in range(n)]

    in_sample, confirmed = [], []
    for _ in range(20):
        rows = [r for i in range(1, 7) for b in range(1, 7) for r in stretch(i, b, 12)]
        (cfg,) = promise_configs(rows).values()
        again = [r for _ in range(4) for r in stretch(*cfg, 30)]
        in_sample.append(derive_spec(rows)[0].lat_goal)
        confirmed.append(derive_spec(rows, confirm_rows=again)[0].lat_goal)
    assert np.mean(in_sample) < 0.6 * truth
    assert abs(np.median(confirmed) / truth - 1) < 0.25


def test_interleaved_and_sequential_evaluation_agree_on_a_deterministic_env():
    make = lambda control: SimEnv(window_s=0.05, control=control)  # noqa: E731
    kw = dict(total_steps=6 * len(DEFAULT_PHASES), switch_every=6, seed=2)
    a, ta = evaluate_controllers(make, [NoControl(), Fixed(4, 2)], interleave=True, **kw)
    b, tb = evaluate_controllers(make, [NoControl(), Fixed(4, 2)], interleave=False, **kw)
    for name in ta:
        assert ta[name]["p99_us"] == tb[name]["p99_us"] and ta[name]["schedule"] == tb[name]["schedule"]
    assert sorted(ta["no-control"]["schedule"]) == list(DEFAULT_PHASES)


def test_calls_from_another_thread_wait_for_the_running_window():
    # run_window releases the GIL; a call from another thread meanwhile once read (or
    # changed) the simulator mid-window, a data race. Now it waits for the window's end,
    # so the virtual time it sees is always a whole number of windows.
    import threading

    sim = _core.Simulator(default_params(), window_s=0.05, fast_forward=False)
    n = 200
    sim.set_workload({"times_us": [10.0 * i for i in range(n)], "writes": [i % 2 for i in range(n)],
                      "bytes": [128] * n, "clients": 16, "period_us": 2000.0},
                     {"times_us": [0.0], "writes": [1], "bytes": [800 * 1024], "clients": 4, "period_us": 1.0})
    done = threading.Event()

    def run():
        for _ in range(5):
            sim.run_window()
        done.set()

    runner = threading.Thread(target=run)
    runner.start()
    seen = []
    while not done.is_set():
        seen.append(sim.virtual_s)
        sim.set_threads(8, 2)
    runner.join()
    assert seen
    assert all(abs(v / 0.05 - round(v / 0.05)) < 1e-6 for v in seen), sorted(set(seen))[:5]
    assert sim.virtual_s == pytest.approx(0.25) and sim.threads == (8, 2)


@pytest.mark.parametrize("action", ["fit", "check", "run"])
def test_every_sim_option_says_what_it_is(action):
    # Was: sim run's --phase, --window, --device, --params and --seed and sim check's
    # SWEEP, --device, --window and --seed showed no help at all.
    import argparse

    from nvmw.cli import build_parser

    def subcommands(parser):
        return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices

    parser = subcommands(subcommands(build_parser("sim"))["sim"])[action]
    assert [a.option_strings or [a.dest] for a in parser._actions if a.help is None] == []
