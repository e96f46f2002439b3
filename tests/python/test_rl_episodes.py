"""Episodes as tasks: the same seed gives the same dataset and agent in this process, in
local worker processes and on a local Ray instance; the episode-batched update; online
learning during `nvmw evaluate --online` (and no learning without it)."""
import numpy as np
import pytest

from nvmw.cli import main
from nvmw.control import AgentController, OnlineAgentController
from nvmw.lab.evaluation import run_controller
from nvmw.lab.training import train_per_phase
from nvmw.rl import QLearningAgent, make_env
from nvmw.rl.episodes import EpisodeRunner, episode_seed
from nvmw.rl.pretrain import TRANSITION_KEYS, collect_transitions

ENV = dict(kind="synthetic", max_episode_steps=25)


def _coefs(agent):
    return [m.named_steps["sgd"].coef_.copy() for m in agent.models_]


def _same_agent(a, b):
    return all(np.array_equal(x, y) for x, y in zip(_coefs(a), _coefs(b)))


def _collect_and_train(runner):
    data = collect_transitions(episodes_per_phase=2, phases=(1, 3), seed=7, runner=runner)
    agent = QLearningAgent(random_state=7).pretrain(data["states"], data["actions"], data["rewards"])
    history, _ = train_per_phase(agent, episodes=3, phases=(1, 3), seed=7, runner=runner, update="episode", batch=2)
    return data, agent, history


@pytest.fixture(scope="module")
def in_process():
    with EpisodeRunner("local", env_kwargs=ENV) as runner:
        return _collect_and_train(runner)


def test_episode_seeds_depend_on_run_seed_and_index_only():
    assert episode_seed(0, 5) == episode_seed(0, 5)
    assert len({episode_seed(0, k) for k in range(100)}) == 100
    assert episode_seed(0, 5) != episode_seed(1, 5) and episode_seed(0, 5, 1) != episode_seed(0, 5, 0)


def test_local_workers_match_in_process(in_process):
    data, agent, history = in_process
    assert len(data["actions"]) == 2 * 2 * 25 and sorted(set(data["phases"].tolist())) == [1, 3]
    with EpisodeRunner("local", workers=2, env_kwargs=ENV) as runner:
        data2, agent2, history2 = _collect_and_train(runner)
    for k in TRANSITION_KEYS:
        np.testing.assert_array_equal(data[k], data2[k])
    assert _same_agent(agent, agent2) and history == history2


def test_ray_matches_in_process(in_process):
    ray = pytest.importorskip("ray")
    data, agent, history = in_process
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with EpisodeRunner("ray", workers=2, env_kwargs=ENV) as runner:
            assert runner.describe() == "ray (existing cluster)"
            data2, agent2, history2 = _collect_and_train(runner)
    finally:
        ray.shutdown()
    for k in TRANSITION_KEYS:
        np.testing.assert_array_equal(data[k], data2[k])
    assert _same_agent(agent, agent2) and history == history2
    # and the agent learned: its models moved from the pretrained ones
    fresh = QLearningAgent(random_state=7).pretrain(data["states"], data["actions"], data["rewards"])
    assert not _same_agent(fresh, agent2) and agent2.n_updates_ == 2 * 3 * 25


def test_another_seed_gives_another_dataset(in_process):
    with EpisodeRunner("local", env_kwargs=ENV) as runner:
        other = collect_transitions(episodes_per_phase=2, phases=(1, 3), seed=8, runner=runner)
    assert not np.array_equal(other["actions"], in_process[0]["actions"])


def test_real_middleware_episodes_stay_in_process():
    with pytest.raises(ValueError, match="this process only"):
        EpisodeRunner("local", workers=2, env_kwargs=dict(kind="real"))


def test_update_batch_moves_toward_targets():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 20, (300, 8))
    A = rng.integers(0, 9, 300)
    agent = QLearningAgent(random_state=0).initialize(X)
    before = agent._predict_all(X[:40])[np.arange(40), A[:40]]
    R = np.full(40, 5.0)
    for _ in range(30):
        agent.update_batch(X[:40], A[:40], R, X[1:41], np.ones(40, bool))
    after = agent._predict_all(X[:40])[np.arange(40), A[:40]]
    # terminal transitions: the target is the reward, so Q(s, a) moves to 5
    assert np.mean(np.abs(after - 5.0)) < np.mean(np.abs(before - 5.0)) / 2


def _trained_agent():
    env = make_env("synthetic", max_episode_steps=40)
    data = collect_transitions(env, episodes_per_phase=1, phases=(1, 3), seed=0)
    env.close()
    return QLearningAgent(random_state=0).pretrain(data["states"], data["actions"], data["rewards"])


@pytest.mark.parametrize("online", [False, True])
def test_online_learning_changes_the_q_models_only_when_asked(online):
    agent = _trained_agent()
    before = _coefs(agent)
    ctl = OnlineAgentController(agent, seed=0) if online else AgentController(agent)
    env = make_env("synthetic", max_episode_steps=60)
    trace = run_controller(env, ctl, total_steps=60, switch_every=20, phases=(1, 3))
    env.close()
    assert len(trace["reward"]) == 60
    changed = not all(np.array_equal(x, y) for x, y in zip(before, _coefs(agent)))
    assert changed == online
    if online:
        assert ctl.updates == 60 and ctl.name == "q-learning-online"


def test_evaluate_online_saves_the_learned_agent(tmp_path):
    agent = _trained_agent()
    agent.save(tmp_path / "a.joblib")
    common = ["evaluate", "--env", "synthetic", "--steps", "30", "--switch-every", "10", "--controllers",
              "q-learning", "--agent", str(tmp_path / "a.joblib")]
    assert main(common + ["--online", "--save-agent", str(tmp_path / "b.joblib"), "--out", str(tmp_path / "on")]) == 0
    learned = QLearningAgent.load(tmp_path / "b.joblib")
    assert learned.metadata_["online"]["updates"] == 30
    assert not _same_agent(agent, learned)
    assert (tmp_path / "on" / "eval.md").read_text().count("q-learning-online") >= 1
    # without --online nothing learns, so there is nothing to save
    assert main(common + ["--save-agent", str(tmp_path / "c.joblib"), "--out", str(tmp_path / "off")]) == 1
