"""The greedy policy file saved beside an agent (nvmw.rl.policy): its plain-Python
evaluator acts as the agent (same action, same Q values to rounding) on simulator states
and on random and extreme ones; the shipped one is current; `nvmw sim run --controller
q-learning` runs it without scikit-learn or NumPy and prints the env's rows; a missing,
stale or broken file falls back to the agent."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from nvmw.cli import main
from nvmw.commands import _sim_fast
from nvmw.control.controllers import AgentController
from nvmw.lab.lineup import make_controller
from nvmw.lab.phase_run import simulate_phase
from nvmw.lab.runs import shipped_agent_path
from nvmw.rl.agent import QLearningAgent, export_policy_file
from nvmw.rl.policy import GreedyPolicy, file_sha256, load_beside, policy_path
from nvmw.rl.sim import SimEnv
from nvmw.rl.simrun import run_greedy

SHIPPED = shipped_agent_path("optane-1dimm")
HIGH = np.array([32, 32, 1e9, 1e9, 2.0**32, 2.0**32, 1.0, 1.0])


@pytest.fixture(scope="module")
def shipped():
    return QLearningAgent.load(SHIPPED)


def _simulator_states(agent, steps=25):
    """Observations of short simulator episodes in every phase, acting at random half the
    time (so the states leave the agent's own path) and greedily otherwise."""
    rng = np.random.default_rng(7)
    states = []
    for phase in SimEnv.phases:
        env = SimEnv(phase, window_s=0.5, max_episode_steps=steps)
        obs, _ = env.reset(seed=phase, options={"threads": "random"})
        states.append(obs)
        for _ in range(steps):
            a = int(rng.integers(9)) if rng.random() < 0.5 else agent.greedy_action(obs)
            obs, _r, _term, trunc, _info = env.step(a)
            states.append(obs)
    return np.asarray(states, dtype=np.float64)


def _random_states(n=400, seed=3):
    """Uniform threads, log-uniform queues and block sizes over the observation space,
    uniform ratios; then extremes: zeros, the upper bounds, negatives, huge values,
    infinities and NaN."""
    rng = np.random.default_rng(seed)
    X = np.empty((n, 8))
    X[:, :2] = rng.integers(1, 33, size=(n, 2))
    X[:, 2:4] = np.expm1(rng.uniform(0, np.log1p(1e9), size=(n, 2)))
    X[:, 4:6] = np.expm1(rng.uniform(0, np.log1p(2.0**32), size=(n, 2)))
    X[:, 6:] = rng.uniform(0, 1, size=(n, 2))
    extremes = [np.zeros(8), HIGH, -np.ones(8), np.full(8, 1e300), np.full(8, -1e300), np.full(8, 5e-324),
                np.r_[1.0, 32.0, 0.0, 1e9, 30.0, 2.0**32, 0.0, 1.0], np.r_[32.0, 1.0, 1e9, 0.0, 2.0**32, 30.0, 1.0, 0.0],
                np.r_[np.inf, np.zeros(7)], np.r_[np.zeros(7), np.nan]]
    return np.vstack([X, extremes])


def _assert_acts_as(agent, policy, states):
    refused = 0
    for s in states:
        with np.errstate(all="ignore"):  # inf - inf in the extreme states
            try:
                qa = agent.q_values(s)
            except ValueError:
                # scikit-learn's own predict (adapting scalers) refuses infinite features,
                # which the env's bounded observations never have; the policy gives inf/NaN.
                assert agent.scaler_mode == "partial_fit" and not np.all(np.abs(s) < 1e300)
                refused += 1
                continue
        qp = np.array(policy.q_values(list(s)))
        finite = np.isfinite(qa)
        assert np.array_equal(np.isnan(qp), np.isnan(qa)) and np.array_equal(qp[~finite], qa[~finite], equal_nan=True)
        scale = np.max(np.abs(qa[finite]), initial=0.0)
        np.testing.assert_allclose(qp[finite], qa[finite], rtol=1e-9, atol=1e-9 * scale)
        with np.errstate(all="ignore"):
            assert policy.greedy_action(list(s)) == agent.greedy_action(s)


def test_shipped_policy_acts_as_the_shipped_agent(shipped):
    policy = load_beside(SHIPPED)
    assert isinstance(policy, GreedyPolicy)  # the shipped file is current
    assert policy.to_dict() == shipped.export_policy().to_dict()
    states = np.vstack([_simulator_states(shipped), _random_states()])
    _assert_acts_as(shipped, policy, states)
    # Not one action everywhere: the comparison covers different argmaxes.
    assert len({policy.greedy_action(list(s)) for s in states}) >= 3


def _trained(**kw):
    rng = np.random.default_rng(11)
    X = _random_states(300, seed=5)[:300]
    A = rng.integers(0, 9, size=300)
    R = np.log1p(X[:, 2]) * (A - 4) - X[:, 0] + rng.normal(size=300)
    agent = QLearningAgent(**{"random_state": 1, **kw}).pretrain(X, A, R)
    # A few online updates: with adapting scalers every action ends up with its own.
    agent.update_batch(X[:40], A[:40], R[:40], X[40:80], np.zeros(40, bool))
    return agent, X


@pytest.mark.parametrize("kw", [
    {},  # degree 2, fixed scalers, log1p
    {"scaler_mode": "partial_fit", "feature_transform": "none"},
    {"model_params": [{"degree": 1 + a % 2, "max_iter": 50} for a in range(9)]},
    {"model_params": {"degree": 3, "max_iter": 20}, "scaler_mode": "partial_fit"},
])
def test_exported_policy_acts_as_the_agent(kw):
    agent, X = _trained(**kw)
    policy = GreedyPolicy.from_dict(json.loads(json.dumps(agent.export_policy().to_dict())))
    _assert_acts_as(agent, policy, np.vstack([X, _random_states(200, seed=9)]))
    if kw.get("scaler_mode") == "partial_fit":
        means = {tuple(m["mean"]) for m in policy.to_dict()["models"]}
        assert len(means) > 1  # each action's own scaler is exported


def test_greedy_runs_give_the_env_rows_in_every_phase(shipped):
    # The env with the scikit-learn agent against the plain runner with the policy file.
    policy = load_beside(SHIPPED)
    moved = 0
    for phase in SimEnv.phases:
        env_rows = simulate_phase(phase, controller=AgentController(shipped), windows=12, window_s=1.0, seed=phase)
        assert run_greedy(phase, policy, windows=12, window_s=1.0, seed=phase) == env_rows
        moved += len({tuple(r["threads"]) for r in env_rows}) > 1
    assert moved >= 3  # the agent changes the threads, so its actions are compared


def test_sim_run_q_learning_uses_the_policy_file_and_prints_the_env_rows(shipped, capsys):
    args = ["--phase", "5", "--windows", "6", "--window", "1.0", "--seed", "4"]
    assert _sim_fast.parse(["--controller", "q-learning", *args]) is not None
    assert main(["sim", "run", "--controller", "q-learning", *args]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == simulate_phase(5, controller=AgentController(shipped), windows=6, window_s=1.0, seed=4)


def test_sim_run_q_learning_needs_no_scikit_learn_or_numpy():
    code = ("import sys; from nvmw.cli import main; rc = main(['sim', 'run', '--phase', '5', '--windows', '3', "
            "'--window', '0.5', '--controller', 'q-learning']); "
            "print(rc, *(m in sys.modules for m in ('sklearn', 'scipy', 'numpy', 'gymnasium', 'joblib', 'argparse')),"
            " file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.split()[-7:] == ["0"] + ["False"] * 6
    assert len(proc.stdout.splitlines()) == 3


def test_missing_stale_or_broken_policy_file_falls_back_to_the_agent(tmp_path, capsys):
    path = tmp_path / "mine.joblib"
    agent, X = _trained()
    agent.save(path)
    side = policy_path(path)
    assert side == str(tmp_path / "mine.policy.json") and os.path.exists(side)
    assert isinstance(make_controller(f"q-learning:{path}").agent, GreedyPolicy)
    args = ["sim", "run", "--controller", f"q-learning:{path}", "--phase", "3", "--windows", "4", "--window", "0.5"]
    assert main(args) == 0
    with_policy = capsys.readouterr().out

    def falls_back():
        assert load_beside(path) is None
        assert _sim_fast.parse(args[2:]) is None
        c = make_controller(f"q-learning:{path}")
        assert isinstance(c.agent, QLearningAgent)
        assert main(args) == 0
        return capsys.readouterr().out

    os.remove(side)  # missing
    assert falls_back() == with_policy
    export_policy_file(path)  # written again for the agent file as it is
    assert load_beside(path) is not None and main(args) == 0 and capsys.readouterr().out == with_policy

    shutil.copy(side, tmp_path / "old.json")
    other, _ = _trained(gamma=0.5, random_state=4)
    other.save(path)  # a new agent file: its own policy file
    assert load_beside(path).to_dict() == other.export_policy().to_dict()
    shutil.copy(tmp_path / "old.json", side)  # stale: written for the previous agent file
    falls_back()
    with open(tmp_path / "old.json") as fh:
        old = json.load(fh)
    for text in ("{not json", json.dumps({**old, "format": "other"}), "[]"):
        with open(side, "w") as fh:
            fh.write(text)
        falls_back()
    # A current hash over malformed models is refused too.
    d = other.export_policy().to_dict()
    d["models"][0]["powers"][0] = [1, 2]
    d["agent_sha256"] = file_sha256(path)
    with open(side, "w") as fh:
        json.dump(d, fh)
    falls_back()


def test_policy_refuses_malformed_models_and_exploring():
    good = {"mean": [0.0, 1.0], "scale": [1.0, 2.0], "powers": [[1, 0], [0, 1]], "coef": [1.0, -1.0],
            "intercept": 0.5}
    p = GreedyPolicy("none", [good, {**good, "intercept": 0.0}])
    assert p.q_values([3.0, 5.0]) == [3.0 - 2.0 + 0.5, 3.0 - 2.0]
    assert p.greedy_action([3.0, 5.0]) == 0 and p.act([3.0, 5.0]) == 0
    assert GreedyPolicy("none", [good, good]).greedy_action([0.0, 0.0]) == 0  # ties: lowest action
    with pytest.raises(ValueError, match="explore"):
        p.act([3.0, 5.0], explore=True)
    with pytest.raises(ValueError, match=re.escape("obs must be one state of 2 features, got shape (3,)")):
        p.q_values([1.0, 2.0, 3.0])
    for bad in ({"coef": [1.0]}, {"powers": [[1, -1], [0, 1]]}, {"mean": [0.0]}, {"scale": "x"},
                {"intercept": None}, {"powers": [[1, 0], [0, True]]}):
        with pytest.raises(ValueError):
            GreedyPolicy("none", [good, {**good, **bad}])
    with pytest.raises(ValueError, match="feature_transform"):
        GreedyPolicy("sqrt", [good])
