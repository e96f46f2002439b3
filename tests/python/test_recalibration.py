"""The recalibration pipeline's pieces (scripts/recalibrate.sh): no-control windows next
to the calibration sweep, and fitting a chosen set of simulator parameters (spin_us too)."""
import json

import pytest

from nvmw.cli import main
from nvmw.control.sla import SLASpec
from nvmw.lab.calibration import load_confirmation, load_sweep, no_control_windows, promise_configs
from nvmw.lab.simfit import FITTABLE, fit
from nvmw.rl.envs import SyntheticEnv
from nvmw.rl.sim import FIT_NAMES, default_params
from nvmw.workloads.phases import DEFAULT_PHASES


def test_calibrate_writes_no_control_windows_apart_from_the_sweep(tmp_path, capsys):
    assert main(["calibrate", "--env", "synthetic", "--grid", "2", "8", "--windows", "2", "--no-control-windows", "3",
                 "--no-control-out", str(tmp_path / "nc.json"), "--sweep-out", str(tmp_path / "sweep.json"),
                 "--out", str(tmp_path / "spec.toml")]) == 0
    capsys.readouterr()
    nc, run = load_sweep(tmp_path / "nc.json")
    assert run["control"] is False and run["windows_per_phase"] == 3 and "--no-control-windows 3" in run["command"]
    assert sorted({r["phase"] for r in nc}) == list(DEFAULT_PHASES) and len(nc) == 3 * len(DEFAULT_PHASES)
    assert all(r["interactive_threads"] == 0 and r["batch_threads"] == 0 and r["throughput"] > 0 for r in nc)
    # The sweep itself (and so the SLA and the oracle) holds only the fixed configurations.
    rows, header = load_sweep(tmp_path / "sweep.json")
    assert {(r["interactive_threads"], r["batch_threads"]) for r in rows} == {(2, 2), (2, 8), (8, 2), (8, 8)}
    assert "load_average" in header and header["command"].startswith("nvmw calibrate")
    with open(tmp_path / "spec.oracle.json") as fh:
        assert all(c != [0, 0] for c in json.load(fh)["table"].values())
    assert main(["calibrate", "--env", "synthetic", "--no-control-windows", "3",
                 "--out", str(tmp_path / "x.toml")]) == 2


def test_calibrate_confirms_each_phase_promise_and_keeps_the_windows_with_the_sweep(tmp_path, capsys):
    out = lambda name: str(tmp_path / name)  # noqa: E731
    assert main(["calibrate", "--env", "synthetic", "--grid", "2", "8", "--windows", "2", "--phases", "1", "3",
                 "--confirm-runs", "2", "--confirm-windows", "3", "--sweep-out", out("sweep.json"),
                 "--out", out("spec.toml")]) == 0
    first = json.loads(capsys.readouterr().out)
    rows, header = load_sweep(out("sweep.json"))
    confirm = load_confirmation(out("sweep.json"))
    chosen = promise_configs(rows)
    # 2 rounds x 3 windows of each phase's chosen configuration, and nothing else.
    assert sorted((r["phase"], r["interactive_threads"], r["batch_threads"]) for r in confirm) == sorted(
        (ph, *cfg) for ph, cfg in chosen.items() for _ in range(6))
    assert header["confirmation"]["runs"] == 2 and len(rows) == 2 * 4 * 2
    for ph, promise in first["promise_per_phase"].items():
        assert promise["confirm_windows"] == 6 and promise["config"] == "I{}B{}".format(*chosen[int(ph)])
    # Derived again from the file: the saved windows are used, nothing is measured, same goal.
    assert main(["calibrate", "--env", "synthetic", "--from-sweep", out("sweep.json"), "--out", out("again.toml")]) == 0
    assert json.loads(capsys.readouterr().out)["lat_goal_us"] == first["lat_goal_us"]
    # The spec says how it was derived from the file's data, not from this command's defaults
    # (4 x 30 confirmation windows, 12 windows per configuration).
    notes = SLASpec.from_toml(out("again.toml")).notes
    assert "grid [2, 8], 2 windows/config, rule attain 0.9, promises from 2 x 3 confirmation windows" in notes
    # --confirm-windows 0: the promise from the sweep windows that chose it.
    assert main(["calibrate", "--env", "synthetic", "--from-sweep", out("sweep.json"), "--confirm-windows", "0",
                 "--out", out("in.toml")]) == 0
    in_sample = json.loads(capsys.readouterr().out)
    assert all("confirm_windows" not in p for p in in_sample["promise_per_phase"].values())


def test_no_control_windows_needs_a_no_control_env():
    with pytest.raises(ValueError, match="control=False"):
        no_control_windows(SyntheticEnv(window_s=0.1), phases=(1,), windows=1)
    rows = no_control_windows(SyntheticEnv(window_s=0.1, control=False, max_episode_steps=10**9), phases=(2, 3),
                              windows=4, settle_windows=2)
    assert [r["phase"] for r in rows] == [2] * 4 + [3] * 4


def test_fit_moves_only_the_named_parameters():
    rows = [{"phase": 3, "interactive_threads": i, "batch_threads": 1, "p99_us": p99, "throughput": 8000.0}
            for i, p99 in ((1, 900.0), (4, 150.0)) for _ in range(3)]
    start = dict(default_params(), spin_us=20.0)
    res = fit(rows, window_s=0.1, start=start, windows=2, max_evals=8, names=("wake_cpu_us", "spin_us"))
    assert res["run"]["fitted"] == ["wake_cpu_us", "spin_us"]
    moved = {k for k in start if res["params"][k] != pytest.approx(start[k], rel=1e-5)}
    assert moved and moved <= {"wake_cpu_us", "spin_us"}
    assert "spin_us" in FITTABLE and set(FIT_NAMES) < set(FITTABLE)
    with pytest.raises(ValueError, match="cannot fit"):
        fit(rows, window_s=0.1, names=("cores",))


def test_train_with_no_episodes_is_pretraining_only(tmp_path, capsys):
    assert main(["collect", "--env", "synthetic", "--episodes", "1", "--steps", "20", "--phases", "1", "2",
                 "--out", str(tmp_path / "t.npz")]) == 0
    capsys.readouterr()
    assert main(["train", "--env", "synthetic", "--transitions", str(tmp_path / "t.npz"), "--episodes", "0",
                 "--fqi-iterations", "2", "--phases", "1", "2", "--out", str(tmp_path / "a.joblib")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["final_median_reward_per_phase"] == {"1": None, "2": None} and (tmp_path / "a.joblib").exists()
