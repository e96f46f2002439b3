"""The lab's input files, malformed or hostile: phase files, SLA specs, oracle tables,
simulator parameters, policy files, transitions, tuned parameters, sweeps and YCSB pacing.
Each is refused with one error naming the file and what is wrong (exit 1 or 2 from the
command line, no traceback), and none lets a run go on with a wrong value."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cli_output import one_error_line as _one_error_line
from nvmw.cli import main
from nvmw.control.controllers import OracleFixed
from nvmw.control.sla import SLASpec
from nvmw.lab.calibration import load_sweep
from nvmw.lab.training import load_tuned
from nvmw.rl import policy
from nvmw.rl.pretrain import load_transitions, save_transitions
from nvmw.rl.simparams import load_params
from nvmw.workloads import phases
from nvmw.workloads.capacity import load_capacity
from nvmw.workloads.ycsb import YcsbConfig

NON_UTF8 = b"\xff\xfe\x00\x80\x81 = 1\n"


# --- phase files ---------------------------------------------------------------------

_INTERACTIVE = {"source": '"azure"', "requests": "200", "clients": "4", "min_bytes": "30", "max_bytes": "50",
                "write_ratio": "0.2", "target_ops_per_s": "1000", "loop": "true"}
_BATCH = {"source": '"svd"', "requests": "100", "clients": "2", "fixed_bytes": "8000", "write_ratio": "0.5",
          "key_space": "16", "target_ops_per_s": "100", "loop": "true"}


def _phase_file(tmp_path, top: str = "number = 9\n", interactive: dict | None = None, batch: dict | None = None):
    i = dict(_INTERACTIVE, **(interactive or {}))
    b = dict(_BATCH, **(batch or {}))
    text = top + "[interactive]\n" + "".join(f"{k} = {v}\n" for k, v in i.items() if v is not None)
    text += "[batch]\n" + "".join(f"{k} = {v}\n" for k, v in b.items() if v is not None)
    p = tmp_path / "p.toml"
    p.write_text(text)
    return p


def test_a_well_formed_phase_file_loads(tmp_path):
    ph = phases.load_phase(_phase_file(tmp_path))
    assert (ph.number, ph.interactive.requests, ph.batch.key_space, ph.batch.loop) == (9, 200, 16, True)


@pytest.mark.parametrize("cls, key, value, words", [
    ("interactive", "requests", "1.5", "requests must be an integer >= 1"),
    ("interactive", "requests", "true", "requests must be an integer >= 1"),
    ("interactive", "requests", '"many"', "requests must be an integer >= 1"),
    ("batch", "fixed_bytes", "0", "fixed_bytes must be an integer >= 1"),      # was: sizes kept
    ("batch", "key_space", "0", "key_space must be an integer >= 1"),          # was: keys unbounded
    ("batch", "key_space", '"x"', "key_space must be an integer >= 1"),
    ("interactive", "min_bytes", '"x"', "min_bytes must be an integer >= 0"),
    ("interactive", "min_bytes", "-5", "min_bytes must be an integer >= 0"),
    ("interactive", "loop", '"yes"', "loop must be true or false"),
    ("interactive", "synth", "5", "synth must be a table"),
    ("interactive", "target_ops_per_s", "inf", "target_ops_per_s must be a finite number > 0"),
    ("interactive", "target_ops_per_s", '"fast"', "target_ops_per_s must be a finite number > 0"),
    ("interactive", "write_ratio", '"half"', "write_ratio must be a number in [0, 1]"),
    ("interactive", "synth_rows", "0", "synth_rows must be an integer >= 1"),
])
def test_phase_class_values_of_the_wrong_type_or_range_name_the_file_and_key(tmp_path, cls, key, value, words):
    p = _phase_file(tmp_path, **{cls: {key: value}})
    with pytest.raises(ValueError) as e:
        phases.load_phase(p)
    assert str(p) in str(e.value) and f"[{cls}]" in str(e.value) and words in str(e.value)


def test_phase_file_trace_path_and_format_are_checked(tmp_path):
    p = _phase_file(tmp_path, interactive={"source": '"file"', "path": "5"})
    with pytest.raises(ValueError, match="path must be a string"):
        phases.load_phase(p)
    p = _phase_file(tmp_path, interactive={"source": '"file"', "path": '"t.csv"', "format": '"bogus"'})
    with pytest.raises(ValueError, match="format must be one of"):
        phases.load_phase(p)


@pytest.mark.parametrize("top, words", [
    ("number = 1.5\n", "number must be an integer"),             # was: phase 1, silently
    ('number = "x"\n', "number must be an integer"),
    ("number = 9\nname = 5\n", "name must be a string"),
    ("number = 9\nbogus = 1\n", "unknown keys ['bogus']"),       # was: ignored
])
def test_phase_file_top_level_is_checked(tmp_path, top, words):
    p = _phase_file(tmp_path, top=top)
    with pytest.raises(ValueError, match=str(p)) as e:
        phases.load_phase(p)
    assert words in str(e.value)


@pytest.mark.parametrize("text", ["number = 9\ninteractive = 5\nbatch = 6\n",
                                  "number = 9\n[[interactive]]\nsource = 'azure'\n[[batch]]\nsource = 'svd'\n"])
def test_phase_classes_that_are_not_tables(tmp_path, text):
    p = tmp_path / "p.toml"
    p.write_text(text)
    with pytest.raises(ValueError, match=r"\[interactive\]: must be a table"):
        phases.load_phase(p)


def test_run_phase_refuses_a_bad_phase_file_in_one_line(tmp_path, capsys):
    # This value once reached the trace filter and ended in a C++ std::bad_cast traceback.
    p = _phase_file(tmp_path, interactive={"min_bytes": '"x"'})
    assert main(["run-phase", str(p), "--duration", "0.2", "--window", "0.1"]) == 1
    _one_error_line(capsys, str(p), "min_bytes")


def test_non_utf8_phase_and_capacity_files_are_named(tmp_path):
    p = tmp_path / "bytes.toml"
    p.write_bytes(NON_UTF8)
    with pytest.raises(ValueError, match="bytes.toml"):
        phases.load_phase(p)
    with pytest.raises(ValueError, match="bytes.toml"):
        load_capacity(str(p))


# --- SLA specs -----------------------------------------------------------------------

_GOALS = "[sla]\nlat_goal = 200.0\ntp_goal = 1000.0\n"


@pytest.mark.parametrize("text, words", [
    ("", "no lat_goal and no tp_goal"),                            # was: the built-in goals
    ("[sla]\nlat_goal = 200.0\n", "no tp_goal"),
    (_GOALS + "min_scale = 1000.0\nmax_scale_lat = 1000.0\n", "max_scale_lat must exceed min_scale"),
    (_GOALS + "max_scale_tp = 0.5\n", "max_scale_tp must exceed min_scale"),
    (_GOALS + "lat_penalty = -5.0\n", "lat_penalty must be >= 0"),
    ("[sla]\nlat_goal = 1e308\ntp_goal = 1000.0\nmax_latency = 1e308\n", "overflow"),
    (_GOALS + "name = 3\n", "name must be a string"),
])
def test_sla_specs_that_would_judge_wrongly_are_refused(tmp_path, text, words):
    p = tmp_path / "spec.toml"
    p.write_text(text)
    with pytest.raises(ValueError) as e:
        SLASpec.from_toml(p)
    assert str(p) in str(e.value) and words in str(e.value)


def test_sla_spec_with_one_point_latency_scale_would_meet_every_goal():
    # What the check above prevents: every p99, however large, "meets" the goal.
    s = SLASpec.__new__(SLASpec)
    s.__dict__.update(SLASpec(lat_goal=200.0, tp_goal=1000.0).__dict__, min_scale=1000.0, max_scale_lat=1000.0)
    assert s.latency_met(1e6)
    with pytest.raises(ValueError, match="max_scale_lat"):
        s.validate()


def test_non_utf8_sla_spec_names_the_file(tmp_path, capsys):
    p = tmp_path / "bytes.toml"
    p.write_bytes(NON_UTF8)
    with pytest.raises(ValueError, match="bytes.toml"):
        SLASpec.from_toml(p)
    assert main(["run-phase", "1", "--duration", "0.2", "--sla", str(p)]) == 1
    _one_error_line(capsys, str(p))


# --- oracle tables -------------------------------------------------------------------

@pytest.mark.parametrize("content, words", [
    ("[1, 2]", "no 'table'"),                                      # was: AttributeError
    ('{"table": {"1": 5}}', "phase 1: expected"),                   # was: TypeError
    ('{"table": {"1": [4]}}', "phase 1: expected"),                 # was: IndexError
    ('{"table": {"1": {"a": 1}}}', "phase 1: expected"),            # was: KeyError
    ('{"table": {"1": [-3, 0]}}', "phase 1: expected"),             # was: run as 1, 1
    ('{"table": {"1": [1.7, 2.2]}}', "phase 1: expected"),          # was: run as 1, 2
    ('{"table": {"1": [4, 4, 4]}}', "phase 1: expected"),
    ('{"table": {"x": [4, 4]}}', "'x' is not a phase number"),
    ('{"table": {"\\u0661": [4, 4]}}', "'\u0661' is not a phase number"),  # was: read as phase 1
    ('{"table": {"\\u00b2": [4, 4]}}', "'\u00b2' is not a phase number"),  # was: int() error, no file
    ('{"table": {}}', "empty"),
    ("", "not JSON"),
])
def test_bad_oracle_tables_name_the_file(tmp_path, content, words):
    p = tmp_path / "oracle.json"
    p.write_text(content)
    with pytest.raises(ValueError) as e:
        OracleFixed.from_json(p)
    assert str(p) in str(e.value) and words in str(e.value)


def test_evaluate_refuses_a_bad_oracle_table_in_one_line(tmp_path, capsys):
    p = tmp_path / "oracle.json"
    p.write_text('{"table": {"1": 5}}')
    assert main(["evaluate", "--env", "sim", "--steps", "2", "--switch-every", "1", "--controllers", "oracle",
                 "--oracle", str(p), "--out", str(tmp_path / "out")]) == 1
    _one_error_line(capsys, str(p), "phase 1")


def test_an_oracle_table_without_a_phase_of_the_run_is_refused_naming_file_and_phases(tmp_path):
    from nvmw.lab.lineup import ControllerContext, make_controller
    from nvmw.workloads.phases import DEFAULT_PHASES

    p = tmp_path / "oracle.json"
    p.write_text('{"table": {"1": [4, 4], "2": [8, 1], "3": [2, 2], "4": [6, 6]}}')
    # Was: built, and phases 5 and 6 ran at 15/15 in an "oracle" row.
    with pytest.raises(ValueError) as e:
        make_controller("oracle", ControllerContext(oracle_path=str(p), phases=DEFAULT_PHASES))
    assert str(p) in str(e.value) and "phases 5, 6" in str(e.value)
    # The phases it covers are fine, and so is the shipped table over the shipped phases.
    assert make_controller("oracle", ControllerContext(oracle_path=str(p), phases=(1, 4))).table[4] == (6, 6)
    assert set(make_controller("oracle", ControllerContext(phases=DEFAULT_PHASES)).table) >= set(DEFAULT_PHASES)


def test_evaluate_refuses_an_oracle_table_missing_phases_in_one_line(tmp_path, capsys):
    p = tmp_path / "oracle.json"
    p.write_text('{"table": {"1": [4, 4], "2": [8, 1], "3": [2, 2], "4": [6, 6], "6": [3, 3]}}')
    assert main(["evaluate", "--env", "sim", "--steps", "2", "--switch-every", "1", "--controllers", "oracle",
                 "--oracle", str(p), "--out", str(tmp_path / "out")]) == 1
    _one_error_line(capsys, str(p), "phase 5")
    assert not (tmp_path / "out" / "eval.json").exists()


def test_evaluate_controllers_refuses_an_oracle_object_missing_phases():
    from nvmw.lab.evaluation import evaluate_controllers
    from nvmw.rl import SyntheticEnv

    oracle = OracleFixed({1: (13, 6), 2: (12, 9)})
    with pytest.raises(ValueError, match="no entry for phases 3, 4"):
        evaluate_controllers(lambda control: SyntheticEnv(control=control), [oracle], total_steps=4,
                             switch_every=1, phases=(1, 2, 3, 4))


def test_run_phase_refuses_the_oracle_for_a_phase_its_table_lacks(tmp_path, capsys):
    from nvmw.lab.runs import shipped_oracle_path

    # A phase file of one's own, numbered 9: the shipped table has no entry for it.
    assert main(["run-phase", str(_phase_file(tmp_path)), "--controller", "oracle", "--device", "optane-1dimm",
                 "--duration", "0.2", "--window", "0.1"]) == 1
    _one_error_line(capsys, shipped_oracle_path("optane-1dimm"), "phase 9")


# --- simulator parameters ------------------------------------------------------------

@pytest.mark.parametrize("params, words", [
    ({"jitter": [1]}, "jitter must be a finite number"),           # was: TypeError
    ({"jitter": True}, "jitter must be a finite number"),          # was: jitter 1.0
    ({"jitter": "x"}, "jitter must be a finite number"),
    ({"client_cpu_us": -5}, "client_cpu_us must be >= 0"),
    ({"cores": 0}, "cores must be > 0"),
    ({"background": 1.0}, "background must be in [0, 1)"),
    ({"foo": 1}, "unknown simulator parameters ['foo']"),
])
def test_bad_simulator_parameter_files_name_the_file_and_parameter(tmp_path, params, words):
    p = tmp_path / "params.json"
    p.write_text(json.dumps({"params": params}))
    with pytest.raises(ValueError) as e:
        load_params(str(p))
    assert str(p) in str(e.value) and words in str(e.value)


def test_sim_run_refuses_a_bad_parameter_file_in_one_line(tmp_path, capsys):
    p = tmp_path / "params.json"
    p.write_text('{"params": {"jitter": [1]}}')
    assert main(["sim", "run", "--phase", "1", "--windows", "1", "--controller", "aimd", "--params", str(p)]) == 1
    _one_error_line(capsys, str(p), "jitter")
    p.write_bytes(NON_UTF8)
    assert main(["sim", "run", "--phase", "1", "--windows", "1", "--params", str(p)]) == 1
    _one_error_line(capsys, str(p))


# --- greedy policy files -------------------------------------------------------------

def _policy_dict() -> dict:
    model = {"mean": [0.0, 0.0], "scale": [1.0, 1.0], "powers": [[1, 0], [0, 1]], "coef": [1.0, 2.0],
             "intercept": 0.5}
    return {"format": policy.FORMAT, "feature_transform": "none", "models": [dict(model), dict(model)]}


@pytest.mark.parametrize("field, value", [("intercept", math.nan), ("coef", [math.inf, 1.0]),
                                          ("scale", [1.0, math.nan])])
def test_policy_with_non_finite_numbers_is_refused(field, value):
    d = _policy_dict()
    assert policy.GreedyPolicy.from_dict(d).n_actions == 2
    d["models"][1][field] = value
    with pytest.raises(ValueError, match="finite"):
        policy.GreedyPolicy.from_dict(d)


def test_non_finite_policy_beside_an_agent_is_not_used(tmp_path):
    agent = tmp_path / "a.joblib"
    agent.write_bytes(b"agent bytes")
    d = dict(_policy_dict(), agent_sha256=policy.file_sha256(agent))
    with open(policy.policy_path(agent), "w") as fh:
        json.dump(d, fh)
    assert policy.load_beside(agent) is not None
    d["models"][0]["intercept"] = math.nan  # would make action 0 win every argmax
    with open(policy.policy_path(agent), "w") as fh:
        json.dump(d, fh)
    assert policy.load_beside(agent) is None


# --- transitions and tuned parameters ------------------------------------------------

def _transitions(n: int = 6) -> dict:
    rng = np.random.default_rng(0)
    return {"states": rng.random((n, 8)), "actions": np.arange(n) % 9, "rewards": rng.random(n),
            "next_states": rng.random((n, 8)), "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool),
            "phases": np.ones(n, np.int64), "p99_us": rng.random(n), "throughput": rng.random(n)}


@pytest.mark.parametrize("change, words", [
    (lambda d: d.update(actions=d["actions"] + 0.5), "actions must hold integers"),     # was: truncated
    (lambda d: d.update(states=np.hstack([d["states"], d["states"]])), "shape (6, 16)"),  # was: accepted
    (lambda d: d.update(actions=np.array(3)), "shape ()"),                               # was: TypeError
    (lambda d: d.update(rewards=np.array(["x"] * 6)), "not numbers"),
    (lambda d: d["rewards"].__setitem__(0, np.nan), "rewards has values that are not finite"),
])
def test_bad_transitions_files_name_the_file_and_column(tmp_path, change, words):
    d = _transitions()
    p = tmp_path / "t.npz"
    save_transitions(p, d)
    assert len(load_transitions(p)["actions"]) == 6
    change(d)
    np.savez(p, **d)
    with pytest.raises(ValueError) as e:
        load_transitions(p)
    assert str(p) in str(e.value) and words in str(e.value)


def test_a_file_of_another_kind_is_not_transitions(tmp_path):
    p = tmp_path / "sweep.json"
    p.write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"{p}: not an nvmw transitions file"):
        load_transitions(p)


@pytest.mark.parametrize("content, words", [
    ('{"x": 1}', "not a tuned-parameters file"),                   # was: KeyError
    ("[1]", "not a tuned-parameters file"),                        # was: TypeError
    ('{"model_params": 5}', "not a tuned-parameters file"),
    ('{"model_params": [%s]}' % ", ".join(['{"degree": "x"}'] * 9), "model_params[0].degree"),
    ('{"model_params": [%s]}' % ", ".join(['{"bogus": 1}'] * 9), "model_params[0]: unknown"),
    ("", "not JSON"),
])
def test_bad_tuned_files_name_the_file(tmp_path, content, words):
    p = tmp_path / "tuned.json"
    p.write_text(content)
    with pytest.raises(ValueError) as e:
        load_tuned(str(p))
    assert str(p) in str(e.value) and words in str(e.value)


def test_train_refuses_a_bad_tuned_file_before_collecting(tmp_path, capsys):
    p = tmp_path / "tuned.json"
    p.write_text('{"x": 1}')
    assert main(["train", "--env", "synthetic", "--steps", "5", "--episodes", "0", "--phases", "1",
                 "--tuned", str(p), "--out", str(tmp_path / "a.joblib")]) == 1
    _one_error_line(capsys, str(p))
    assert not (tmp_path / "a.joblib").exists()


# --- sweeps --------------------------------------------------------------------------

def _row(**kw) -> dict:
    return dict({"phase": 1, "interactive_threads": 2, "batch_threads": 1, "p99_us": 150.0, "throughput": 4000.0},
                **kw)


def _sweep_file(tmp_path, rows=None, run=None):
    p = tmp_path / "sweep.json"
    saved: dict = {"rows": rows if rows is not None else [_row(), _row(p99_us=170.0)]}
    if run is not None:
        saved["run"] = run
    p.write_text(json.dumps(saved))
    return p


@pytest.mark.parametrize("rows, words", [
    ([_row(p99_us=math.nan)], "rows[0].p99_us must be a finite number >= 0"),   # was: fit on loss inf
    ([_row(), _row(throughput=-1.0)], "rows[1].throughput must be a finite number >= 0"),
    ([_row(phase=1.5)], "rows[0].phase must be an integer"),                     # was: phase 1
    ([_row(interactive_threads=-1)], "interactive_threads must be an integer >= 0"),
    ([5], "rows[0] is not an object"),                                          # was: TypeError
    ([{"phase": 1}], "rows[0] has no interactive_threads"),                     # was: KeyError
    ({"a": 1}, "rows must be a list"),
])
def test_bad_sweep_rows_name_the_file_and_row(tmp_path, rows, words):
    p = _sweep_file(tmp_path, rows=rows)
    with pytest.raises(ValueError) as e:
        load_sweep(str(p))
    assert str(p) in str(e.value) and words in str(e.value)


@pytest.mark.parametrize("run, words", [([1], "run must be an object"),                # was: AttributeError
                                        ({"window_s": "x"}, "run.window_s"),
                                        ({"window_s": math.nan}, "run.window_s"),
                                        ({"cores": 0}, "run.cores"),
                                        ({"device": 5}, "run.device")])
def test_bad_sweep_headers_name_the_file(tmp_path, run, words):
    p = _sweep_file(tmp_path, run=run)
    with pytest.raises(ValueError) as e:
        load_sweep(str(p))
    assert str(p) in str(e.value) and words in str(e.value)


def test_sim_fit_refuses_a_nan_window_in_one_line(tmp_path, capsys):
    p = _sweep_file(tmp_path, rows=[_row(p99_us=math.nan), _row()])
    out = tmp_path / "fit.json"
    assert main(["sim", "fit", str(p), "--windows", "1", "--max-evals", "2", "--out", str(out)]) == 1
    _one_error_line(capsys, str(p), "p99_us")
    assert not out.exists()


def test_calibrate_from_a_sweep_without_cores_or_device_in_its_header(tmp_path, capsys):
    rows = [_row(phase=ph, interactive_threads=i, p99_us=100.0 + 10 * i + k, throughput=4000.0 - k)
            for ph in (1, 2) for i in (1, 2) for k in range(3)]
    p = _sweep_file(tmp_path, rows=rows, run={"window_s": 0.1})
    out = tmp_path / "spec.toml"
    assert main(["calibrate", "--env", "synthetic", "--from-sweep", str(p), "--confirm-windows", "0",
                 "--out", str(out)]) == 0
    assert "? cores" in SLASpec.from_toml(out).notes


# --- YCSB pacing ---------------------------------------------------------------------

def test_ycsb_rate_too_slow_to_pace_is_refused(capsys):
    # The generator's per-thread gap overflowed int64 nanoseconds: the run never ended.
    with pytest.raises(ValueError, match="too slow"):
        YcsbConfig(target_ops_per_s=1e-12, threads=2).validate()
    assert YcsbConfig(target_ops_per_s=1e-3, threads=2).validate().target_ops_per_s == 1e-3
    assert YcsbConfig(target_ops_per_s=0.0).validate().target_ops_per_s == 0.0
    assert main(["ycsb", "--target-rate", "1e-12", "--threads", "2", "--duration", "0.2"]) == 1
    assert "nvmw ycsb: error: target_ops_per_s 1e-12 is too slow" in capsys.readouterr().err
