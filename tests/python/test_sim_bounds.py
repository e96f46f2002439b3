"""The bounds of `nvmw sim`: a number of windows, evaluations or a phase outside them is
a usage error naming the option before anything runs (a huge one ran without end and grew
its rows until memory ran out), and the library functions behind it refuse them too."""
import pytest

from nvmw.cli import main
from nvmw.commands import _sim_fast, sim
from nvmw.lab import simfit
from nvmw.lab.phase_run import simulate_phase
from nvmw.lab.simfit import FIT_EVALS_MAX, SWEEP_WINDOWS_MAX, fit, simulate_sweep
from nvmw.rl.simrun import RUN_WINDOWS_MAX, check_windows, run_static


class _Ran(Exception):
    """Raised by a stand-in for the run: the command got past its checks."""


def _ran(*args, **kwargs):
    raise _Ran()


@pytest.fixture
def no_run(monkeypatch):
    """The runs behind `nvmw sim` replaced by one that raises _Ran."""
    for module, name in ((_sim_fast, "run_static"), (_sim_fast, "run_greedy"), (sim, "simulate_phase"),
                         (sim, "fit"), (sim, "simulate_sweep"), (sim, "load_sweep")):
        monkeypatch.setattr(module, name, _ran)


@pytest.mark.parametrize("argv, option", [
    (["run", "--windows", "0"], "--windows"),
    (["run", "--windows", "-1"], "--windows"),
    (["run", "--windows", str(RUN_WINDOWS_MAX + 1)], "--windows"),
    (["run", "--windows", str(2**63 - 1)], "--windows"),
    (["run", "--windows", "99999999999999999999"], "--windows"),
    (["run", "--controller", "aimd", "--windows", str(RUN_WINDOWS_MAX + 1)], "--windows"),
    (["run", "--phase", "7"], "--phase"),
    (["run", "--phase", "0"], "--phase"),
    (["fit", "sweep.csv", "--out", "p.json", "--windows", str(SWEEP_WINDOWS_MAX + 1)], "--windows"),
    (["fit", "sweep.csv", "--out", "p.json", "--max-evals", str(FIT_EVALS_MAX + 1)], "--max-evals"),
    (["fit", "sweep.csv", "--out", "p.json", "--max-evals", "0"], "--max-evals"),
    (["check", "sweep.csv", "--windows", str(SWEEP_WINDOWS_MAX + 1)], "--windows"),
    (["check", "sweep.csv", "--windows", "-5"], "--windows"),
])
def test_out_of_range_is_a_usage_error_before_the_run(no_run, capsys, tmp_path, monkeypatch, argv, option):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["sim", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}:" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["run", "--windows", str(RUN_WINDOWS_MAX)],
    ["run", "--controller", "aimd", "--windows", str(RUN_WINDOWS_MAX)],
    ["run", "--phase", "6"],
    ["fit", "sweep.csv", "--out", "p.json", "--windows", str(SWEEP_WINDOWS_MAX),
     "--max-evals", str(FIT_EVALS_MAX)],
    ["check", "sweep.csv", "--windows", str(SWEEP_WINDOWS_MAX)],
])
def test_the_bounds_themselves_are_taken(no_run, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(_Ran):
        main(["sim", *argv])


def test_the_bounds_are_in_the_help(capsys):
    for action in ("run", "fit", "check"):
        with pytest.raises(SystemExit):
            main(["sim", action, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        top = RUN_WINDOWS_MAX if action == "run" else SWEEP_WINDOWS_MAX
        assert f"at most {top:,}" in out
    with pytest.raises(SystemExit):
        main(["sim", "fit", "--help"])
    assert f"at most {FIT_EVALS_MAX:,}" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("windows", [-1, RUN_WINDOWS_MAX + 1, 2**63, 1.0, "10", True, None])
def test_check_windows_refuses(windows):
    with pytest.raises(ValueError, match="windows must be an integer in"):
        check_windows(windows)


def _stop(row):
    raise _Ran()  # a window ran: the bound was not checked first


@pytest.mark.parametrize("windows", [-1, RUN_WINDOWS_MAX + 1])
def test_simulated_runs_refuse_windows_out_of_range(windows):
    # Was: -1 ran nothing without a word, and a huge number ran on (the callback stops it here).
    with pytest.raises(ValueError, match="windows must be an integer in"):
        run_static(1, windows=windows, on_window=_stop)
    with pytest.raises(ValueError, match="windows must be an integer in"):
        simulate_phase(1, windows=windows, controller="aimd", on_window=_stop)


def test_simulated_runs_still_take_zero_and_numpy_windows():
    import numpy as np

    assert run_static(1, windows=0) == []
    assert len(run_static(1, windows=np.int64(2), window_s=0.01)) == 2
    assert check_windows(RUN_WINDOWS_MAX) == RUN_WINDOWS_MAX


def test_fit_refuses_counts_out_of_range(monkeypatch):
    monkeypatch.setattr(simfit, "sweep_env", _ran)
    configs = {(1, 4, 2): (200.0, 1000.0, 250.0)}
    with pytest.raises(ValueError, match="windows must be an integer in"):
        simulate_sweep(configs, simfit.FIT_START, window_s=0.1, windows=SWEEP_WINDOWS_MAX + 1)
    with pytest.raises(ValueError, match="windows must be an integer in"):
        simulate_sweep(configs, simfit.FIT_START, window_s=0.1, windows=0)
    rows = [{"phase": 1, "interactive_threads": 4, "batch_threads": 2, "p99_us": 200.0, "throughput": 1000.0}]
    with pytest.raises(ValueError, match="max_evals must be an integer in"):
        fit(rows, window_s=0.1, max_evals=FIT_EVALS_MAX + 1)
    with pytest.raises(ValueError, match="windows must be an integer in"):
        fit(rows, window_s=0.1, windows=SWEEP_WINDOWS_MAX + 1)
