"""Thesis Algorithm 1 (reward) and SLA spec files: every branch against hand-computed values."""
import math

import pytest

from nvmw.control import SLASpec, load_spec, reward


def simple_spec(**kw):
    # Scaling maps x -> x/100 + 1 for both metrics, so hand computation is easy.
    base = dict(lat_goal=200.0, tp_goal=500.0, min_value=0.0, max_latency=1000.0, max_throughput=1000.0,
                max_scale_lat=11.0, max_scale_tp=11.0, min_scale=1.0, lat_penalty=500.0, tp_penalty=5000.0)
    base.update(kw)
    return SLASpec(**base)


def test_both_goals_met_rewards_distance_times_ten():
    # lat 100 -> 2 (goal 3): err 1; tp 700 -> 8 (goal 6): err 2; 10 * (1 + 2)
    assert reward(100.0, 700.0, simple_spec()) == pytest.approx(30.0)


def test_exactly_on_both_goals_is_met_with_zero_reward():
    assert reward(200.0, 500.0, simple_spec()) == pytest.approx(0.0)


def test_both_goals_missed_adds_both_penalties():
    # lat 400 -> 5 (goal 3): err 2; tp 300 -> 4 (goal 6): err 2; -(500*2 + 5000*2)
    assert reward(400.0, 300.0, simple_spec()) == pytest.approx(-11000.0)


def test_only_latency_missed():
    # lat 250 -> 3.5: err 0.5; tp fine -> -500 * 0.5
    assert reward(250.0, 900.0, simple_spec()) == pytest.approx(-250.0)


def test_only_throughput_missed():
    # tp 450 -> 5.5 (goal 6): err 0.5 -> -5000 * 0.5
    assert reward(50.0, 450.0, simple_spec()) == pytest.approx(-2500.0)


def test_penalties_and_scales_are_used():
    s = simple_spec(lat_penalty=10.0, tp_penalty=1.0, min_value=100.0, max_latency=1100.0)
    # lat: (11-1)*(600-100)/1000 + 1 = 6, goal (11-1)*(200-100)/1000+1 = 2, err 4 -> -40 (tp met)
    assert reward(600.0, 900.0, s) == pytest.approx(-40.0)


def test_thesis_spec_values():
    s = load_spec("thesis")
    assert (s.lat_goal, s.tp_goal, s.max_scale_lat, s.max_scale_tp, s.min_scale) == (250, 250000, 1000, 10, 1)
    assert (s.lat_penalty, s.tp_penalty) == (500, 5000)
    lat = lambda x: 999 * x / 500000 + 1  # noqa: E731
    tp = lambda x: 9 * x / 2e6 + 1  # noqa: E731
    got = reward(1250.0, 50000.0, s)
    want = -(500 * (lat(1250) - lat(250)) + 5000 * (tp(250000) - tp(50000)))
    assert got == pytest.approx(want)
    assert reward(100.0, 450000.0, s) == pytest.approx(10 * ((lat(250) - lat(100)) + (tp(450000) - tp(250000))))


def test_reward_rejects_non_finite():
    with pytest.raises(ValueError):
        reward(math.nan, 1.0, simple_spec())


def test_spec_validation_errors():
    with pytest.raises(ValueError, match="max_latency"):
        simple_spec(max_latency=0.0)
    with pytest.raises(ValueError, match="latency_class"):
        simple_spec(latency_class="fast")
    with pytest.raises(ValueError, match="unknown"):
        SLASpec.from_dict({"lat_goal": 1.0, "bogus": 2})


def test_toml_round_trip(tmp_path):
    s = simple_spec(name="x \"quoted\"", notes="a\nb", latency_class="all")
    p = tmp_path / "s.toml"
    s.save(p)
    assert SLASpec.from_toml(p) == s


def test_toml_errors_name_the_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("lat_goal = [")
    with pytest.raises(ValueError, match="bad.toml"):
        SLASpec.from_toml(p)
    p.write_text("[sla]\nlat_goal = 'fast'\n")
    with pytest.raises(ValueError, match="lat_goal"):
        SLASpec.from_toml(p)
    with pytest.raises(FileNotFoundError):
        SLASpec.from_toml(tmp_path / "missing.toml")
    with pytest.raises(FileNotFoundError, match="neither"):
        load_spec("no-such-spec")


def test_default_spec_is_a_shipped_calibrated_one_when_present():
    s = load_spec(None, device="optane-1dimm")
    assert s.name  # every shipped spec says what it is
    assert s.lat_goal > 0 and s.tp_goal > 0


def test_measure_uses_configured_classes():
    stats = {"interactive": {"p99_us": 10.0, "ops_per_s": 1.0}, "batch": {"p99_us": 99.0, "ops_per_s": 2.0},
             "all": {"p99_us": 50.0, "ops_per_s": 3.0}}
    assert simple_spec().measure(stats) == (10.0, 3.0)
    assert simple_spec(latency_class="batch", throughput_class="interactive").measure(stats) == (99.0, 1.0)
