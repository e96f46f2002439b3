"""More of the lab's inputs, malformed or out of range: agents of another layout, monitor
windows too short to measure, trace schedules past the clock's range. Each is refused
with one error naming the file or option (no traceback) before a run goes on with a
wrong value."""
from __future__ import annotations

import numpy as np
import pytest

from nvmw.cli import main
from nvmw.lab.lineup import ControllerContext, make_controller
from nvmw.rl.agent import N_ACTIONS, N_FEATURES, QLearningAgent


def _one_error_line(capsys, *names: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    for name in names:
        assert name in err, err
    return err


# --- agents of another state/action layout ----------------------------------------

def _agent(path, n_actions: int, n_features: int) -> str:
    rng = np.random.default_rng(0)
    n = 6 * n_actions
    QLearningAgent(n_actions=n_actions, random_state=0).pretrain(
        rng.random((n, n_features)), np.arange(n) % n_actions, rng.random(n)).save(path)
    return str(path)


@pytest.mark.parametrize("n_actions, n_features", [(5, N_FEATURES),       # was: acted among actions 0-4 only
                                                   (N_ACTIONS + 3, N_FEATURES),  # was: refused mid-run
                                                   (N_ACTIONS, 4)])        # was: broadcast error mid-run
def test_an_agent_of_another_layout_is_refused_naming_the_file(tmp_path, capsys, n_actions, n_features):
    path = _agent(tmp_path / "other.joblib", n_actions, n_features)
    words = f"{n_actions} actions over {n_features} state features"
    with pytest.raises(ValueError, match=words) as e:
        QLearningAgent.load(path)
    assert path in str(e.value)
    for online in (False, True):  # the greedy policy beside it, and the agent itself
        with pytest.raises(ValueError, match=words):
            make_controller(f"q-learning:{path}", ControllerContext(online=online))
    assert main(["sim", "run", "--phase", "1", "--windows", "2", "--controller", f"q-learning:{path}"]) == 1
    _one_error_line(capsys, path, words)
    out = tmp_path / "resumed.joblib"
    assert main(["train", "--env", "synthetic", "--steps", "3", "--episodes", "1", "--phases", "1",
                 "--init-agent", path, "--out", str(out)]) == 1
    _one_error_line(capsys, path, words)
    assert not out.exists()


def test_an_agent_of_the_controllers_layout_still_loads(tmp_path):
    path = _agent(tmp_path / "same.joblib", N_ACTIONS, N_FEATURES)
    assert QLearningAgent.load(path).n_actions == N_ACTIONS
    assert make_controller(f"q-learning:{path}").act(np.zeros(N_FEATURES), {}) in range(N_ACTIONS)
