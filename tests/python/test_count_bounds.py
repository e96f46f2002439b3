"""The bounds of the commands' counts: `nvmw collect --episodes`, `nvmw train --episodes |
--collect-episodes | --rounds | --batch | --fqi-iterations`, `--workers` of both, `nvmw
calibrate --windows | --confirm-windows | --confirm-runs | --no-control-windows |
--capacity-clients`, `nvmw sweep --reps | --clients | --records`, `nvmw ycsb --records |
--ops`, `nvmw trace synth --rows | --tasks` and `nvmw bench overhead|engine` outside their
ranges are usage errors naming the option before anything runs (a huge one ran without end,
kept every transition, record or row until memory ran out, or started a process or thread
per unit), the bound is in the help, and the library functions behind them refuse the same
with a ValueError naming the argument."""
import numpy as np
import pytest

from nvmw.cli import main
from nvmw.commands import bench, calibrate, collect, sweep, trace, train, ycsb
from nvmw.lab.calibration import CONFIRM_RUNS_MAX, SWEEP_WINDOWS_MAX, confirm_env, no_control_windows, sweep_env
from nvmw.lab.capacity import CLIENTS_MAX, interactive_capacity
from nvmw.lab.sweep import REPS_MAX, SweepConfig
from nvmw.lab.training import ROUNDS_MAX, train_per_phase
from nvmw.rl.agent import FQI_ITERATIONS_MAX, N_ACTIONS, N_FEATURES, QLearningAgent
from nvmw.rl.episodes import EPISODES_MAX, WORKERS_MAX, EpisodeRunner
from nvmw.rl.pretrain import collect_transitions
from nvmw.rl.simrun import check_count
from nvmw.workloads import traces
from nvmw.workloads.traces import SVD_TASKS_MAX, SYNTH_ROWS_MAX
from nvmw.workloads.ycsb import OPERATIONS_MAX, RECORDS_MAX, THREADS_MAX, YcsbConfig


class _Ran(Exception):
    """Raised by a stand-in for the run: the command got past its checks."""


def _ran(*args, **kwargs):
    raise _Ran()


@pytest.fixture
def no_run(monkeypatch, tmp_path):
    """What the commands run replaced by one that raises _Ran (the env is still built), in
    an empty working directory, with PMEM_IS_PMEM_FORCE set (a command that needs it would
    re-exec itself)."""
    monkeypatch.setenv("PMEM_IS_PMEM_FORCE", "1")
    for module, name in ((collect, "runner_from_args"), (train, "runner_from_args"),
                         (calibrate, "sweep_env"), (calibrate, "measure_capacity"), (sweep, "run_sweep"),
                         (ycsb, "run_ycsb"), (trace, "synth")):
        monkeypatch.setattr(module, name, _ran)
    monkeypatch.setattr(bench, "_core", type("Core", (), {"run_overhead_bench": staticmethod(_ran),
                                                          "run_engine_bench": staticmethod(_ran)}))
    monkeypatch.chdir(tmp_path)


_COMMANDS = {
    "collect": ["collect", "--env", "synthetic", "--out", "t.npz"],
    "train": ["train", "--env", "synthetic", "--out", "a.joblib"],
    "calibrate": ["calibrate", "--env", "synthetic", "--out", "s.toml", "--no-control-out", "nc.json"],
    "capacity": ["calibrate", "--capacity"],
    "sweep": ["sweep", "--out", "sweep-out"],
    "ycsb": ["ycsb"],
    "trace synth": ["trace", "synth", "svd", "-o", "t.csv"],
    "bench overhead": ["bench", "overhead"],
    "bench engine": ["bench", "engine"],
}

#: (command, option, lowest, highest)
_BOUNDS = [
    ("collect", "--episodes", 1, EPISODES_MAX),
    ("collect", "--workers", 1, WORKERS_MAX),
    ("train", "--episodes", 0, EPISODES_MAX),
    ("train", "--collect-episodes", 0, EPISODES_MAX),
    ("train", "--rounds", 1, ROUNDS_MAX),
    ("train", "--batch", 1, EPISODES_MAX),
    ("train", "--fqi-iterations", 0, FQI_ITERATIONS_MAX),
    ("train", "--workers", 1, WORKERS_MAX),
    ("calibrate", "--windows", 1, SWEEP_WINDOWS_MAX),
    ("calibrate", "--confirm-windows", 0, SWEEP_WINDOWS_MAX),
    ("calibrate", "--confirm-runs", 1, CONFIRM_RUNS_MAX),
    ("calibrate", "--no-control-windows", 0, SWEEP_WINDOWS_MAX),
    ("capacity", "--capacity-clients", 1, CLIENTS_MAX),
    ("sweep", "--reps", 1, REPS_MAX),
    ("sweep", "--clients", 1, THREADS_MAX),
    ("sweep", "--ycsb-clients", 1, THREADS_MAX),
    ("sweep", "--batch-clients", 1, THREADS_MAX),
    ("sweep", "--records", 1, RECORDS_MAX),
    ("ycsb", "--records", 1, RECORDS_MAX),
    ("ycsb", "--ops", 0, OPERATIONS_MAX),
    ("trace synth", "--rows", 1, SYNTH_ROWS_MAX),
    ("trace synth", "--tasks", 1, SVD_TASKS_MAX),
    ("bench overhead", "--ops", 1, bench.OPS_MAX),
    ("bench overhead", "--async-ops", 1, bench.ASYNC_OPS_MAX),
    ("bench engine", "--small-keys", 1, bench.SMALL_KEYS_MAX),
    ("bench engine", "--large-keys", 1, bench.LARGE_KEYS_MAX),
    ("bench engine", "--runs", 1, bench.RUNS_MAX),
]


def test_the_bounds():
    # Far past the defaults and the thesis (150 random and 700-1000 Q-learning episodes per
    # phase), and still a run that ends.
    assert (EPISODES_MAX, WORKERS_MAX, ROUNDS_MAX, FQI_ITERATIONS_MAX) == (10_000, 256, 1_000, 1_000)
    assert (SWEEP_WINDOWS_MAX, CONFIRM_RUNS_MAX, CLIENTS_MAX) == (1_000, 100, 4096)
    assert (REPS_MAX, THREADS_MAX, RECORDS_MAX, OPERATIONS_MAX) == (100, 4096, 10**8, 10**9)
    assert (SYNTH_ROWS_MAX, SVD_TASKS_MAX) == (10**8, 100_000)
    assert (bench.OPS_MAX, bench.ASYNC_OPS_MAX, bench.SMALL_KEYS_MAX, bench.LARGE_KEYS_MAX, bench.RUNS_MAX) == \
        (10**8, 10**9, 10**7, 4096, 100)


@pytest.mark.parametrize("above", [1, 2**63 - 1 - 10_000, 10**20])
@pytest.mark.parametrize("command, option, lo, hi", _BOUNDS)
def test_past_the_bound_is_a_usage_error_before_the_run(no_run, capsys, command, option, lo, hi, above):
    value = str(hi + above)
    with pytest.raises(SystemExit) as e:
        main([*_COMMANDS[command], option, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: {value} is out of range: must be between {lo} and {hi}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("command, option, lo, hi", _BOUNDS)
def test_below_the_range_is_a_usage_error_naming_the_range(no_run, capsys, command, option, lo, hi):
    with pytest.raises(SystemExit) as e:
        main([*_COMMANDS[command], option, str(lo - 1)])
    assert e.value.code == 2
    assert f"argument {option}: {lo - 1} is out of range: must be between {lo} and {hi}" in capsys.readouterr().err


@pytest.mark.parametrize("command, option, lo, hi", _BOUNDS)
def test_the_bound_itself_is_taken(no_run, command, option, lo, hi):
    with pytest.raises(_Ran):
        main([*_COMMANDS[command], option, str(hi)])


def _option_help(out: str, option: str) -> str:
    """The help of `option` in a --help text: its lines up to the next option's."""
    block, inside = [], False
    for line in out.splitlines():
        if line.startswith("  -"):
            inside = line.split()[0] == option
        if inside:
            block.append(line)
    assert block, option
    return " ".join(" ".join(block).split())


@pytest.mark.parametrize("command, option, lo, hi", _BOUNDS)
def test_the_bound_is_in_the_help(capsys, command, option, lo, hi):
    with pytest.raises(SystemExit):
        main([*_COMMANDS[command][:2 if command in ("trace synth", "bench overhead", "bench engine") else 1],
              "--help"])
    text = _option_help(capsys.readouterr().out, option)
    assert f"at most {hi:,}" in text, text


@pytest.mark.parametrize("option", ["--episodes", "--collect-episodes", "--workers"])
def test_the_help_says_what_a_unit_costs(capsys, option):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = _option_help(capsys.readouterr().out, option)
    assert ("MB" if option == "--workers" else "0.04 s of the simulator") in text, text


# --- the library ------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0, 1, 10, np.int64(7)])
def test_check_count_takes_integers_in_range(value):
    assert check_count(value, "n", 10, lo=0) == int(value)


@pytest.mark.parametrize("value", [-1, 11, 2**63, True, 2.0, "3", None])
def test_check_count_refuses_the_rest_naming_the_argument(value):
    with pytest.raises(ValueError, match=r"^n must be an integer in \[0, 10\], got "):
        check_count(value, "n", 10, lo=0)


@pytest.mark.parametrize("value", [0, EPISODES_MAX + 1, 2.5])
def test_collect_transitions_refuses_episodes_out_of_range(value):
    with pytest.raises(ValueError, match=r"^episodes_per_phase must be an integer in \[1, 10,000\]"):
        collect_transitions(None, episodes_per_phase=value)


@pytest.mark.parametrize("name, value, bound", [
    ("episodes", EPISODES_MAX + 1, r"\[0, 10,000\]"), ("episodes", -1, r"\[0, 10,000\]"),
    ("rounds", ROUNDS_MAX + 1, r"\[1, 1,000\]"), ("rounds", 0, r"\[1, 1,000\]"),
    ("batch", EPISODES_MAX + 1, r"\[1, 10,000\]"), ("batch", -2, r"\[1, 10,000\]"),
])
def test_train_per_phase_refuses_counts_out_of_range_before_any_episode(name, value, bound):
    kwargs = dict(episodes=2, rounds=1, batch=None)
    kwargs[name] = value
    with pytest.raises(ValueError, match=rf"^{name} must be an integer in {bound}"):
        train_per_phase(None, None, **kwargs)


@pytest.mark.parametrize("workers", [0, WORKERS_MAX + 1, 2.5])
def test_episode_runner_refuses_workers_out_of_range(workers):
    # On the real middleware, so that nothing is started whatever the check says.
    with pytest.raises(ValueError, match=r"^workers must be an integer in \[1, 256\]"):
        EpisodeRunner("local", workers=workers, env_kwargs={"kind": "real"})


def test_the_bound_of_workers_is_taken():
    runner = EpisodeRunner("local", workers=WORKERS_MAX, env_kwargs={"kind": "synthetic"})
    try:
        assert runner.workers == WORKERS_MAX
    finally:
        runner.close()


class _NoEnv:
    """An env the checks must refuse before touching."""

    control = False

    def reset(self, *args, **kwargs):
        raise AssertionError("the env was used")


@pytest.mark.parametrize("value", [0, SWEEP_WINDOWS_MAX + 1])
def test_the_calibration_runs_refuse_windows_out_of_range(value):
    with pytest.raises(ValueError, match=r"^windows must be an integer in \[1, 1,000\]"):
        sweep_env(_NoEnv(), windows=value)
    with pytest.raises(ValueError, match=r"^windows must be an integer in \[1, 1,000\]"):
        no_control_windows(_NoEnv(), windows=value)
    with pytest.raises(ValueError, match=r"^windows must be an integer in \[1, 1,000\]"):
        confirm_env(_NoEnv(), {1: (1, 1)}, windows=value)


@pytest.mark.parametrize("runs", [0, CONFIRM_RUNS_MAX + 1])
def test_confirm_env_refuses_runs_out_of_range(runs):
    with pytest.raises(ValueError, match=r"^runs must be an integer in \[1, 100\]"):
        confirm_env(_NoEnv(), {1: (1, 1)}, runs=runs)


@pytest.mark.parametrize("clients", [[CLIENTS_MAX + 1], [1, "many"]])
def test_interactive_capacity_refuses_clients_out_of_range_before_measuring(clients):
    with pytest.raises(ValueError, match=r"^clients must be an integer in \[1, 4,096\]"):
        interactive_capacity("optane-1dimm", clients=clients)


def test_pretrain_refuses_too_many_fitted_q_iterations():
    states = np.random.default_rng(0).random((2 * N_ACTIONS, N_FEATURES))
    actions = np.arange(len(states)) % N_ACTIONS
    with pytest.raises(ValueError, match=r"^fqi_iterations must be an integer in \[0, 1,000\]"):
        QLearningAgent().pretrain(states, actions, np.zeros(len(states)), fqi_iterations=FQI_ITERATIONS_MAX + 1)


@pytest.mark.parametrize("name, value", [("reps", 0), ("reps", REPS_MAX + 1), ("ycsb_clients", THREADS_MAX + 1),
                                         ("batch_clients", THREADS_MAX + 1), ("batch_clients", 2.5)])
def test_sweep_config_refuses_counts_out_of_range(name, value):
    with pytest.raises(ValueError, match=rf"^{name} must be an integer in \[1, "):
        SweepConfig(**{name: value}).validate()


@pytest.mark.parametrize("name, value", [("record_count", RECORDS_MAX + 1), ("record_count", -1),
                                         ("operation_count", OPERATIONS_MAX + 1), ("operation_count", 1.5)])
def test_ycsb_config_refuses_counts_out_of_range(name, value):
    with pytest.raises(ValueError, match=rf"^{name} must be an integer in \[0, "):
        YcsbConfig(**{name: value}).validate()


@pytest.mark.parametrize("kind, options", [("azure", {"accesses_per_s": 1e-8}), ("svd", {"task_ms": 1e9})])
@pytest.mark.parametrize("rows", [0, SYNTH_ROWS_MAX + 1, True])
def test_synth_refuses_rows_out_of_range_before_building_the_trace(kind, options, rows):
    # Was: at a fast enough pace, 10^12 rows reserved the whole trace in memory first. (The
    # slow pace here would be refused for its span if the rows were not refused first.)
    with pytest.raises(ValueError, match=r"^rows must be an integer in \[1, 100,000,000\]"):
        traces.synth(kind, rows=rows, **options)


#: (command, option): durations bounded by the longest schedule of the core's generators.
_DURATIONS = [("sweep", "--duration"), ("capacity", "--capacity-duration")]


@pytest.mark.parametrize("command, option", _DURATIONS)
def test_a_duration_past_the_longest_schedule_is_a_usage_error(no_run, capsys, command, option):
    # 1e300 s used to get past the parser, to be refused later by the generator's own check.
    for value in ("1e300", str(traces.MAX_SCHEDULE_S * 2), "0", "-1"):
        with pytest.raises(SystemExit) as e:
            main([*_COMMANDS[command], option, value])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {option}: {value} is out of range: must be > 0 and <= {traces.MAX_SCHEDULE_S:g}" in err
    with pytest.raises(_Ran):
        main([*_COMMANDS[command], option, str(traces.MAX_SCHEDULE_S)])
