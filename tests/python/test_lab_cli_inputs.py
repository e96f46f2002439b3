"""The lab's command line and RL helpers given values they cannot use: run lengths past
what a run can hold, options a run would ignore, outputs with no place for the files
written beside them, output directories holding another run's files, numbers spelled in
ways the rest of the project refuses, and misshapen arguments to the RL helpers. Each is
refused naming the argument (exit 1 or 2 from the command line, no traceback), or
handled the one way the help states."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from cli_output import one_error_line as _one_error_line
from cli_output import write_sweep as _sweep
from nvmw.cli import build_parser, main


def _nvmw(*argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nvmw", *argv], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


# --- run-phase --duration ------------------------------------------------------------

@pytest.mark.parametrize("duration", ["1e300", "86401", "inf", "-inf", "nan", "-1", "0"])
def test_run_phase_refuses_a_duration_outside_a_day(capsys, duration):
    # Was: 1e300 (or anything past a day) was accepted and the run never ended.
    with pytest.raises(SystemExit) as e:
        build_parser("run-phase").parse_args(["run-phase", "1", f"--duration={duration}"])
    assert e.value.code == 2
    assert "argument --duration" in capsys.readouterr().err


def test_run_phase_refuses_a_run_of_too_many_windows():
    # Was: a day of 1 ms windows was accepted (86.4 million windows, one row each kept).
    r = _nvmw("run-phase", "1", "--duration", "86400", "--window", "0.001", "--json")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "--duration 86400 with --window 0.001" in r.stderr and "1,000,000" in r.stderr


@pytest.mark.parametrize("duration", [float("nan"), float("inf"), -1.0, 0.0, "30"])
def test_run_phase_function_refuses_a_duration_it_cannot_run(duration):
    # Was: NaN failed inside int() ("cannot convert float NaN"), inf was an OverflowError,
    # and -1 or 0 ran one window.
    from nvmw.lab.phase_run import run_phase

    with pytest.raises(ValueError, match="duration_s must be a number in"):
        run_phase(1, duration_s=duration, window_s=0.1)


# --- run-phase --capacity ------------------------------------------------------------

@pytest.mark.parametrize("capacity", ["{d}/missing.json", "optane-1dimm"])
def test_run_phase_refuses_capacity_for_a_phase_paced_in_its_file(tmp_path, capsys, capacity):
    # Was: ignored without a word, a path that does not exist included; the run went on.
    capacity = capacity.format(d=tmp_path)
    assert main(["run-phase", "1", "--capacity", capacity, "--duration", "0.2", "--window", "0.1"]) == 1
    _one_error_line(capsys, f"--capacity {capacity}", "phase 1 is paced in its file")


# --- outputs with a file written beside them -----------------------------------------

def test_calibrate_refuses_an_out_with_no_place_for_the_oracle_table_beside_it(tmp_path, capsys):
    # Was: the spec went into the FIFO (or device) and the oracle table beside it, at
    # FIFO.oracle.json (`--out /dev/null` made /dev/null.oracle.json as root).
    sweep = _sweep(tmp_path)
    fifo = str(tmp_path / "spec")
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # had the old code written, it would not block
    try:
        argv = ["calibrate", "--env", "synthetic", "--from-sweep", sweep, "--confirm-windows", "0", "--out", fifo]
        assert main(argv) == 1
        _one_error_line(capsys, f"--out {fifo}: not a regular file", "--oracle-out")
        assert sorted(os.listdir(tmp_path)) == ["spec", "sweep.json"]
        # With the oracle table placed elsewhere, the spec is written into the FIFO.
        assert main(argv + ["--oracle-out", str(tmp_path / "o.json")]) == 0
        assert b"lat_goal" in os.read(reader, 1 << 16)
        assert json.loads((tmp_path / "o.json").read_text())
    finally:
        os.close(reader)


@pytest.mark.parametrize("argv, option", [
    (["train", "--env", "synthetic", "--collect-episodes", "0", "--out", "{f}"], "--out"),
    (["evaluate", "--env", "synthetic", "--controllers", "q-learning-online", "--agent", "{d}/missing.joblib",
      "--save-agent", "{f}", "--out", "{d}/eval"], "--save-agent"),
])
def test_an_agent_output_with_no_place_for_its_policy_file_is_refused(tmp_path, capsys, argv, option):
    # Was: the agent was written into the FIFO, then read back from it for the policy
    # file's checksum (waiting for a writer for ever), the policy file beside it.
    fifo = str(tmp_path / "agent")
    os.mkfifo(fifo)
    assert main([a.format(f=fifo, d=tmp_path) for a in argv]) == 1
    _one_error_line(capsys, f"{option} {fifo}: not a regular file", "policy file")


# --- output directories holding an earlier run's files -------------------------------

def test_sweep_removes_its_own_files_this_run_did_not_write(tmp_path, capsys):
    # Was: sweep.png of the earlier run stayed beside this run's sweep.csv and summary.json
    # (with --no-plot), read as this run's plot.
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.png").write_bytes(b"an earlier run's plot")
    (out / "notes.txt").write_text("the user's own")
    assert main(["sweep", "--grid-i", "1", "--grid-b", "1", "--reps", "1", "--duration", "0.1", "--clients", "2",
                 "--records", "100", "--no-plot", "-o", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["notes.txt", "summary.json", "sweep.csv"]
    err = capsys.readouterr().err
    assert f"removed sweep.png of an earlier run from {out}" in err


def test_evaluate_outputs_remove_their_own_files_this_run_did_not_write(tmp_path, capsys):
    # Was: a run written without its plot (after Ctrl-C) left the earlier run's eval.png
    # beside its own eval.md and run.json.
    from nvmw.lab.evaluation import write_outputs

    out = tmp_path / "out"
    assert main(["evaluate", "--env", "synthetic", "--steps", "4", "--switch-every", "2",
                 "--controllers", "none", "fixed:5,5", "--out", str(out)]) == 0
    assert (out / "eval.png").exists()
    (out / "notes.txt").write_text("the user's own")
    data = {name: json.loads((out / f"{name}.json").read_text()) for name in ("eval", "run", "traces")}
    lines: list = []
    write_outputs(data["eval"], data["traces"], data["run"], out, 2, plot=False, progress=lines.append)
    assert sorted(os.listdir(out)) == ["eval.json", "eval.md", "notes.txt", "run.json", "traces.json"]
    assert lines == [f"removed eval.png of an earlier run from {out} (not written by this one)"]


# --- refused runs leave nothing behind ------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["--save-agent", "{d}/agents/a.joblib"], "--save-agent needs --online"),
    (["--controllers", "bogus"], "unknown controller 'bogus'"),
    (["--online", "--controllers", "q-learning", "--agent", "{d}/missing.joblib",
      "--save-agent", "{d}/agents/a.joblib"], "missing.joblib"),
])
def test_a_refused_evaluate_leaves_no_directory_behind(tmp_path, capsys, argv, words):
    # Was: --out (and --save-agent's directory) was made before the arguments were
    # checked, and stayed, empty, after the refusal.
    out = tmp_path / "runs" / "eval"
    try:
        code = main(["evaluate", "--env", "synthetic", "--steps", "4", "--switch-every", "2", "--out", str(out),
                     *[a.format(d=tmp_path) for a in argv]])
    except SystemExit as e:  # an unknown controller is a usage error, found when parsing
        code = e.code
    assert code in (1, 2)
    err = capsys.readouterr().err
    assert words.format(d=tmp_path) in err and "Traceback" not in err
    assert os.listdir(tmp_path) == []


def test_a_refused_sweep_leaves_no_directory_behind(tmp_path, capsys):
    # Was: --out was made before the configuration was checked, and stayed, empty.
    assert main(["sweep", "--grid-i", "40", "--out", str(tmp_path / "runs" / "sweep")]) == 1
    _one_error_line(capsys, "grid_i values must be in [1, 32]")
    assert os.listdir(tmp_path) == []


def test_a_refused_demo_leaves_no_directory_behind(tmp_path, capsys):
    # Was: --out was made before the device was looked up, and stayed, empty. The device
    # is now a usage error, before the run.
    with pytest.raises(SystemExit) as e:
        main(["demo", "--engine", "memory", "--device", "nope", "--duration", "0.05", "--clients", "1",
              "--table-only", "--out", str(tmp_path / "runs" / "demo")])
    assert e.value.code == 2
    assert "no device profile 'nope'" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv, code, words", [
    (["train", "--collect-episodes", "0", "--out", "{d}/agents/a.joblib", "--curve", "{d}/plots/c.png"], 1,
     "--collect-episodes 0 leaves nothing to pretrain on"),
    (["sim", "check", "{d}/missing.json", "--plot", "{d}/plots/check.png"], 1, "missing.json"),
    (["calibrate", "--no-control-windows", "3", "--out", "{d}/specs/spec.toml"], 2,
     "--no-control-windows needs --no-control-out"),
    (["tune", "{d}/missing.npz", "--out", "{d}/tuned/t.json"], 1, "missing.npz"),
])
def test_a_refused_run_leaves_no_directory_for_its_output_file(tmp_path, capsys, argv, code, words):
    # Was: the directory of --out, --curve and --plot was made when the option was checked
    # and stayed, empty, when the run was then refused.
    assert main([a.format(d=tmp_path) for a in argv]) == code
    assert words in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_sim_check_makes_the_plot_directory_when_it_writes(tmp_path, capsys):
    plot = tmp_path / "plots" / "check.png"
    assert main(["sim", "check", _sweep(tmp_path), "--windows", "1", "--plot", str(plot)]) == 0
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_a_file_written_to_stdout_is_all_that_stdout_carries(tmp_path):
    # Was: collect, tune and sim fit printed their JSON report to stdout after the file
    # itself, so `--out /dev/stdout` through a pipe gave an archive or a JSON document
    # with the report stuck to its end.
    def run(*argv: str) -> bytes:
        r = subprocess.run([sys.executable, "-m", "nvmw", *argv, "--out", "/dev/stdout"], capture_output=True,
                           timeout=300, env=dict(os.environ))
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        reports.append(r.stderr)
        return r.stdout

    reports: list = []
    transitions = run("collect", "--env", "synthetic", "--episodes", "1", "--steps", "60")
    assert transitions[-22:-18] == b"PK\x05\x06"  # ends with the archive's end record, comment-less
    (tmp_path / "t.npz").write_bytes(transitions)
    assert "model_params" in json.loads(run("tune", str(tmp_path / "t.npz"), "--quick", "--cv", "3",
                                            "--n-jobs", "1"))
    assert "params" in json.loads(run("sim", "fit", _sweep(tmp_path), "--windows", "1", "--max-evals", "2"))
    assert all(b'"out": "/dev/stdout"' in err for err in reports)  # the report went to stderr instead


@pytest.mark.parametrize("into", ["a pipe", "a file"])
def test_calibrate_writes_a_sweep_to_stdout_once(tmp_path, into):
    # Was: the sweep was written as soon as it was measured and again, with the
    # confirmation, at the end: two JSON documents down a pipe, and with stdout a file the
    # second write went to "NAME (deleted)" beside it (stdout still held the replaced file).
    argv = [sys.executable, "-m", "nvmw", "calibrate", "--env", "synthetic", "--grid", "2", "8", "--windows", "2",
            "--phases", "1", "--out", str(tmp_path / "spec.toml"), "--sweep-out", "/dev/stdout"]
    if into == "a pipe":
        r = subprocess.run(argv, capture_output=True, timeout=300, env=dict(os.environ))
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        text = r.stdout
    else:
        with open(tmp_path / "sweep.json", "wb") as out:
            assert subprocess.run(argv, stdout=out, stderr=subprocess.DEVNULL, timeout=300,
                                  env=dict(os.environ)).returncode == 0
        text = (tmp_path / "sweep.json").read_bytes()
    assert json.loads(text)["confirm_rows"]
    assert sorted(os.listdir(tmp_path)) == ["spec.oracle.json", "spec.toml"] + (["sweep.json"] if into == "a file"
                                                                                 else [])


@pytest.mark.parametrize("out, words", [("{d}/file/eval", "file is not a directory"),
                                        ("{d}/file", "cannot create the output directory (File exists)")])
def test_evaluate_refuses_an_out_it_cannot_make_before_the_run(tmp_path, capsys, out, words):
    (tmp_path / "file").write_text("the user's own")
    out = out.format(d=tmp_path)
    assert main(["evaluate", "--env", "synthetic", "--steps", "4", "--switch-every", "2", "--controllers", "none",
                 "--out", out]) == 1
    _one_error_line(capsys, f"--out {out}", words)
    assert os.listdir(tmp_path) == ["file"]


def test_evaluate_makes_its_directories_when_it_writes(tmp_path):
    out = tmp_path / "runs" / "eval"
    agent = tmp_path / "agents" / "b.joblib"
    assert main(["evaluate", "--env", "sim", "--window", "0.05", "--steps", "4", "--switch-every", "2",
                 "--controllers", "q-learning", "--online", "--save-agent", str(agent), "--out", str(out)]) == 0
    assert (out / "eval.md").exists() and (out / "eval.png").exists()
    assert sorted(os.listdir(agent.parent)) == ["b.joblib", "b.policy.json"]


# --- numbers as the rest of the project writes them ---------------------------------

@pytest.mark.parametrize("argv, option", [
    (["ycsb", "--ops", "1_000"], "--ops"),
    (["ycsb", "--threads", "+5"], "--threads"),
    (["ycsb", "--threads", " 5"], "--threads"),
    (["ycsb", "--threads", "\u0665"], "--threads"),  # ARABIC-INDIC DIGIT FIVE: int() reads 5
    (["run-phase", "1", "--seed", "+1"], "--seed"),
    (["run-phase", "1", "--duration", "+5"], "--duration"),
    (["run-phase", "1", "--duration", "1_0"], "--duration"),
    (["evaluate", "--steps", "4_0"], "--steps"),
    (["calibrate", "--phases", "+1", "--out", "x.toml"], "--phases"),
    (["sweep", "--grid-i", "+1,2"], "--grid-i"),
    (["sweep", "--grid-b", "1_0"], "--grid-b"),
    (["sim", "run", "--windows", "1_0"], "--windows"),
])
def test_numbers_python_alone_reads_are_usage_errors(capsys, argv, option):
    # Was: read as int() and float() read them (1000, 5, 10), where the core's parsers
    # and the docs take plain decimal digits with an optional '-'.
    with pytest.raises(SystemExit) as e:
        build_parser(argv[0]).parse_args(argv)
    assert e.value.code == 2
    assert f"argument {option}: " in capsys.readouterr().err


def test_numbers_in_the_usual_spelling_still_parse():
    args = build_parser("run-phase").parse_args(["run-phase", "1", "--seed", "7", "--duration", "1e1",
                                                  "--rate-scale", ".5", "--window", "0.25"])
    assert (args.seed, args.duration, args.rate_scale, args.window) == (7, 10.0, 0.5, 0.25)
    assert build_parser("sweep").parse_args(["sweep", "--grid-i", "1,2,32"]).grid_i == (1, 2, 32)


@pytest.mark.parametrize("argv", [["sim", "run", "--windows", "+3"], ["sim", "run", "--seed", "1_0"],
                                  ["sim", "run", "--window", "+0.1"]])
def test_sim_run_fast_path_leaves_such_numbers_to_the_parser(capsys, argv):
    # Was: the fast path of `sim run` read them with int() and float() and ran.
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "argument --" in capsys.readouterr().err


@pytest.mark.parametrize("argv, code", [
    (["sim", "run", "--windows", "2", "--controller", "fixed:+5,5"], 1),
    (["sim", "run", "--windows", "2", "--controller", "fixed:1_0,5"], 1),
    (["sim", "run", "--windows", "2", "--controller", "fixed:\u0661,5"], 1),
    (["run-phase", "1", "--duration", "0.1", "--window", "0.1", "--controller", "fixed:+5,5"], 2),
])
def test_fixed_controller_threads_are_decimal_digits(capsys, argv, code):
    # Was: fixed:+5,5 and fixed:1_0,5 ran I5/B5 and I10/B5; `sim run` took fixed:١,5 as fixed:1,5.
    # run-phase checks its --controller when it parses the command line: a usage error.
    try:
        got = main(argv)
    except SystemExit as e:
        got = e.code
    assert got == code
    err = capsys.readouterr().err
    assert "fixed controller wants 'fixed:I,B'" in err and "Traceback" not in err


# --- RL helpers ----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["real", "sim"])
@pytest.mark.parametrize("warmup", [-1, -5, 2.5, float("nan"), float("inf"), True, "1", None])
def test_envs_refuse_a_warmup_that_is_not_a_count(kind, warmup):
    # Was: -1 discarded no window without a word (range() of a negative count), 2.5 two.
    from nvmw.rl.envs import RealEnv
    from nvmw.rl.sim import SimEnv

    env_class = RealEnv if kind == "real" else SimEnv
    with pytest.raises(ValueError, match=r"warmup_windows must be an integer >= 0, got "):
        env_class(1, window_s=0.1, warmup_windows=warmup)


@pytest.mark.parametrize("kind", ["real", "sim"])
def test_envs_take_a_warmup_count(kind):
    from nvmw.rl.envs import RealEnv
    from nvmw.rl.sim import SimEnv

    env_class = RealEnv if kind == "real" else SimEnv
    for warmup in (0, 3, 2.0):
        env = env_class(1, window_s=0.1, warmup_windows=warmup)
        assert env.warmup_windows == int(warmup) and isinstance(env.warmup_windows, int)
        env.close()


def _shipped_policy_and_agent():
    from nvmw.lab.runs import shipped_agent_path
    from nvmw.rl.agent import QLearningAgent
    from nvmw.rl.policy import load_beside

    path = shipped_agent_path("optane-1dimm")
    policy = load_beside(path)
    assert policy is not None
    return policy, QLearningAgent.load(path)


STATE = [4.0, 3.0, 10.0, 20.0, 4096.0, 65536.0, 0.5, 0.9]


def test_greedy_policy_takes_a_batch_of_one_as_the_agent_does():
    # Was: a TypeError from float() of a row (only 0-dimensional arrays can be converted).
    import numpy as np

    policy, agent = _shipped_policy_and_agent()
    want = agent.q_values(np.array(STATE))
    for obs in (np.array([STATE]), np.array([STATE], dtype=np.float32), [STATE]):
        assert np.allclose(policy.q_values(obs), agent.q_values(obs), rtol=1e-6)
        assert np.allclose(policy.q_values(obs), want, rtol=1e-6)
        assert policy.greedy_action(obs) == agent.greedy_action(obs)


@pytest.mark.parametrize("obs, shape", [
    ([STATE, STATE], "(2, 8)"), ([[STATE]], "(1, 1, 8)"), (STATE[:7], "(7,)"), (3.0, "()"), ([], "(0,)"),
])
def test_greedy_policy_and_agent_refuse_other_shapes_alike(obs, shape):
    # Was: a TypeError for (2, 8), (1, 1, 8) and a scalar, and other words than the agent's.
    import numpy as np

    policy, agent = _shipped_policy_and_agent()
    for q_values in (policy.q_values, agent.q_values):
        with pytest.raises(ValueError, match=re.escape(f"obs must be one state of 8 features, got shape {shape}")):
            q_values(np.asarray(obs) if q_values is agent.q_values else obs)


@pytest.mark.parametrize("phase", ["\u0661", "\u00b2"])
def test_run_phase_number_is_decimal_digits(capsys, phase):
    # Was: U+0661 (ARABIC-INDIC DIGIT ONE) ran phase 1; the superscript two failed inside int().
    with pytest.raises(SystemExit) as e:
        build_parser("run-phase").parse_args(["run-phase", phase])
    assert e.value.code == 2
    assert f"argument phase: {phase!r} is not a phase number" in capsys.readouterr().err


@pytest.mark.parametrize("seeds", [0, -3, 2.5, True, "4"])
def test_sim_env_refuses_trace_seeds_that_are_not_a_count(seeds):
    # Was: 0 and -3 ran as 1 without a word, 2.5 as 2.
    from nvmw.rl.sim import SimEnv

    with pytest.raises(ValueError, match=r"trace_seeds must be an integer >= 1, got "):
        SimEnv(1, window_s=0.1, trace_seeds=seeds)
    assert SimEnv(1, window_s=0.1, trace_seeds=2).trace_seeds == 2


# --- --device of the store commands ------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["run-phase", "5", "--duration", "1"],
    ["replay", "{trace}"],
    ["ycsb", "--duration", "0.1"],
])
def test_an_unknown_device_is_a_usage_error_naming_the_option(tmp_path, capsys, argv):
    # Was: replay and run-phase printed the lookup's KeyError in quotes ("no device
    # profile ..."), run-phase after its run header, as if the run had begun.
    trace = tmp_path / "t.csv"
    trace.write_text("time_ms,op,key,bytes\n0,write,a,100\n")
    argv = [a.replace("{trace}", str(trace)) for a in argv]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--device", "optane-2dimm"])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert "argument --device: no device profile 'optane-2dimm'" in line
    assert "optane-1dimm" in line and '"' not in line


def test_run_phase_on_a_temporary_pool_prints_its_header_once():
    # Was: the header was printed, then the command executed itself again with
    # PMEM_IS_PMEM_FORCE=1 for its pool on /dev/shm and printed it a second time.
    env = {k: v for k, v in os.environ.items() if k != "PMEM_IS_PMEM_FORCE"}
    r = subprocess.run([sys.executable, "-m", "nvmw", "run-phase", "1", "--duration", "0.1", "--window", "0.1",
                        "--engine", "pmem"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("phase 1:") == 1 and r.stdout.count("controller ") == 1, r.stdout
