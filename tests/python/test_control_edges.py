"""Edge-case windows and runs: what the SLA, the control loop, the controllers and the
evaluation report make of a window that served nothing, failed requests, non-finite
values, short segments, NaN summaries and a line-up naming one controller twice."""
import math

import numpy as np
import pytest

from nvmw import _core
from nvmw.control import SLASpec
from nvmw.control.controllers import Fixed, Gradient
from nvmw.control.loop import ControlLoop, Reading
from nvmw.lab.demo import calibration_note, ranking_table
from nvmw.lab.evaluation import evaluate_controllers, summarize
from nvmw.rl import SyntheticEnv

SPEC = SLASpec(lat_goal=250.0, tp_goal=1000.0, max_latency=1e6, max_throughput=1e5)


def _class(ops=1000, errors=0, p99_us=100.0, ops_per_s=10_000.0, queue_len_end=0):
    return {"ops": ops, "errors": errors, "p99_us": p99_us, "ops_per_s": ops_per_s, "queue_len_end": queue_len_end}


def _stats(interactive, batch=None, duration_s=0.1):
    batch = batch or _class()
    all_ = _class(ops=interactive["ops"] + batch["ops"], errors=interactive["errors"] + batch["errors"],
                  p99_us=max(interactive["p99_us"], batch["p99_us"]),
                  ops_per_s=interactive["ops_per_s"] + batch["ops_per_s"],
                  queue_len_end=interactive["queue_len_end"] + batch["queue_len_end"])
    return {"seq": 1, "duration_s": duration_s, "interactive": interactive, "batch": batch, "all": all_}


def test_a_window_that_served_no_waiting_interactive_request_misses_the_latency_goal():
    # The monitor reports p99 0 for a class with no completions; with requests waiting that
    # is a stall, not a window beating the goal by its whole margin.
    m = SPEC.evaluate(_stats(_class(ops=0, p99_us=0.0, ops_per_s=0.0, queue_len_end=7), duration_s=0.1))
    assert m.p99_us == 100_000.0  # the window's length: none was served within it
    assert not m.latency_met
    assert m.reward == SPEC.judge(100_000.0, m.throughput).reward < 0
    # Nothing completed and nothing waiting: an idle class, nothing to violate.
    idle = SPEC.evaluate(_stats(_class(ops=0, p99_us=0.0, ops_per_s=0.0, queue_len_end=0)))
    assert idle.p99_us == 0.0 and idle.latency_met


def test_failed_requests_are_not_served():
    # Every request of both classes failed: neither goal is met, however fast the failures.
    failed = _stats(_class(ops=500, errors=500, p99_us=3.0, ops_per_s=5000.0),
                    _class(ops=500, errors=500, p99_us=3.0, ops_per_s=5000.0), duration_s=0.1)
    m = SPEC.evaluate(failed)
    assert m.throughput == 0.0 and not m.throughput_met
    assert m.p99_us == 100_000.0 and not m.latency_met
    # Some failed: the throughput counts the served share only.
    part = SPEC.evaluate(_stats(_class(ops=1000, errors=250, ops_per_s=1000.0),
                                _class(ops=1000, errors=0, ops_per_s=1000.0)))
    assert part.throughput == pytest.approx(2000.0 * 1750 / 2000)
    assert part.p99_us == 100.0 and part.latency_met


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_window_values_are_refused_by_name(value):
    with pytest.raises(ValueError, match="interactive p99_us"):
        SPEC.evaluate(_stats(_class(p99_us=value)))
    stats = _stats(_class())
    stats["all"]["ops_per_s"] = value
    with pytest.raises(ValueError, match="all ops_per_s"):
        SPEC.evaluate(stats)


class _Plant:
    def __init__(self, obs):
        self.obs = obs

    def apply_threads(self, i, b):
        pass

    def read_window(self):
        return Reading(obs=self.obs, stats=_stats(_class()))


def test_the_loop_refuses_a_nan_state_feature():
    obs = np.ones(len(_core.STATE_NAMES))
    assert ControlLoop(_Plant(obs), SPEC).step(0).metrics.latency_met
    obs[2] = float("nan")
    with pytest.raises(ValueError, match=_core.STATE_NAMES[2]):
        ControlLoop(_Plant(obs), SPEC).step(0)


def test_gradient_ignores_an_infinite_batch_p99():
    def run(windows):
        c = Gradient(lat_goal_us=250, initial=(8, 8))
        out = []
        for bp99 in windows:
            stats = _stats(_class(p99_us=100.0), _class(p99_us=bp99))
            out.append(c.act(np.zeros(8), {"p99_us": 100.0, "stats": stats}))
        return c, out

    clean, clean_out = run([1000.0, 1000.0, 50_000.0, 50_000.0])
    spoiled, spoiled_out = run([1000.0, float("inf"), 1000.0, 50_000.0, 50_000.0])
    assert math.isfinite(spoiled.batch_long_p99_)
    assert spoiled.batch_long_p99_ == clean.batch_long_p99_
    # The batch surge backs the batch limit off as it does without the infinite window.
    assert clean_out[-1][1] < clean_out[1][1]
    assert spoiled_out[-1][1] < spoiled_out[2][1]


def _trace(both):
    n = len(both)
    return {"sla_latency_met": both, "sla_throughput_met": both, "reward": [1.0] * n,
            "throughput": [1.0] * n, "p99_us": [100.0] * n}


def test_segments_too_short_to_settle_are_not_counted_as_unsettled():
    # 12 steps in segments of 5: the last segment has 2 steps and cannot hold 5 in a row.
    s = summarize(_trace([True] * 12), 5)
    assert s["sla_both_met"] == 1.0 and s["segments_settled"] == "2/2"
    assert summarize(_trace([True] * 3), 5)["segments_settled"] == "0/0"
    assert summarize(_trace([True] * 4 + [False] + [True] * 7), 5)["segments_settled"] == "1/2"


def test_a_one_step_evaluation_of_a_single_controller():
    summ, traces = evaluate_controllers(lambda control: SyntheticEnv(control=control), [Fixed(13, 6)],
                                        total_steps=1, switch_every=200, seed=4, phases=(1, 2))
    s = summ["fixed-I13B6"]
    assert s["steps"] == 1 and len(traces["fixed-I13B6"]["step"]) == 1
    assert s["segments_settled"] == "0/0" and s["settle_steps_median"] is None
    assert s["sla_both_ci95"][0] == s["sla_both_ci95"][1] == s["sla_both_met"]


def test_a_line_up_naming_one_controller_twice_is_refused():
    # Reports key runs by name: the second run would silently replace the first.
    with pytest.raises(ValueError, match="fixed-I15B15"):
        evaluate_controllers(lambda control: SyntheticEnv(control=control), [Fixed(), Fixed()],
                             total_steps=2, switch_every=2, seed=0, phases=(1,))


def _summary(both, median_reward=1.0, p99=100.0):
    return {"sla_both_met": both, "sla_latency_met": both, "sla_throughput_met": both,
            "sla_both_ci95": [both, both], "reward": {"median": median_reward}, "p99_us": {"median": p99},
            "steps": 10}


def test_ranking_puts_a_run_without_steps_last():
    nan = float("nan")
    summaries = {"empty": _summary(nan, nan, nan), "bad": _summary(0.2), "good": _summary(0.9)}
    lines = ranking_table(summaries, {"window_s": 0.1}).splitlines()
    assert [line.split()[1] for line in lines[1:4]] == ["good", "bad", "empty"]


def test_calibration_note_ignores_a_run_without_steps():
    nan = float("nan")
    # One controller met the latency goal on 90 % of its windows: no note, whatever the order.
    assert calibration_note({"empty": _summary(nan, nan, nan), "good": _summary(0.9)}) is None
    assert calibration_note({"empty": _summary(nan, nan, nan)}) is None


def test_fractional_decisions_are_refused_not_truncated():
    from nvmw.control.controllers import Controller, PolicyController
    from nvmw.control.loop import check_threads, drive

    assert PolicyController(lambda o: np.array([3])).act(np.zeros(8), {}) == 3
    assert PolicyController(lambda o: (4, 5)).act(np.zeros(8), {}) == (4, 5)
    with pytest.raises(ValueError, match="integers"):
        PolicyController(lambda o: 2.7).act(np.zeros(8), {})
    with pytest.raises(ValueError, match="integers"):
        PolicyController(lambda o: (4.5, 5)).act(np.zeros(8), {})
    with pytest.raises(ValueError, match="integers"):
        check_threads((2.5, 3), 32)

    class Fractional(Controller):
        name = "fractional"

        def act(self, obs, info):
            return 2.7

    env = SyntheticEnv()
    obs, info = env.reset(seed=0, options={"threads": (4, 4)})
    with pytest.raises(ValueError, match="fractional"):
        drive(env, Fractional(), 1, obs, info)
