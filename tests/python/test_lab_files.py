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


# --- monitor windows too short to measure -----------------------------------------

@pytest.mark.parametrize("argv", [
    ["sim", "run", "--phase", "1", "--windows", "2", "--window", "1e-6"],          # was: p99 0 at 0 ops/s
    ["sim", "run", "--phase", "1", "--windows", "2", "--window", "1e-6", "--controller", "aimd"],
    ["evaluate", "--env", "sim", "--steps", "2", "--switch-every", "1", "--window", "1e-6",
     "--controllers", "fixed:4,4"],                                                # was: a report of nothing
    ["collect", "--env", "sim", "--steps", "2", "--episodes", "1", "--phases", "1", "--window", "1e-6"],
])
def test_a_window_shorter_than_the_middlewares_is_refused_at_parse_time(tmp_path, capsys, argv):
    out = tmp_path / "out"
    if argv[0] in ("evaluate", "collect"):
        argv = argv + ["--out", str(out)]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--window" in err and "must be >= 0.001" in err and "Traceback" not in err
    assert not out.exists()


def test_the_environments_refuse_a_window_the_middleware_would(tmp_path):
    from nvmw.rl import SyntheticEnv
    from nvmw.rl.sim import SimEnv
    from nvmw.rl.simrun import run_static

    for w in (1e-6, 0.0, -1.0, float("nan"), 1e6):
        for make in (lambda: SimEnv(1, window_s=w), lambda: SyntheticEnv(window_s=w),
                     lambda: run_static(1, windows=1, window_s=w)):
            with pytest.raises(ValueError, match=r"window_s must be a number in \[0.001, 86400\]"):
                make()
    assert run_static(1, windows=1, window_s=0.001)[0]["ops_per_s"] > 0


def test_a_sweep_header_with_a_window_too_short_names_the_file(tmp_path, capsys):
    import json

    from nvmw.lab.calibration import load_sweep

    p = tmp_path / "sweep.json"
    rows = [{"phase": 1, "interactive_threads": 2, "batch_threads": 1, "p99_us": 150.0, "throughput": 4000.0}]
    p.write_text(json.dumps({"rows": rows, "run": {"window_s": 1e-6}}))
    with pytest.raises(ValueError, match="run.window_s must be in"):
        load_sweep(str(p))
    out = tmp_path / "fit.json"
    assert main(["sim", "fit", str(p), "--windows", "1", "--max-evals", "2", "--out", str(out)]) == 1
    _one_error_line(capsys, str(p), "run.window_s")
    assert not out.exists()
