"""More of the lab's inputs, malformed or out of range: agents of another layout, monitor
windows too short to measure, trace schedules past the clock's range. Each is refused
with one error naming the file or option (no traceback) before a run goes on with a
wrong value."""
from __future__ import annotations

import re

import numpy as np
import pytest

from cli_output import one_error_line as _one_error_line
from nvmw.cli import main
from nvmw.lab.lineup import ControllerContext, make_controller
from nvmw.rl.agent import N_ACTIONS, N_FEATURES, QLearningAgent


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


# --- schedules past the core's clock ------------------------------------------------

def _azure_file(tmp_path) -> str:
    from nvmw.workloads import traces

    p = tmp_path / "az.csv"
    traces.synth("azure", rows=50, seed=3).write(str(p), "azure", seed=3, shuffle=False)
    return str(p)


def test_replay_refuses_a_pace_too_slow_to_schedule(tmp_path, capsys):
    path = _azure_file(tmp_path)
    # Was: every request due "now" (the schedule wrapped), p99 9e15 us, offered -2e-8 ops/s.
    assert main(["replay", path, "--accel", "1e-300", "--duration", "0.2"]) == 1
    _one_error_line(capsys, "accel 1e-300", "too slow to schedule")
    assert main(["replay", path, "--accel", "1e-3", "--duration", "0.1", "--json"]) == 0


def test_replay_durations_past_the_clock_are_refused(tmp_path, capsys):
    from nvmw.workloads import traces

    # Was: the end time wrapped into the past, 0 requests replayed, exit 0.
    with pytest.raises(SystemExit) as e:
        main(["replay", _azure_file(tmp_path), "--duration", "1e300"])
    assert e.value.code == 2 and "--duration" in capsys.readouterr().err
    with pytest.raises(ValueError, match="duration_s must be in"):
        traces.replay_options(duration_s=1e300)
    assert traces.replay_options(duration_s=traces.MAX_SCHEDULE_S)["duration_s"] == traces.MAX_SCHEDULE_S


def test_check_pace_covers_one_record_traces():
    from nvmw import _core
    from nvmw.workloads import traces

    one = _core.Trace.from_records([(0, "read", "k", 10)])
    assert traces.check_pace(one, 1e-6) == 1e-6      # one record repeats every 1e6 s
    with pytest.raises(ValueError, match="too slow"):
        traces.check_pace(one, 1e-10)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite number > 0"):
            traces.check_pace(one, bad)


def test_run_phase_and_the_simulator_refuse_a_rate_scale_too_slow_to_schedule(capsys):
    from nvmw.workloads.phases import phase_workloads

    # Was: "offered -0" and an interactive p99 of 9e15 us.
    assert main(["run-phase", "1", "--duration", "0.2", "--window", "0.1", "--rate-scale", "1e-300"]) == 1
    _one_error_line(capsys, "rate scale 1e-300", "too slow to schedule")
    with pytest.raises(ValueError, match="too slow to schedule"):
        phase_workloads(1, 0, rate_scale=1e-300)


def test_ycsb_durations_past_the_clock_are_refused(capsys):
    from nvmw.workloads.ycsb import YcsbConfig

    # Was: the deadline wrapped into the past: 0 operations, exit 0.
    with pytest.raises(ValueError, match="duration_s must be at most"):
        YcsbConfig(duration_s=1e300).validate()
    with pytest.raises(SystemExit) as e:
        main(["ycsb", "--duration", "1e300", "--threads", "1"])
    assert e.value.code == 2 and "--duration" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["azure", "--rate", "1e-300", "--rows", "5"], "5 rows at 1e-300 accesses/s"),   # was: every row at 0
    (["svd", "--task-ms", "1e300", "--rows", "5"], "5 rows of up to"),             # was: time_ms -9223372036854775.-808
])
def test_trace_synth_refuses_a_trace_too_long_to_schedule(tmp_path, capsys, argv, words):
    out = tmp_path / "t.csv"
    assert main(["trace", "synth", *argv, "-o", str(out)]) == 1
    _one_error_line(capsys, words, "too long to schedule")
    assert not out.exists()


def test_trace_synth_times_stay_in_order_up_to_the_bound(tmp_path):
    from nvmw.workloads import traces

    t = traces.synth("azure", rows=10, accesses_per_s=1e-8)
    times = [r[0] for r in t.records()]
    assert times == sorted(times) and times[0] == 0 and times[-1] > 1e14   # microseconds: years apart
    t = traces.synth("svd", rows=100, task_ms=1e6)
    assert min(r[0] for r in t.records()) >= 0


# --- train options refused before collecting ---------------------------------------

_TRAIN = ["train", "--env", "synthetic", "--steps", "3", "--episodes", "1", "--phases", "1"]


def test_train_refuses_a_zero_learning_rate_at_parse_time(tmp_path, capsys):
    out = tmp_path / "a.joblib"
    # Was: accepted, then refused by the agent after the transitions were collected.
    with pytest.raises(SystemExit) as e:
        main([*_TRAIN, "--collect-episodes", "1", "--learning-rate", "0", "--out", str(out)])
    assert e.value.code == 2 and "--learning-rate" in capsys.readouterr().err
    assert not out.exists()


def test_train_with_nothing_to_pretrain_on_names_the_option(tmp_path, capsys):
    out = tmp_path / "a.joblib"
    # Was: "episodes_per_phase must be >= 1", an option train does not have.
    assert main([*_TRAIN, "--collect-episodes", "0", "--out", str(out)]) == 1
    _one_error_line(capsys, "--collect-episodes 0", "--transitions")
    assert not out.exists()


# --- list and fraction options checked before a sweep or collection -------------------

_CALIBRATE = ["calibrate", "--env", "synthetic", "--phases", "1", "2", "--grid", "1", "2", "--windows", "2",
              "--confirm-windows", "0"]


@pytest.mark.parametrize("argv, words", [
    (_CALIBRATE + ["--attain", "1"], "--attain: 1 is out of range"),        # was: refused after the sweep
    (_CALIBRATE + ["--quantile", "0", "--rule", "quantile"], "--quantile: 0 is out of range"),
    (_CALIBRATE + ["--grid", "4", "40"], "--grid: 40 is out of range"),    # was: refused mid-sweep
    (_CALIBRATE + ["--grid", "2", "2"], "--grid: 2 is given more than once"),  # was: 16 windows/config noted
    (_CALIBRATE + ["--phases", "1", "1"], "--phases: 1 is given more than once"),
    (_CALIBRATE + ["--phases", "7"], "--phases: 7 is not a phase"),       # was: refused mid-sweep
    (["collect", "--env", "synthetic", "--steps", "2", "--episodes", "1", "--phases", "7"], "--phases: 7 is not"),
    (["train", "--env", "synthetic", "--steps", "2", "--episodes", "1", "--phases", "3", "3"],
     "--phases: 3 is given more than once"),
])
def test_lab_list_and_fraction_options_are_checked_at_parse_time(tmp_path, capsys, argv, words):
    out = tmp_path / "out.file"
    with pytest.raises(SystemExit) as e:
        main(argv + ["--out", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not out.exists()


# --- damaged transitions archives -----------------------------------------------------

def _transitions_file(tmp_path) -> bytes:
    from nvmw.rl.pretrain import save_transitions

    rng = np.random.default_rng(0)
    n = 20
    p = tmp_path / "good.npz"
    save_transitions(p, {"states": rng.random((n, N_FEATURES)), "actions": np.arange(n) % N_ACTIONS,
                         "rewards": rng.random(n), "next_states": rng.random((n, N_FEATURES)),
                         "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool),
                         "phases": np.ones(n, np.int64), "p99_us": rng.random(n), "throughput": rng.random(n)})
    return p.read_bytes()


@pytest.mark.parametrize("damage", [lambda b: b[:len(b) // 2],                      # was: BadZipFile traceback
                                    lambda b: b[:200] + bytes(x ^ 0xFF for x in b[200:260]) + b[260:]])  # zlib.error
def test_a_truncated_or_damaged_transitions_archive_is_named(tmp_path, capsys, damage):
    from nvmw.rl.pretrain import load_transitions

    p = tmp_path / "t.npz"
    p.write_bytes(damage(_transitions_file(tmp_path)))
    with pytest.raises(ValueError, match="damaged or truncated archive") as e:
        load_transitions(p)
    assert str(p) in str(e.value)
    out = tmp_path / "tuned.json"
    assert main(["tune", str(p), "--quick", "--out", str(out)]) == 1
    _one_error_line(capsys, str(p), "damaged or truncated")
    assert not out.exists()


# --- capacity files ---------------------------------------------------------------------

def _capacity_file(tmp_path, **values) -> str:
    import json

    from nvmw.workloads.capacity import shipped_capacity_path

    with open(shipped_capacity_path("optane-1dimm")) as fh:
        d = json.load(fh)
    d["interactive"]["ops_per_s"] = values.get("ops", d["interactive"]["ops_per_s"])
    d["device_bandwidth"]["write_bytes_per_s"] = values.get("write", d["device_bandwidth"]["write_bytes_per_s"])
    p = tmp_path / "cap.json"
    p.write_text(json.dumps(d))
    return str(p)


@pytest.mark.parametrize("values, words", [({"ops": 1e20}, "interactive_ops_per_s must be at most 1e+09"),
                                           ({"write": 1e15}, "write_bytes_per_s must be at most 1e+12")])
def test_capacity_files_past_any_machine_are_refused(tmp_path, capsys, values, words):
    from nvmw.workloads.capacity import load_capacity
    from nvmw.workloads.phases import phase_workloads

    path = _capacity_file(tmp_path, **values)
    # Was: accepted; the simulator then took hours per window of a contended phase.
    with pytest.raises(ValueError, match=re.escape(words)):
        load_capacity(path)
    assert main(["run-phase", "5", "--duration", "0.2", "--window", "0.1", "--capacity", path]) == 1
    _one_error_line(capsys, path, words)
    assert load_capacity(_capacity_file(tmp_path, ops=1e9, write=1e12)).interactive_ops_per_s == 1e9
    assert phase_workloads(5, 0)[2] > 0  # the shipped capacity still scales the shipped phases


def test_a_capacity_path_that_is_a_directory_is_named(tmp_path):
    from nvmw.workloads.capacity import load_capacity

    with pytest.raises(ValueError, match=r"cannot read the capacity file \((?i:is a directory)"):  # was: IsADirectoryError
        load_capacity(str(tmp_path))


def test_sim_fit_refuses_a_parameter_or_sweep_named_twice(tmp_path, capsys):
    import json

    from nvmw.lab.simfit import fit

    rows = [{"phase": 1, "interactive_threads": i, "batch_threads": 1, "p99_us": 100.0 + i, "throughput": 4000.0}
            for i in (1, 4)]
    p = tmp_path / "sweep.json"
    p.write_text(json.dumps({"rows": rows, "run": {"window_s": 0.1}}))
    out = tmp_path / "fit.json"
    # Was: fitted, the first jitter coordinate moving nothing; or each row counted twice.
    for sweeps, extra in (([str(p)], ["--free", "jitter", "jitter"]), ([str(p), str(p)], [])):
        with pytest.raises(SystemExit) as e:
            main(["sim", "fit", *sweeps, "--windows", "1", "--max-evals", "2", "--out", str(out), *extra])
        assert e.value.code == 2 and "is given more than once" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(ValueError, match="named more than once: \\['jitter'\\]"):
        fit(rows, window_s=0.1, windows=1, max_evals=2, names=("jitter", "background", "jitter"))


@pytest.mark.parametrize("grid, words", [("1,1", "given more than once"),       # was: 1/1 swept and reported twice
                                         ("1,,2", "comma-separated integers")])  # was: read as 1,2
def test_sweep_grids_are_checked_at_parse_time(tmp_path, capsys, grid, words):
    from nvmw.lab.sweep import SweepConfig

    out = tmp_path / "sweep"
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--grid-i", grid, "--grid-b", "1", "--reps", "1", "--duration", "0.1", "-o", str(out)])
    assert e.value.code == 2 and words in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(ValueError, match="more than once"):
        SweepConfig(grid_i=(1, 4), grid_b=(2, 2)).validate()


# --- SLA specs whose reward overflows -----------------------------------------------------

@pytest.mark.parametrize("key", ["lat_penalty", "tp_penalty"])
def test_an_sla_penalty_that_makes_rewards_infinite_is_refused(tmp_path, capsys, key):
    from nvmw.control.sla import SLASpec

    p = tmp_path / "spec.toml"
    p.write_text(f"[sla]\nlat_goal = 200.0\ntp_goal = 1000.0\n{key} = 1e308\n")
    with pytest.raises(ValueError, match=f"{key} is too large"):
        SLASpec.from_toml(p)
    out = tmp_path / "out"
    # Was: a run whose every reward was -inf, reported as nan in each row of the tables.
    assert main(["evaluate", "--env", "synthetic", "--steps", "2", "--switch-every", "1", "--controllers", "aimd",
                 "--sla", str(p), "--out", str(out)]) == 1
    _one_error_line(capsys, str(p), key)
    assert not (out / "eval.json").exists()
    assert SLASpec(lat_goal=200.0, tp_goal=1000.0, **{key: 1e290}).lat_goal == 200.0


@pytest.mark.parametrize("text", ["tp_penalty = 1.0\n[sla]\nlat_goal = 200.0\ntp_goal = 1000.0\n",  # key above [sla]
                                  "[sla]\nlat_goal = 200.0\ntp_goal = 1000.0\n[sla_extra]\ntp_penalty = 1.0\n"])
def test_sla_keys_outside_the_sla_table_are_refused(tmp_path, text):
    from nvmw.control.sla import SLASpec

    p = tmp_path / "spec.toml"
    p.write_text(text)
    # Was: ignored; the run used the default tp_penalty.
    with pytest.raises(ValueError, match="beside \\[sla\\]") as e:
        SLASpec.from_toml(p)
    assert str(p) in str(e.value)


# --- oracle tables ------------------------------------------------------------------------

_REST = '"2": [4, 4], "3": [4, 4], "4": [4, 4], "5": [4, 4], "6": [4, 4]'


@pytest.mark.parametrize("entries, words", [
    ('"1": [40, 4]', "thread counts in [1, 32]"),           # was: refused mid-run when phase 1 came up
    ('"1": [4, 4], "1": [8, 8]', "'1' given more than once"),  # was: the last entry, silently
    ('"1": [4, 4], "01": [8, 8]', "are both phase 1"),
])
def test_oracle_tables_out_of_range_or_with_repeated_phases_are_refused(tmp_path, capsys, entries, words):
    from nvmw.control.controllers import OracleFixed

    p = tmp_path / "oracle.json"
    p.write_text('{"table": {%s, %s}}' % (entries, _REST))
    with pytest.raises(ValueError, match=re.escape(words)) as e:
        OracleFixed.from_json(p)
    assert str(p) in str(e.value)
    out = tmp_path / "out"
    assert main(["evaluate", "--env", "sim", "--steps", "2", "--switch-every", "1", "--controllers", "oracle",
                 "--oracle", str(p), "--out", str(out)]) == 1
    _one_error_line(capsys, str(p), words)
    assert not (out / "eval.json").exists()
    p.write_text('{"table": {"1": [32, 1], %s}}' % _REST)
    assert OracleFixed.from_json(p).table[1] == (32, 1)


# --- simulator parameters -------------------------------------------------------------------

def test_a_round_robin_quantum_too_fine_to_simulate_is_refused(tmp_path, capsys):
    import json

    from nvmw.rl.simparams import load_params

    p = tmp_path / "params.json"
    p.write_text(json.dumps({"params": {"quantum_us": 1e-300}}))
    # Was: accepted; the first simulated window never ended.
    with pytest.raises(ValueError, match="quantum_us must be 0 \\(processor sharing\\) or at least 0.1"):
        load_params(str(p))
    assert main(["sim", "run", "--phase", "1", "--windows", "1", "--params", str(p)]) == 1
    _one_error_line(capsys, str(p), "quantum_us")
    for ok in (0.0, 0.1, 5000.0):
        assert load_params({"quantum_us": ok})["quantum_us"] == ok


# --- YCSB paced faster than its clients ------------------------------------------------------

def test_ycsb_paced_faster_than_its_clients_ends_at_its_duration():
    import json
    import os
    import subprocess
    import sys

    # Was: each client ran until its schedule, one period per request, reached the
    # deadline: --duration 0.2 at 1e8 ops/s took about 10 s, at 1e12 ops/s (a period
    # that rounds to 0 ns) it never ended.
    r = subprocess.run([sys.executable, "-m", "nvmw", "ycsb", "--duration", "0.2", "--threads", "2",
                        "--records", "100", "--target-rate", "1e12", "--json"],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["all"]["ops"] > 0 and result["all"]["errors"] == 0


# --- phase files -----------------------------------------------------------------------------

@pytest.mark.parametrize("synth", ["{ seed = 5 }", "{ rows = 10 }"])
def test_a_phase_synth_table_cannot_set_rows_or_seed(tmp_path, capsys, synth):
    from nvmw.workloads import phases

    p = tmp_path / "p.toml"
    p.write_text("number = 9\n[interactive]\nsource = 'azure'\nrequests = 200\nclients = 4\nmin_bytes = 30\n"
                 f"max_bytes = 50\nwrite_ratio = 0.2\ntarget_ops_per_s = 1000\nloop = true\nsynth = {synth}\n"
                 "[batch]\nsource = 'svd'\nrequests = 100\nclients = 2\nfixed_bytes = 8000\nwrite_ratio = 0.5\n"
                 "key_space = 16\ntarget_ops_per_s = 100\nloop = true\n")
    with pytest.raises(ValueError, match="synth cannot set") as e:
        phases.load_phase(p)
    assert str(p) in str(e.value) and "[interactive]" in str(e.value)
    # Was: TypeError "synth() got multiple values for keyword argument", a traceback.
    assert main(["run-phase", str(p), "--duration", "0.2", "--window", "0.1"]) == 1
    _one_error_line(capsys, str(p), "synth cannot set")


# --- evaluate --quick and the options it sets --------------------------------------------------

def test_evaluate_quick_keeps_the_steps_window_and_switch_given(tmp_path):
    import json

    out = tmp_path / "out"
    # Was: --quick replaced them with 400 steps, 0.1 s windows and a switch every 100.
    assert main(["evaluate", "--env", "synthetic", "--quick", "--steps", "40", "--switch-every", "10",
                 "--controllers", "fixed:4,4", "aimd", "--out", str(out)]) == 0
    header = json.loads((out / "run.json").read_text())
    assert (header["steps"], header["switch_every"], header["window_s"]) == (40, 10, 0.1)
    assert main(["evaluate", "--env", "synthetic", "--quick", "--window", "0.5", "--steps", "200",
                 "--controllers", "fixed:4,4", "aimd", "--out", str(out)]) == 0
    header = json.loads((out / "run.json").read_text())
    assert (header["steps"], header["window_s"], header["switch_every"]) == (200, 0.5, 100)


def test_a_simulator_parameter_given_twice_is_refused(tmp_path):
    from nvmw.rl.simparams import load_params

    p = tmp_path / "params.json"
    p.write_text('{"params": {"jitter": 0.5, "op_cpu_us": 3.0, "jitter": 1.5}}')
    # Was: jitter 1.5, the first value dropped without a word.
    with pytest.raises(ValueError, match="'jitter' given more than once") as e:
        load_params(str(p))
    assert str(p) in str(e.value)


@pytest.mark.parametrize("kind", ["capacity", "tuned", "sweep"])
def test_a_key_given_twice_in_a_lab_json_file_is_refused(tmp_path, kind):
    # json.load kept the last value without a word: a capacity file, tuned parameters or
    # a sweep's header edited by hand ran on whichever value came last.
    from nvmw.lab.calibration import load_sweep
    from nvmw.lab.training import load_tuned
    from nvmw.workloads.capacity import load_capacity

    p = tmp_path / f"{kind}.json"
    p.write_text({
        "capacity": '{"interactive_ops_per_s": 1000, "interactive_ops_per_s": 2000}',
        "tuned": '{"model_params": [], "model_params": []}',
        "sweep": '{"rows": [], "run": {"window_s": 1, "window_s": 2}}',
    }[kind])
    load = {"capacity": load_capacity, "tuned": load_tuned, "sweep": load_sweep}[kind]
    with pytest.raises(ValueError, match=r"given more than once in one object") as e:
        load(str(p))
    assert str(p) in str(e.value)
