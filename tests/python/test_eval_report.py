"""The evaluation's noise figure (bootstrap over phase segments) and the demo's ranking."""
import json

import numpy as np

from nvmw.lab.demo import ranking_table
from nvmw.lab.evaluation import segment_spread, summarize


def test_segment_spread_per_segment_fractions_and_interval():
    both = np.array([1] * 10 + [0] * 10 + [1, 0] * 5, bool)
    per, (lo, hi) = segment_spread(both, 10, seed=1)
    assert per == [1.0, 0.0, 0.5]
    assert 0.0 <= lo <= both.mean() <= hi <= 1.0
    assert hi - lo > 0.3  # segments this different give a wide interval


def test_segment_spread_identical_segments_have_no_spread():
    both = np.array([1, 0, 1, 1] * 6, bool)
    per, (lo, hi) = segment_spread(both, 4)
    assert per == [0.75] * 6
    assert lo == hi == 0.75


def test_segment_spread_weights_a_short_last_segment_by_its_length():
    both = np.array([1] * 8 + [0] * 2, bool)
    per, (lo, hi) = segment_spread(both, 8, resamples=4000)
    assert per == [1.0, 0.0]
    # Resampled totals are weighted by segment length: never below 0 or above 1, and the
    # interval includes the all-long-segment case (1.0).
    assert lo >= 0.0 and hi == 1.0


def _trace(lat, tp):
    n = len(lat)
    return {"sla_latency_met": lat, "sla_throughput_met": tp, "reward": list(range(n)),
            "throughput": [1.0] * n, "p99_us": [100.0] * n}


def test_ranking_orders_by_both_sla_fraction():
    good = summarize(_trace([True] * 6, [True] * 6), 3)
    bad = summarize(_trace([True, False] * 3, [True] * 6), 3)
    text = ranking_table({"bad": bad, "good": good}, {"window_s": 0.1, "phases": "1,2", "switch_every": 3})
    lines = text.splitlines()
    assert lines[1].split()[:2] == ["1", "good"]
    assert lines[2].split()[:2] == ["2", "bad"]
    assert "6 windows of 0.1 s" in lines[-1]


def test_demo_summary_says_higher_when_control_loses():
    from nvmw.commands.demo import _versus
    assert _versus(20_000.0, 2_000.0) == "10.0x lower than"
    assert _versus(2_000.0, 5_000.0) == "2.5x higher than"
    assert _versus(1_000.0, 0.0).endswith("lower than")  # an empty window never divides by zero


def test_demo_notes_when_no_controller_meets_the_latency_goal_here():
    from nvmw.control.sla import load_spec
    from nvmw.lab.demo import calibration_note
    from nvmw.lab.runs import shipped_oracle_path

    goal = load_spec(None, device="optane-1dimm").lat_goal
    slow = summarize({**_trace([False, False, True] * 2, [True] * 6), "p99_us": [2_000.0] * 6}, 3)
    slower = summarize({**_trace([False] * 6, [True] * 6), "p99_us": [5_000.0] * 6}, 3)
    note = calibration_note({"a": slow, "b": slower})
    assert note is not None
    assert f"SLA's {goal:,.0f} us" in note and "best 0.33" in note and "lowest median p99 2,000 us" in note
    with open(shipped_oracle_path("optane-1dimm"), encoding="utf-8") as fh:
        cpu = json.load(fh)["run"]["cpu"]
    assert f"calibrated on {cpu}" in note  # the machine the shipped oracle file names
    assert "scripts/recalibrate.sh" in note
    # One controller meeting the goal on half of its windows: the ranking stands, no note.
    half = summarize(_trace([True, False] * 3, [True] * 6), 3)
    assert calibration_note({"a": slow, "b": half}) is None
    assert calibration_note({}) is None
