"""One set of controller names and shared option spellings everywhere; the old spellings
still work and say on stderr what replaced them."""
import json

import numpy as np
import pytest

from nvmw.cli import build_parser, main
from nvmw.control import SLASpec
from nvmw.control.controllers import AIMD, AgentController, Fixed, Gradient, NoControl, OnlineAgentController
from nvmw.lab.lineup import DEFAULT_LINEUP, ControllerContext, make_controller
from nvmw.rl import QLearningAgent


def test_current_names_build_their_controllers(capsys):
    ctx = ControllerContext(sla=SLASpec(lat_goal=300.0))
    assert isinstance(make_controller("none", ctx), NoControl)
    f = make_controller("fixed:3,4", ctx)
    assert isinstance(f, Fixed) and f.initial_threads == (3, 4)
    assert isinstance(make_controller("aimd", ctx), AIMD) and make_controller("aimd", ctx).lat_goal_us == 300.0
    assert isinstance(make_controller("gradient", ctx), Gradient)
    assert capsys.readouterr().err == ""  # no deprecation note for current names
    with pytest.raises(ValueError, match="SLA"):
        make_controller("aimd")  # aims at a latency goal: needs the spec
    with pytest.raises(FileNotFoundError, match="nvmw train"):
        make_controller("q-learning", ControllerContext(agent_path="/nonexistent.joblib"))
    assert {n.partition(":")[0] for n in DEFAULT_LINEUP} == {"none", "fixed", "oracle", "aimd", "gradient",
                                                             "q-learning"}


def test_old_controller_spellings_are_deprecated_not_broken(capsys):
    assert isinstance(make_controller("no-control"), NoControl)
    assert "'no-control' is deprecated; use 'none'" in capsys.readouterr().err
    f = make_controller("fixed", ControllerContext(fixed=(7, 2)))
    assert (f.interactive, f.batch) == (7, 2)
    assert "'fixed' is deprecated; use 'fixed:7,2'" in capsys.readouterr().err


def test_evaluate_accepts_old_names_with_a_note(tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["evaluate", "--env", "synthetic", "--steps", "4", "--switch-every", "2",
                 "--controllers", "no-control", "fixed", "--fixed", "5", "6", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "'no-control' is deprecated" in err and "'fixed' is deprecated" in err
    with open(out / "eval.json") as fh:
        assert set(json.load(fh)) == {"no-control", "fixed-I5B6"}


def test_pool_is_an_old_spelling_of_path(capsys):
    args = build_parser().parse_args(["collect", "--env", "synthetic", "--pool", "/dev/shm/x.pool",
                                      "--out", "t.npz"])
    assert args.path == "/dev/shm/x.pool"
    assert "'--pool' is deprecated; use '--path'" in capsys.readouterr().err
    args = build_parser().parse_args(["collect", "--path", "/dev/shm/y.pool", "--out", "t.npz"])
    assert args.path == "/dev/shm/y.pool" and capsys.readouterr().err == ""


@pytest.mark.parametrize("cmd", [["ycsb"], ["replay", "trace.csv"], ["run-phase", "1"], ["collect", "--out", "x"],
                                 ["train", "--out", "x"], ["evaluate"], ["calibrate", "--out", "x"]])
def test_store_options_are_spelled_once(cmd):
    args = build_parser().parse_args([*cmd, "--engine", "pmem", "--path", "p.pool", "--device", "optane-6dimm",
                                      "--window", "0.5"])
    assert (args.engine, args.path, args.device, args.window) == ("pmem", "p.pool", "optane-6dimm", 0.5)


def test_static_configurations_take_controller_names(capsys):
    assert main(["sim", "run", "--phase", "2", "--controller", "none", "--windows", "1"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["threads"] == [0, 0]  # no pools
    assert main(["sim", "run", "--phase", "2", "--no-control", "--windows", "1"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["threads"] == [0, 0] and "'--no-control' is deprecated" in cap.err
    assert main(["sim", "run", "--phase", "2", "--threads", "3", "5", "--windows", "1"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["threads"] == [3, 5] and "use '--controller fixed:3,5'" in cap.err
    assert main(["ycsb", "--ops", "200", "--records", "100", "--threads", "2", "--controller", "aimd"]) == 1
    assert capsys.readouterr().err.startswith("nvmw ycsb: error: this command runs one static configuration")
    assert main(["ycsb", "--ops", "200", "--records", "100", "--threads", "2", "--no-control", "--json"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["middleware"]["control"] is False and "use '--controller none'" in cap.err


def test_q_learning_takes_an_agent_file_and_names_itself_after_it(tmp_path):
    rng = np.random.default_rng(0)
    X, A = rng.uniform(1, 10, size=(300, 8)), rng.integers(0, 9, size=300)
    R = np.where(A == 2, 1.0, -1.0)
    QLearningAgent(random_state=0).pretrain(X, A, R).save(tmp_path / "previous.joblib")
    c = make_controller(f"q-learning:{tmp_path / 'previous.joblib'}")
    assert isinstance(c, AgentController) and not isinstance(c, OnlineAgentController)
    assert c.name == "q-learning:previous"
    assert c.act(X[0], {}) == 2  # the file's agent acts, not the shipped one
    online = make_controller(f"q-learning-online:{tmp_path / 'previous.joblib'}")
    assert isinstance(online, OnlineAgentController) and online.name == "q-learning-online:previous"
    assert make_controller("q-learning", ControllerContext(agent_path=str(tmp_path / "previous.joblib"))).name \
        == "q-learning"
    with pytest.raises(FileNotFoundError, match="nvmw train"):
        make_controller(f"q-learning:{tmp_path / 'missing.joblib'}")


def test_a_missing_shipped_file_names_a_fix_every_command_has():
    # Said "pass --agent" / "pass --oracle", options only `nvmw evaluate` has.
    with pytest.raises(FileNotFoundError) as e:
        make_controller("q-learning", ControllerContext(device="none"))
    assert "name it as q-learning:FILE" in str(e.value) and "pass --agent" not in str(e.value)
    with pytest.raises(FileNotFoundError) as e:
        make_controller("oracle", ControllerContext(device="none"))
    assert "nvmw calibrate" in str(e.value) and "pass --oracle" not in str(e.value)


@pytest.mark.parametrize("cmd", [["ycsb", "--duration", "0.1"], ["sim", "run", "--windows", "1"]])
def test_a_fixed_count_below_one_is_refused_naming_the_spelling(capsys, cmd):
    # Was: "fixed thread counts must be >= 1", which named neither --controller nor the value.
    assert main([*cmd, "--controller", "fixed:0,3"]) == 1
    assert "fixed:0,3: thread counts must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("cmd, option", [(["run-phase", "1", "--duration", "1"], "--controller"),
                                         (["serve", "--port", "0"], "--controller"),
                                         (["evaluate", "--env", "sim", "--steps", "2", "--out", "x"],
                                          "--controllers")])
@pytest.mark.parametrize("spelling", ["fixed:0,3", "fixed:40,40", "fixed:3,33"])
def test_a_fixed_count_out_of_range_is_a_usage_error_before_the_run(capsys, cmd, option, spelling):
    # Was refused only once the run had started (run-phase after printing its header,
    # evaluate after its progress bar, serve after making its pool), exit 1, in words
    # ("threads must be integers in [1, 32]") that named no option.
    with pytest.raises(SystemExit) as e:
        main([*cmd, option, spelling])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"argument {option}: {spelling}: thread counts must be in [1, 32]" in err


def test_serve_lists_only_the_controllers_it_runs(capsys):
    # Its list of names offered the oracle, which serve refuses.
    with pytest.raises(SystemExit) as e:
        main(["serve", "--controller", "bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --controller: unknown controller 'bogus': use one of none, fixed:I,B, aimd" in err
    assert "oracle" not in err


def test_a_command_that_executes_itself_again_notes_an_old_spelling_once():
    # Was: a command on a temporary pmem pool executes itself again with
    # PMEM_IS_PMEM_FORCE=1, and the new process printed the notes of its parse again.
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("PMEM_IS_PMEM_FORCE", "NVMW_NOTES_SHOWN")}
    r = subprocess.run([sys.executable, "-m", "nvmw", "ycsb", "--engine", "pmem", "--no-control", "--duration",
                        "0.1", "--records", "20", "--threads", "1"], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("'--no-control' is deprecated; use '--controller none'") == 1, r.stderr
