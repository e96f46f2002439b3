"""The one control loop (nvmw.control.loop) on a scripted plant: decisions go through the
core's action table, the SLA spec judges every window, no-control ignores decisions; and
`drive` is what runs controllers on envs (starting threads stated by the controller)."""
import numpy as np
import pytest

from nvmw import _core
from nvmw.control import SLASpec
from nvmw.control.controllers import Controller, Fixed
from nvmw.control.loop import ControlLoop, Reading, drive
from nvmw.lab.evaluation import run_controller
from nvmw.lab.phase_run import simulate_phase
from nvmw.rl import SyntheticEnv

SPEC = SLASpec(lat_goal=250.0, tp_goal=1000.0, max_latency=1e5, max_throughput=1e5)


class ScriptedPlant:
    """Windows with a fixed p99/throughput; records every resize."""

    def __init__(self, p99=100.0, tp=2000.0):
        self.resizes = []
        self.p99, self.tp = p99, tp

    def apply_threads(self, i, b):
        self.resizes.append((i, b))

    def read_window(self):
        stats = {c: {"p99_us": self.p99, "ops_per_s": self.tp} for c in ("interactive", "batch", "all")}
        return Reading(obs=np.zeros(8), stats=stats)


def test_actions_use_the_core_table_and_clamp():
    plant = ScriptedPlant()
    loop = ControlLoop(plant, SPEC, max_threads=4)
    loop.restart((4, 1))
    assert plant.resizes == []  # a restart records, it does not resize
    loop.step(5)  # (+1, +1): interactive clamps at 4
    assert loop.threads == tuple(_core.apply_action((4, 1), 5, 4)) == (4, 2)
    loop.step(0)  # keep: no resize
    loop.step((2, 3))
    assert plant.resizes == [(4, 2), (2, 3)]
    with pytest.raises(ValueError, match="threads"):
        loop.apply((0, 3))
    with pytest.raises(ValueError):
        loop.step(_core.N_ACTIONS)


def test_the_sla_spec_judges_each_window():
    w = ControlLoop(ScriptedPlant(p99=100.0, tp=2000.0), SPEC).step(0)
    assert (w.metrics.p99_us, w.metrics.throughput) == (100.0, 2000.0)
    assert w.metrics.latency_met and w.metrics.throughput_met
    assert w.metrics == SPEC.judge(100.0, 2000.0)
    miss = ControlLoop(ScriptedPlant(p99=900.0, tp=10.0), SPEC).step(0).metrics
    assert not miss.latency_met and not miss.throughput_met and miss.reward < 0


def test_no_control_ignores_decisions():
    plant = ScriptedPlant()
    loop = ControlLoop(plant, SPEC, control=False)
    loop.step(5)
    loop.step((7, 7))
    assert plant.resizes == [] and loop.threads == (1, 1)


class Hold(Controller):
    """Keeps whatever threads it started with."""

    name = "hold"
    initial_threads = (3, 4)

    def act(self, obs, info):
        return 0


def test_runs_start_from_the_controllers_own_threads():
    trace = run_controller(SyntheticEnv(), Hold(), total_steps=6, switch_every=3, seed=0)
    assert trace["interactive_threads"] == [3] * 6 and trace["batch_threads"] == [4] * 6


def test_drive_applies_targets_and_stops_at_truncation():
    env = SyntheticEnv(max_episode_steps=5)
    obs, info = env.reset(seed=0, options={"threads": (10, 10)})
    seen = []
    obs, info, n, ended = drive(env, Fixed(6, 2), 50, obs, info,
                                on_step=lambda o, a, r, no, te, tr, i: seen.append((a, tuple(i["threads"]))))
    assert ended and n == 5 and seen == [(0, (6, 2))] * 5


def test_simulated_phase_runs_any_controller_from_its_own_start():
    rows = simulate_phase(1, controller="aimd", windows=3, seed=1)
    assert len(rows) == 3 and rows[0]["threads"] == [8, 8]  # AIMD's initial limits, held without a window
    assert simulate_phase(3, controller="fixed:4,2", windows=2, seed=0) == \
        simulate_phase(3, controller=Fixed(4, 2), windows=2, seed=0)
    assert all(r["threads"] == [4, 2] for r in simulate_phase(3, controller="fixed:4,2", windows=2))
