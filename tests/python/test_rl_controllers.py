"""Controllers' decisions on crafted observations, and the long-run runner/summary."""
import json

import numpy as np
import pytest

from nvmw.control import SLASpec
from nvmw.control.controllers import AIMD, AgentController, Fixed, Gradient, NoControl, OracleFixed, PolicyController
from nvmw.lab.evaluation import evaluate_controllers, markdown_report, settle_steps, summarize, write_outputs
from nvmw.rl import SyntheticEnv


def obs(i=8, b=8, qi=0.0, qb=0.0):
    return np.array([i, b, qi, qb, 40, 800000, 0.2, 0.5], np.float32)


def stats(bp99=1000.0):
    return {"batch": {"p99_us": bp99}}


def test_no_control_and_fixed():
    assert NoControl().requires_control is False and NoControl().act(obs(), {}) == 0
    f = Fixed()
    assert f.act(obs(), {"p99_us": 1e6}) == (15, 15) and f.name == "fixed-I15B15"
    with pytest.raises(ValueError):
        Fixed(0, 3)


def test_oracle_looks_up_the_phase():
    o = OracleFixed({1: (10, 10), 3: [7, 3]})
    assert o.act(obs(), {"phase": 3}) == (7, 3)
    assert o.act(obs(), {"phase": 1}) == (10, 10)
    # A phase the table lacks is an error (it used to run 15/15 as if the table said so).
    with pytest.raises(ValueError, match="no entry for phase 2"):
        o.act(obs(), {"phase": 2})
    # No phase told at all (the network service passes -1): the default, I15/B15.
    assert o.act(obs(), {"phase": -1}) == (15, 15) and o.act(obs(), {}) == (15, 15)


def test_oracle_from_sweep_picks_highest_median_reward():
    spec = SLASpec(lat_goal=250, tp_goal=1000, max_latency=1e5, max_throughput=1e5)
    rows = [
        {"phase": 1, "interactive_threads": 4, "batch_threads": 4, "p99_us": 900, "throughput": 2000},
        {"phase": 1, "interactive_threads": 8, "batch_threads": 2, "p99_us": 100, "throughput": 3000},
        {"phase": 1, "interactive_threads": 8, "batch_threads": 2, "p99_us": 120, "throughput": 2900},
        {"phase": 2, "interactive_threads": 2, "batch_threads": 9, "p99_us": 200, "throughput": 500},
        {"phase": 2, "interactive_threads": 3, "batch_threads": 9, "p99_us": 300, "throughput": 5000},
    ]
    assert OracleFixed.best_configs(rows, spec) == {1: (8, 2), 2: (2, 9)}


def test_oracle_from_json(tmp_path):
    p = tmp_path / "o.json"
    p.write_text(json.dumps({"table": {"1": [3, 4]}}))
    assert OracleFixed.from_json(p).table == {1: (3, 4)}
    p.write_text("{}")
    with pytest.raises(ValueError, match="table"):
        OracleFixed.from_json(p)


def test_aimd_decisions():
    c = AIMD(lat_goal_us=250, backoff=0.5, initial=(8, 8))
    assert c.act(obs(), {}) == (8, 8)  # no window yet: hold
    # Over the goal, interactive queue empty: both back off multiplicatively.
    assert c.act(obs(), {"p99_us": 400}) == (4, 4)
    # Over the goal with interactive requests queueing: batch backs off, interactive grows.
    assert c.act(obs(qi=50), {"p99_us": 400}) == (5, 2)
    # Under the goal, no interactive backlog: batch probes up by one, interactive holds.
    assert c.act(obs(), {"p99_us": 100}) == (5, 3)
    # Under the goal with backlog: both grow.
    assert c.act(obs(qi=50), {"p99_us": 100}) == (6, 4)
    for _ in range(10):
        c.act(obs(), {"p99_us": 1e6})
    assert c.act(obs(), {"p99_us": 1e6}) == (1, 1)  # floor
    c.reset()
    assert c.limits_ == [8.0, 8.0]


def test_gradient_decisions():
    c = Gradient(lat_goal_us=250, smoothing=1.0, min_gradient=0.5, initial=(16, 16))
    # p99 at twice the goal: gradient 0.5, new = 16*0.5 + sqrt(16) = 12 for both classes.
    assert c.act(obs(), {"p99_us": 500}) == (12, 12)
    # Far over: clamped at min_gradient. 12*0.5+sqrt(12)=9.46 -> 9
    assert c.act(obs(), {"p99_us": 1e6}) == (9, 9)
    # Under the goal: gradient 1, limit grows by the queue allowance sqrt(limit).
    i, b = c.act(obs(), {"p99_us": 100})
    assert i == round(9.464 + np.sqrt(9.464)) and b == i
    # A batch latency surge above its long-term average backs batch off only.
    c2 = Gradient(lat_goal_us=250, smoothing=1.0, initial=(16, 16), long_window=1000)
    c2.act(obs(), {"p99_us": 100, "stats": stats(1000.0)})
    i2, b2 = c2.act(obs(), {"p99_us": 100, "stats": stats(10000.0)})
    assert b2 < i2


def test_gradient_smoothing_moves_part_way():
    c = Gradient(lat_goal_us=250, smoothing=0.5, min_gradient=0.5, initial=(16, 16))
    # new = 12; smoothed = 0.5*16 + 0.5*12 = 14
    assert c.act(obs(), {"p99_us": 500}) == (14, 14)


def test_agent_and_policy_controllers():
    class Greedy:
        def greedy_action(self, o):
            return 5 if o[0] < 10 else 2

    a = AgentController(Greedy())
    assert a.act(obs(i=3), {}) == 5 and a.act(obs(i=20), {}) == 2
    p = PolicyController(lambda o: np.array([7]), name="sb3")
    assert p.act(obs(), {}) == 7 and p.name == "sb3"


def test_settle_steps():
    tr = {"sla_latency_met": [0, 0, 1, 1, 1, 0, 1, 1, 1, 1], "sla_throughput_met": [1] * 10}
    assert settle_steps(tr, switch_every=5, run=3) == [2, 1]
    assert settle_steps(tr, switch_every=5, run=5) == [None, None]


def test_long_run_on_synthetic_env(tmp_path):
    make = lambda control: SyntheticEnv(control=control)  # noqa: E731
    ctrls = [NoControl(), Fixed(), OracleFixed({1: (13, 6), 2: (12, 9), 3: (20, 3), 4: (22, 4)}),
             AIMD(250), Gradient(250)]
    # Four segments: the schedule draws phases 1-4, one segment each.
    summ, traces = evaluate_controllers(make, ctrls, total_steps=40, switch_every=10, seed=3,
                                        phases=(1, 2, 3, 4))
    assert set(summ) == {"no-control", "fixed-I15B15", "oracle", "aimd", "gradient"}
    # Same seeded schedule for everyone, and every phase appears.
    scheds = {tuple(t["schedule"]) for t in traces.values()}
    assert len(scheds) == 1 and sorted(next(iter(scheds))) == [1, 2, 3, 4]
    assert traces["oracle"]["phase"][:10] == [traces["oracle"]["schedule"][0]] * 10
    # In this model the oracle's table is optimal and meets both goals after the switch step.
    assert summ["oracle"]["sla_both_met"] >= 0.8
    assert summ["oracle"]["reward"]["median"] > summ["fixed-I15B15"]["reward"]["median"]
    assert summ["no-control"]["sla_both_met"] == 0.0
    for s in summ.values():
        r = s["reward"]
        assert r["min"] <= r["q1"] <= r["median"] <= r["q3"] <= r["max"]
        assert 0.0 <= s["sla_both_met"] <= min(s["sla_latency_met"], s["sla_throughput_met"])
    paths = write_outputs(summ, traces, {"cores": 2, "device": "synthetic", "window_s": 1.0, "sla": "synthetic"},
                          tmp_path, switch_every=10)
    with open(paths["json"]) as fh:
        data = json.load(fh)
    assert set(data["oracle"]) >= {"reward", "throughput", "p99_us", "sla_latency_met", "sla_throughput_met",
                                   "sla_both_met"}
    assert (tmp_path / "eval.png").stat().st_size > 1000
    with open(paths["markdown"]) as fh:
        md = fh.read()
    assert "| median |" in md and "oracle" in md and "both" in md


def test_markdown_report_lists_header():
    summ = {"x": summarize({"reward": [1, 2], "throughput": [3, 4], "p99_us": [5, 6], "sla_latency_met": [1, 0],
                            "sla_throughput_met": [1, 1]}, switch_every=2)}
    md = markdown_report(summ, {"cores": 2, "sla": "thesis"})
    assert "**cores**: 2" in md and "| both | 0.500 |" in md
