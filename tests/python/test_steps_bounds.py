"""The bounds of the RL commands' steps: `nvmw collect|train --steps` and `nvmw evaluate
--steps|--switch-every` outside [1, RUN_WINDOWS_MAX] are usage errors naming the option
before anything runs (a huge one ran without end, a window of real time per step, and grew
its transitions or traces until memory ran out), and the library functions behind them
refuse them too."""
import re

import numpy as np
import pytest

from nvmw.cli import main
from nvmw.commands import collect, train
from nvmw.control.controllers import Fixed
from nvmw.lab import evaluation
from nvmw.lab.evaluation import evaluate_controllers, evaluate_lineup
from nvmw.rl.envs import SeqPhaseEnv, SyntheticEnv
from nvmw.rl.registry import make_env
from nvmw.rl.simrun import RUN_WINDOWS_MAX, check_steps


class _Ran(Exception):
    """Raised by a stand-in for the run: the command got past its checks."""


def _ran(*args, **kwargs):
    raise _Ran()


@pytest.fixture
def no_run(monkeypatch, tmp_path):
    """The runs behind collect, train and evaluate replaced by one that raises _Ran (the
    env and the controllers are still built), in an empty working directory."""
    for module, name in ((collect, "collect_transitions"), (train, "collect_transitions"),
                         (evaluation, "evaluate_controllers")):
        monkeypatch.setattr(module, name, _ran)
    monkeypatch.chdir(tmp_path)


_COMMANDS = {
    # One episode of one phase: at the largest --steps its transitions (about 1 GB) fit in
    # memory, which collect checks for the product of its options before it runs.
    "collect": ["collect", "--env", "synthetic", "--episodes", "1", "--phases", "1", "--out", "t.npz"],
    "train": ["train", "--env", "synthetic", "--out", "a.joblib"],
    "evaluate": ["evaluate", "--env", "synthetic", "--controllers", "none", "fixed:15,15", "--out", "eval"],
}


@pytest.mark.parametrize("value", ["0", "-1", str(RUN_WINDOWS_MAX + 1), str(2**63 - 1), "99999999999999999999"])
@pytest.mark.parametrize("command, option", [("collect", "--steps"), ("train", "--steps"), ("evaluate", "--steps"),
                                             ("evaluate", "--switch-every")])
def test_out_of_range_is_a_usage_error_before_the_run(no_run, capsys, command, option, value):
    with pytest.raises(SystemExit) as e:
        main([*_COMMANDS[command], option, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: {value} is out of range: must be between 1 and {RUN_WINDOWS_MAX}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("command, option", [("collect", "--steps"), ("train", "--steps"), ("evaluate", "--steps"),
                                             ("evaluate", "--switch-every")])
def test_the_bound_itself_is_taken(no_run, command, option):
    with pytest.raises(_Ran):
        main([*_COMMANDS[command], option, str(RUN_WINDOWS_MAX)])


@pytest.mark.parametrize("command, options", [("collect", ["--steps"]), ("train", ["--steps"]),
                                              ("evaluate", ["--steps", "--switch-every"])])
def test_the_bound_is_in_the_help(capsys, command, options):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for option in options:
        assert re.search(rf"{option} [A-Z_]+ steps [a-z ]+, at most {RUN_WINDOWS_MAX:,}[: ]", out), out


@pytest.mark.parametrize("value", [1, 200, RUN_WINDOWS_MAX, np.int64(7)])
def test_check_steps_takes_integers_in_range(value):
    assert check_steps(value) == int(value)


@pytest.mark.parametrize("value", [0, -1, RUN_WINDOWS_MAX + 1, 2**63, True, 2.5, 200.5, "3", None])
def test_check_steps_refuses_the_rest_naming_the_argument(value):
    with pytest.raises(ValueError, match=r"^total_steps must be an integer in \[1, 1,000,000\]"):
        check_steps(value, "total_steps")


@pytest.mark.parametrize("kind", ["synthetic", "sim"])
def test_make_env_refuses_too_many_steps_per_episode(kind):
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_env(kind, window_s=0.1, max_episode_steps=RUN_WINDOWS_MAX + 1)
    env = make_env(kind, window_s=0.1, max_episode_steps=RUN_WINDOWS_MAX)
    assert env.max_episode_steps == RUN_WINDOWS_MAX
    env.close()


@pytest.mark.parametrize("name", ["total_steps", "switch_every"])
@pytest.mark.parametrize("value", [0, RUN_WINDOWS_MAX + 1, 2.5])
def test_the_long_run_refuses_steps_out_of_range(name, value):
    # A long run of 2^62 steps used to start by drawing its whole schedule of segments.
    kwargs = dict(total_steps=20, switch_every=5)
    kwargs[name] = value
    with pytest.raises(ValueError, match=name):
        SeqPhaseEnv(SyntheticEnv(), **kwargs)


@pytest.mark.parametrize("name", ["total_steps", "switch_every"])
def test_evaluate_controllers_refuses_steps_out_of_range_before_any_env(name):
    kwargs = dict(total_steps=20, switch_every=5)
    kwargs[name] = RUN_WINDOWS_MAX + 1
    with pytest.raises(ValueError, match=name):
        evaluate_controllers(_ran, [Fixed(15, 15)], **kwargs)


@pytest.mark.parametrize("name", ["steps", "switch_every"])
def test_evaluate_lineup_refuses_steps_out_of_range_before_any_env(monkeypatch, name):
    monkeypatch.setattr(evaluation, "make_env", _ran)
    kwargs = dict(steps=20, switch_every=5)
    kwargs[name] = RUN_WINDOWS_MAX + 1
    with pytest.raises(ValueError, match=name):
        evaluate_lineup("synthetic", ["none"], window_s=0.1, **kwargs)
