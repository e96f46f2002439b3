"""The long-run evaluation with each controller in a process of its own
(evaluate_controllers(isolate=True), `nvmw evaluate --isolate`): on the deterministic
simulator it gives the very traces of the in-process run, an agent learning online comes
back from its process, Ctrl-C keeps what every process ran, and a process that fails or
dies is an error naming its controller, not a hang."""
from __future__ import annotations

import os

import numpy as np
import pytest

from nvmw.cli import main
from nvmw.control import OnlineAgentController
from nvmw.errors import Interrupted
from nvmw.lab import evaluation
from nvmw.lab.evaluation import ControllerProcessError, EnvFactory, evaluate_controllers, evaluate_lineup
from nvmw.lab.lineup import ControllerContext
from nvmw.rl import QLearningAgent

SIM = EnvFactory("sim", dict(window_s=0.05, max_episode_steps=10**6))
RUN = dict(total_steps=30, switch_every=10, seed=3, phases=(6, 4, 2))


def _strip(traces):
    return {name: {k: v for k, v in tr.items() if k != "wall_s"} for name, tr in traces.items()}


def test_sim_runs_repeat_and_isolation_gives_the_same_traces():
    names = ["none", "fixed:4,1", "q-learning-online"]
    built_a, built_b, built_iso = [], [], []
    _, a = evaluate_controllers(SIM, names, context=ControllerContext(), built=built_a, **RUN)
    _, b = evaluate_controllers(SIM, names, context=ControllerContext(), built=built_b, **RUN)
    # The simulator is deterministic for a seed: the comparison below means something.
    assert _strip(a) == _strip(b)
    summ, iso = evaluate_controllers(SIM, names, context=ControllerContext(), built=built_iso, isolate=True, **RUN)
    assert list(iso) == list(a) == ["no-control", "fixed-I4B1", "q-learning-online"]
    assert _strip(iso) == _strip(a)
    assert len(iso["fixed-I4B1"]["step"]) == 30 and iso["fixed-I4B1"]["schedule"] == a["fixed-I4B1"]["schedule"]
    assert summ["fixed-I4B1"]["steps"] == 30
    # The online agent as it ended the run comes back from its process, having learned
    # exactly what the in-process one did.
    assert [type(c) for c in built_iso] == [OnlineAgentController]
    mine = [c for c in built_a if isinstance(c, OnlineAgentController)][0]
    assert built_iso[0].updates == mine.updates == 30
    assert all(np.array_equal(x.named_steps["sgd"].coef_, y.named_steps["sgd"].coef_)
               for x, y in zip(built_iso[0].agent.models_, mine.agent.models_, strict=True))


def test_isolated_sequential_order_gives_the_same_traces():
    names = ["none", "fixed:8,4"]
    _, a = evaluate_controllers(SIM, names, context=ControllerContext(), **RUN)
    _, iso = evaluate_controllers(SIM, names, context=ControllerContext(), isolate=True, interleave=False, **RUN)
    assert _strip(iso) == _strip(a)


def test_every_run_stops_its_workload_when_it_ends():
    """An env with a pause() (RealEnv: stops its workload) is paused after each of its
    segments, the last one included: a finished run's workload must not keep loading the
    machine while the other controllers run their last segments."""
    logs: list[list[str]] = []

    def make(control):
        env = SIM(control)
        log: list[str] = []
        logs.append(log)
        step = env.step

        def logged_step(action):
            log.append("step")
            return step(action)

        env.step = logged_step
        env.pause = lambda: log.append("pause")
        return env

    for interleave in (True, False):
        logs.clear()
        evaluate_controllers(make, ["none", "fixed:4,1"], interleave=interleave, **RUN)
        assert len(logs) == 2
        for log in logs:
            assert log.count("step") == 30
            assert log[-1] == "pause" and log.count("pause") == (3 if interleave else 1)


def test_isolation_needs_names_and_a_picklable_env_factory():
    with pytest.raises(TypeError, match="names"):
        evaluate_controllers(SIM, [object()], isolate=True, **RUN)
    with pytest.raises(TypeError, match="picklable"):
        evaluate_controllers(lambda control: SIM(control), ["none"], isolate=True, **RUN)


def test_ctrl_c_keeps_what_every_process_ran(monkeypatch):
    """Ctrl-C while the parent waits on a process in the middle of a segment: that process
    stops after its current window, and every process's steps so far come back."""
    calls = []
    original = evaluation._Child.advance

    def advance(self, n, bar):
        calls.append(self.name)
        if len(calls) == 3:  # segment 2 of the first controller, under way
            self.conn.send(("advance", int(n)))
            self.stop.set()
            raise KeyboardInterrupt
        return original(self, n, bar)

    monkeypatch.setattr(evaluation._Child, "advance", advance)
    _, full = evaluate_controllers(SIM, ["none", "fixed:4,1"], context=ControllerContext(), **RUN)
    with pytest.raises(Interrupted) as e:
        evaluate_controllers(SIM, ["none", "fixed:4,1"], context=ControllerContext(), isolate=True, **RUN)
    summaries, traces = e.value.partial
    assert list(traces) == ["no-control", "fixed-I4B1"]
    assert len(traces["fixed-I4B1"]["step"]) == 10
    n = len(traces["no-control"]["step"])
    assert 10 < n <= 20
    assert traces["no-control"]["p99_us"] == full["no-control"]["p99_us"][:n]
    assert summaries["no-control"]["steps"] == n
    assert "steps done per controller" in e.value.note


def test_ctrl_c_in_evaluate_lineup_keeps_the_header(monkeypatch):
    def advance(self, n, bar):
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluation._Child, "advance", advance)
    with pytest.raises(Interrupted) as e:
        evaluate_lineup("sim", ["none"], window_s=0.05, steps=20, switch_every=10, isolate=True)
    summaries, traces, header = e.value.partial
    assert traces == {} and summaries == {} and "interrupted" in header


def test_a_controller_that_fails_in_its_process_is_named():
    with pytest.raises(ControllerProcessError, match="'no-such-controller'.*unknown controller") as e:
        evaluate_controllers(SIM, ["none", "no-such-controller"], context=ControllerContext(), isolate=True, **RUN)
    assert e.value.controller == "no-such-controller"


class _DyingEnvFactory(EnvFactory):
    """The sim env whose process ends abruptly (no exception, no report) at its 5th step."""

    def __call__(self, control):
        env = super().__call__(control)
        step, count = env.step, [0]

        def dying_step(action):
            count[0] += 1
            if count[0] == 5:
                os._exit(7)
            return step(action)

        env.step = dying_step
        return env


def test_a_process_that_dies_is_an_error_naming_its_controller_not_a_hang():
    dying = _DyingEnvFactory("sim", dict(window_s=0.05, max_episode_steps=10**6))
    with pytest.raises(ControllerProcessError, match=r"'fixed:4,1' \(fixed-I4B1\).*died \(exit code 7\)"):
        evaluate_controllers(dying, ["fixed:4,1"], context=ControllerContext(), isolate=True, **RUN)


def test_cli_isolated_online_saves_the_learned_agent(tmp_path):
    out = tmp_path / "eval"
    assert main(["evaluate", "--env", "sim", "--window", "0.05", "--steps", "20", "--switch-every", "10",
                 "--controllers", "q-learning", "--isolate", "--online", "--save-agent",
                 str(tmp_path / "b.joblib"), "--out", str(out)]) == 0
    learned = QLearningAgent.load(tmp_path / "b.joblib")
    assert learned.metadata_["online"]["updates"] == 20
    assert "one per controller" in (out / "run.json").read_text()
