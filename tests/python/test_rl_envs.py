"""Gymnasium environments: API conformance (check_env), seeding, actions, info convention,
phase switching; RealEnv on the real middleware + phase workload with 0.05 s windows."""
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from nvmw import _core
from nvmw.control import load_spec, reward
from nvmw.control.loop import INFO_KEYS as LOOP_INFO_KEYS
from nvmw.rl import RealEnv, SeqPhaseEnv, SyntheticEnv
from nvmw.workloads.phases import DEFAULT_PHASES

INFO_KEYS = {"stats", "p99_us", "throughput", "offered_ops_per_s", "phase", "threads", "window_s",
             "sla_latency_met", "sla_throughput_met", "control"}


def test_action_table_matches_thesis_table_3_3():
    # The one action table is the core's; Python only reads it.
    assert _core.ACTION_DELTAS == ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (1, -1), (-1, 1), (-1, -1))
    assert _core.N_ACTIONS == 9 and SyntheticEnv().action_space.n == _core.N_ACTIONS
    assert tuple(_core.apply_action((1, 32), 8)) == (1, 31)
    assert tuple(_core.apply_action((32, 1), 6)) == (32, 1)
    assert tuple(_core.apply_action((5, 5), 7, max_threads=32)) == (4, 6)
    assert set(LOOP_INFO_KEYS) == INFO_KEYS


def test_synthetic_env_passes_check_env():
    check_env(SyntheticEnv(max_episode_steps=10))


def test_reset_is_reproducible_and_options_work():
    env = SyntheticEnv()
    o1, _ = env.reset(seed=5)
    o2, _ = env.reset(seed=5)
    np.testing.assert_array_equal(o1, o2)
    o3, info = env.reset(seed=5, options={"phase": 3, "threads": (7, 3)})
    assert info["phase"] == 3 and tuple(o3[:2]) == (7, 3) and env.threads == (7, 3)
    env.step(0)
    env.reset(options={"phase": 2, "threads": "keep"})
    assert env.threads == (7, 3) and env.phase == 2
    with pytest.raises(ValueError, match="phase"):
        env.reset(options={"phase": 9})
    with pytest.raises(ValueError, match="threads"):
        env.reset(options={"threads": (0, 4)})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"speed": 1})


def test_step_applies_actions_and_truncates_at_200():
    env = SyntheticEnv()
    env.reset(seed=0, options={"threads": (10, 10)})
    _, r, term, trunc, info = env.step(5)
    assert env.threads == (11, 11) and info["threads"] == [11, 11]
    assert INFO_KEYS <= set(info) and not term and not trunc
    assert r == pytest.approx(reward(info["p99_us"], info["throughput"], env.sla))
    with pytest.raises(ValueError):
        env.step(9)
    n = 1
    while not trunc:
        _, _, _, trunc, _ = env.step(0)
        n += 1
    assert n == 200


def test_seq_phase_env_switches_in_seeded_random_order():
    # The default phase set (thesis 1-4 and the contended 5-6): each block of six segments
    # is a permutation of it.
    n = len(DEFAULT_PHASES)
    env = SeqPhaseEnv(SyntheticEnv(), total_steps=20 * n, switch_every=10)
    env.reset(seed=1)
    sched = list(env.schedule_)
    assert len(sched) == 2 * n and sorted(sched[:n]) == list(DEFAULT_PHASES) and sorted(sched[n:]) == list(DEFAULT_PHASES)
    phases, trunc, steps = [], False, 0
    while not trunc:
        _, _, _, trunc, info = env.step(0)
        phases.append(info["phase"])
        steps += 1
    assert steps == 20 * n
    assert phases[::10] == sched and env.unwrapped.threads == (15, 15)
    env.reset(seed=1)
    assert env.schedule_ == sched
    env.reset(seed=2)
    assert env.schedule_ != sched


def test_step_before_reset_and_after_close_is_an_error():
    # The synthetic model used to answer a step of an env never reset with a made-up window.
    env = SyntheticEnv()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    with pytest.raises(RuntimeError, match=r"reset\(\) before set_threads"):
        env.set_threads(2, 2)
    env.reset(seed=0)
    env.step(0)
    env.close()
    env.close()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    env.step(0)


def test_step_takes_integer_actions_only():
    env = SyntheticEnv()
    env.reset(seed=0, options={"threads": (10, 10)})
    env.step(np.int64(1))
    env.step(np.array(1))
    assert env.threads == (12, 10)
    # True is an int to Python (== 1), not an action index.
    for bad in (True, np.True_, 1.0, np.array([1]), -1, _core.N_ACTIONS, "1", None):
        with pytest.raises(ValueError, match="action"):
            env.step(bad)
    assert env.threads == (12, 10)


def test_reset_options_name_the_bad_value():
    env = SyntheticEnv()
    # 2.5 and True used to become phases 2 and 1, "2" phase 2.
    for phase in (2.5, True, "2"):
        with pytest.raises(ValueError, match="phase"):
            env.reset(options={"phase": phase})
    assert env.reset(options={"phase": np.int64(3)})[1]["phase"] == 3
    # An array of threads used to fail on `array == "keep"`; a word other than keep/random
    # on unpacking.
    obs, _ = env.reset(options={"threads": np.array([4, 5])})
    assert tuple(obs[:2]) == (4, 5) and env.threads == (4, 5)
    with pytest.raises(ValueError, match="threads must be .*'random' or 'keep'"):
        env.reset(options={"threads": "kept"})


@pytest.mark.parametrize("max_threads", [0, -3, 2.5, True])
def test_max_threads_must_be_a_positive_integer(max_threads):
    # 0 used to be taken and every reset then failed inside NumPy (low >= high).
    with pytest.raises(ValueError, match="max_threads"):
        SyntheticEnv(max_threads=max_threads)


@pytest.mark.parametrize("steps", [2.5, "3", True, 0])
def test_max_episode_steps_must_be_a_positive_integer(steps):
    # 2.5 used to become 2 steps, "3" a TypeError.
    with pytest.raises(ValueError, match="max_episode_steps"):
        SyntheticEnv(max_episode_steps=steps)


@pytest.mark.parametrize("noise", [float("nan"), -0.1, float("inf")])
def test_synthetic_noise_must_be_finite_and_not_negative(noise):
    # NaN noise used to give NaN rewards; a negative one failed at the first step.
    with pytest.raises(ValueError, match="noise"):
        SyntheticEnv(noise=noise)


def test_seq_phase_env_passes_check_env_and_ends():
    env = SeqPhaseEnv(SyntheticEnv(), total_steps=20, switch_every=5)
    with warnings.catch_warnings():
        # Gymnasium warns about any wrapper given to check_env; every other warning is an error.
        warnings.filterwarnings("ignore", message=".*different from the unwrapped")
        check_env(env)
    env.reset(seed=3)
    for _ in range(20):
        env.step(0)
    # A step past the end used to fail with an IndexError into the phase schedule.
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)
    env.reset(seed=3)
    env.step(0)


@pytest.mark.parametrize("phases", [(), (9,), (1, 2.5)])
def test_seq_phase_env_refuses_phases_it_cannot_run(phases):
    # No phase used to hang reset() (an endless loop over empty permutations); an unknown one
    # failed only at the reset that drew it.
    with pytest.raises(ValueError, match="phase"):
        SeqPhaseEnv(SyntheticEnv(), total_steps=20, switch_every=5, phases=phases)


# ---- the real middleware ---------------------------------------------------------------

@pytest.fixture
def real_env():
    env = RealEnv(1, window_s=0.05, max_episode_steps=50, sla="thesis", device="optane-1dimm")
    yield env
    env.close()


def test_real_env_passes_check_env(real_env):
    check_env(real_env)


def test_real_env_steps_report_window_stats(real_env):
    obs, info = real_env.reset(seed=3, options={"threads": (4, 2)})
    assert tuple(obs[:2]) == (4, 2)
    seen = set()
    for a in (1, 3, 0):
        obs, r, term, trunc, info = real_env.step(a)
        assert INFO_KEYS <= set(info)
        assert set(info["stats"]) >= {"interactive", "batch", "all"}
        assert info["p99_us"] == info["stats"]["interactive"]["p99_us"]
        assert info["throughput"] == info["stats"]["all"]["ops_per_s"]
        assert info["offered_ops_per_s"] > 0
        assert isinstance(r, float) and np.isfinite(r)
        assert obs in real_env.observation_space
        seen.add(info["stats"]["seq"])
    assert len(seen) == 3  # one fresh window per step
    assert real_env.threads == (5, 3) and tuple(real_env.mw.threads) == (5, 3)
    assert obs[0] == 5 and obs[1] == 3
    real_env.switch_phase(3)
    _, _, _, _, info = real_env.step(0)
    assert info["phase"] == 3 and real_env.threads == (5, 3)
    # Batch requests of phase 3 are 4 KB reads: the next window shows it.
    _, _, _, _, info = real_env.step(0)
    assert info["stats"]["batch"]["mean_block_bytes"] == pytest.approx(4096, rel=0.01)


def step_until_requests(env, action: int, steps: int = 200) -> dict:
    """The info of the first step whose window has requests: the workload's clients may
    have none in a 0.05 s window on a loaded machine (they catch up in the next)."""
    for _ in range(steps):
        info = env.step(action)[4]
        if info["stats"]["all"]["ops"] > 0:
            return info
    pytest.fail(f"no requests in {steps} windows")


def test_real_env_no_control_mode():
    env = RealEnv(2, window_s=0.05, control=False, sla=load_spec("thesis"))
    try:
        env.reset(seed=0)
        info = step_until_requests(env, 5)  # actions are ignored without pools
        assert info["control"] is False
    finally:
        env.close()


def test_real_env_pause_stops_the_workload_and_switch_resumes(real_env):
    real_env.reset(seed=1, options={"threads": (3, 2)})
    real_env.step(0)
    real_env.pause()
    assert real_env.workload is None
    # While paused no request arrives: a window closes empty.
    seq = real_env.mw.get_stats()["seq"]
    idle = real_env.mw.wait_for_window(real_env.mw.wait_for_window(seq, 5.0)["seq"], 5.0)
    assert idle["all"]["ops"] == 0
    real_env.switch_phase(4)  # restarts the workload, skips the windows closed while paused
    info = step_until_requests(real_env, 0)
    assert info["phase"] == 4 and real_env.threads == (3, 2)
    assert info["stats"]["seq"] > idle["seq"]
