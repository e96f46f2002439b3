"""The rl commands end to end on tiny sizes: calibrate, collect, tune (loky and Ray),
train, evaluate (synthetic env: fast and deterministic), plus demo_comparison and a
short collect on the real middleware."""
import json
import os

import numpy as np
import pytest

from nvmw.cli import main
from nvmw.control import SLASpec
from nvmw.lab.demo import demo_comparison
from nvmw.rl import QLearningAgent
from nvmw.rl.pretrain import QUICK_GRID, load_transitions, tune_models
from nvmw.workloads.phases import DEFAULT_PHASES

TINY_GRID = {"poly__degree": [1, 2], "sgd__loss": ["squared_error"], "sgd__penalty": ["l2"],
             "sgd__alpha": [0.01], "sgd__learning_rate": ["invscaling"], "sgd__max_iter": [200]}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """calibrate -> collect -> tune --quick -> train on the synthetic env, once per module."""
    d = tmp_path_factory.mktemp("rl")
    assert main(["calibrate", "--env", "synthetic", "--grid", "2", "8", "20", "--windows", "2",
                 "--out", str(d / "spec.toml")]) == 0
    assert main(["collect", "--env", "synthetic", "--episodes", "1", "--steps", "60",
                 "--out", str(d / "t.npz")]) == 0
    assert main(["tune", str(d / "t.npz"), "--quick", "--cv", "3", "--n-jobs", "1",
                 "--out", str(d / "tuned.json")]) == 0
    assert main(["train", "--env", "synthetic", "--transitions", str(d / "t.npz"), "--tuned",
                 str(d / "tuned.json"), "--episodes", "2", "--steps", "30", "--phases", "1", "3",
                 "--out", str(d / "agent.joblib")]) == 0
    return d


def test_calibrate_writes_spec_and_oracle(pipeline):
    spec = SLASpec.from_toml(pipeline / "spec.toml")
    assert spec.name == "calibrated-synthetic" and "grid [2, 8, 20]" in spec.notes
    with open(pipeline / "spec.oracle.json") as fh:
        oracle = json.load(fh)
    # calibrate sweeps the default phase set (thesis 1-4 and the contended ones) by default
    assert set(oracle["table"]) == {str(p) for p in DEFAULT_PHASES} and {"1", "2", "3", "4", "5"} <= set(oracle["table"])
    assert oracle["run"]["phases"].startswith(",".join(map(str, DEFAULT_PHASES)) + " ")
    assert all(c[0] in (2, 8, 20) and c[1] in (2, 8, 20) for c in oracle["table"].values())


def test_collect_file(pipeline):
    data = load_transitions(pipeline / "t.npz")
    n = len(DEFAULT_PHASES)  # collect runs the default phase set by default
    assert len(data["actions"]) == n * 60 and data["states"].shape == (n * 60, 8)
    assert sorted(set(data["phases"].tolist())) == list(DEFAULT_PHASES)
    assert data["truncated"].sum() == n
    np.testing.assert_array_equal(data["states"][1:60], data["next_states"][:59])


def test_tune_output(pipeline):
    with open(pipeline / "tuned.json") as fh:
        res = json.load(fh)
    assert len(res["model_params"]) == 9 and res["cv"] == 3
    for p in res["model_params"]:
        assert p["degree"] in QUICK_GRID["poly__degree"] and p["loss"] in QUICK_GRID["sgd__loss"]


def test_train_output(pipeline):
    ag = QLearningAgent.load(pipeline / "agent.joblib")
    with open(pipeline / "tuned.json") as fh:
        tuned = json.load(fh)["model_params"]
    assert [m.named_steps["poly"].degree for m in ag.models_] == [p["degree"] for p in tuned]
    hist = ag.metadata_["history"]
    assert [h["phase"] for h in hist] == [1, 1, 3, 3]
    assert ag.metadata_["training"]["1"]["episodes"] == 2
    assert os.path.getsize(pipeline / "agent.curve.png") > 1000


def test_evaluate_writes_tables(pipeline, tmp_path):
    out = tmp_path / "eval"
    assert main(["evaluate", "--env", "synthetic", "--steps", "40", "--switch-every", "10",
                 "--agent", str(pipeline / "agent.joblib"), "--oracle", str(pipeline / "spec.oracle.json"),
                 "--out", str(out)]) == 0
    with open(out / "eval.json") as fh:
        res = json.load(fh)
    assert set(res) == {"no-control", "fixed-I15B15", "oracle", "aimd", "gradient", "q-learning"}
    for s in res.values():
        assert set(s["reward"]) == {"min", "q1", "median", "q3", "max"}
        assert 0 <= s["sla_both_met"] <= 1 and s["steps"] == 40
    with open(out / "run.json") as fh:
        run = json.load(fh)
    assert {"cores", "cpu", "device", "window_s", "sla"} <= set(run)
    assert isinstance(run["cpu"], str) and run["cpu"].strip()
    assert (out / "eval.png").exists() and (out / "eval.md").exists()


def test_evaluate_missing_agent_is_a_clear_error(tmp_path, capsys):
    # The CLI turns expected failures into one line on stderr and exit status 1.
    code = main(["evaluate", "--env", "synthetic", "--steps", "10", "--controllers", "q-learning",
                 "--agent", str(tmp_path / "none.joblib"), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert "nvmw train" in err and "Traceback" not in err


def test_tune_rejects_too_few_samples(pipeline):
    data = load_transitions(pipeline / "t.npz")
    small = {k: v[:20] for k, v in data.items() if k != "meta"}
    with pytest.raises(ValueError, match="collect more"):
        tune_models(small, grid=TINY_GRID, cv=5, n_jobs=1)


def test_tune_on_local_ray(pipeline):
    ray = pytest.importorskip("ray")
    data = load_transitions(pipeline / "t.npz")
    grid = dict(TINY_GRID, poly__degree=[1])  # one candidate, 2 folds: Ray start-up dominates anyway
    local = tune_models(data, grid=grid, cv=2, n_jobs=1, backend="loky")
    remote = tune_models(data, grid=grid, cv=2, n_jobs=2, backend="ray")
    assert remote["backend"] == "ray" and not ray.is_initialized()  # started and shut down
    # Same folds, same seeds: the search picks the same models wherever it runs.
    assert remote["model_params"] == local["model_params"]
    np.testing.assert_allclose(remote["cv_score"], local["cv_score"])


def test_demo_comparison_synthetic(tmp_path):
    lines = []
    res = demo_comparison(env="synthetic", steps=20, switch_every=5, controllers=["fixed:15,15", "aimd"],
                          out_dir=str(tmp_path), print_fn=lines.append)
    assert set(res["summary"]) == {"fixed-I15B15", "aimd"}
    assert "cores" in res["run"] and any("| median |" in line for line in lines)


def test_collect_on_real_middleware(tmp_path):
    out = tmp_path / "real.npz"
    assert main(["collect", "--env", "real", "--window", "0.05", "--episodes", "1", "--steps", "4",
                 "--phases", "4", "--sla", "thesis", "--out", str(out)]) == 0
    data = load_transitions(out)
    assert len(data["actions"]) == 4 and np.all(data["throughput"] > 0)
    assert json.loads(data["meta"])["device"] == "optane-1dimm"


def test_train_continues_a_saved_agent(pipeline, tmp_path):
    out = tmp_path / "more.joblib"
    assert main(["train", "--env", "synthetic", "--init-agent", str(pipeline / "agent.joblib"), "--episodes", "1",
                 "--steps", "10", "--phases", "2", "--epsilon", "0.5", "--out", str(out)]) == 0
    before = QLearningAgent.load(pipeline / "agent.joblib")
    after = QLearningAgent.load(out)
    assert after.n_episodes_ == before.n_episodes_ + 1 and after.n_updates_ == before.n_updates_ + 10
    assert after.metadata_["previous"]["training"] == before.metadata_["training"]
    assert after.metadata_["history"][0]["epsilon"] == 0.5


def test_cpu_model_reads_proc_cpuinfo(tmp_path, monkeypatch):
    from nvmw.lab import runs

    fake = tmp_path / "cpuinfo"
    fake.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Test CPU @ 2.30GHz\n\nprocessor\t: 1\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(fake if path == "/proc/cpuinfo" else path,
                                                                          *a, **k))
    assert runs.cpu_model() == "Test CPU @ 2.30GHz"
    fake.write_text("processor\t: 0\n")  # no model name line: falls back to platform
    assert runs.cpu_model() == (runs.platform.processor() or runs.platform.machine() or "unknown")
