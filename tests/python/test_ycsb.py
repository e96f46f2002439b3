"""Tests of the YCSB-style generator from Python: wrapper, background mode,
validation, capacity probe and the `nvmw ycsb` command."""
from __future__ import annotations

import json
import time

import pytest

from nvmw import _core
from nvmw.cli import main
from nvmw.workloads.ycsb import YcsbConfig, YcsbWorkload, measure_capacity, run_ycsb
from nvmw.middleware import Middleware

OP_KEYS = {"ops", "errors", "not_found", "ops_per_s", "mean_us", "min_us", "max_us",
           "p50_us", "p99_us", "p999_us"}


def _small(**kw) -> YcsbConfig:
    base = dict(record_count=1000, operation_count=3000, duration_s=0.0, threads=4, value_bytes=64)
    base.update(kw)
    return YcsbConfig(**base)


@pytest.mark.parametrize("control", [True, False])
def test_run_counts_ops_and_loads_records(control):
    with Middleware(engine="memory", control=control, window_s=0.1,
                    interactive_threads=2, batch_threads=1) as mw:
        r = run_ycsb(mw, _small(read_proportion=0.7, update_proportion=0.2, insert_proportion=0.1))
        count = mw.core.engine.count()
    assert r["records_loaded"] == 1000
    assert r["all"]["ops"] == 3000
    assert r["read"]["ops"] + r["update"]["ops"] + r["insert"]["ops"] == 3000
    assert abs(r["read"]["ops"] / 3000 - 0.7) < 0.05
    assert r["all"]["errors"] == 0, r["first_error"]
    assert count == 1000 + r["insert"]["ops"]
    for name in ("all", "read", "update", "insert"):
        assert set(r[name]) == OP_KEYS
    a = r["all"]
    assert 0 < a["min_us"] <= a["p50_us"] <= a["p99_us"] <= a["p999_us"] <= a["max_us"]
    assert a["ops_per_s"] == pytest.approx(a["ops"] / r["elapsed_s"], rel=1e-6)


def test_background_mode_with_intervals():
    with Middleware(engine="memory", window_s=0.1) as mw:
        w = YcsbWorkload(mw, _small(operation_count=0, duration_s=30.0, interval_s=0.05))
        assert w.load()["records_loaded"] == 1000
        w.start()
        assert w.running
        time.sleep(0.2)
        w.stop()
        r = w.join()
    assert not w.running
    assert r["all"]["ops"] > 0
    assert r["elapsed_s"] < 30
    assert len(r["intervals"]) >= 2
    assert sum(iv["ops"] for iv in r["intervals"]) == r["all"]["ops"]


def test_start_from_another_thread_during_load_waits_for_it():
    # Two threads driving one generator: a start() during load() once began the run
    # beside the loaders, so reads found records not loaded yet (or load() failed with
    # "Results before Join" when the run outlived it).
    import threading

    with Middleware(engine="memory", control=False, window_s=0.1) as mw:
        gen = _core.YcsbGenerator(mw.core, _small(record_count=200_000, operation_count=0,
                                                  duration_s=0.1).to_options())
        loaded, errors = {}, []

        def load():
            try:
                loaded.update(gen.load())
            except Exception as e:  # noqa: BLE001 - reported by the assertion below
                errors.append(e)

        loader = threading.Thread(target=load)
        loader.start()
        time.sleep(0.02)  # most likely inside the load by now; the outcome must not depend on it
        gen.start()
        r = gen.join()
        loader.join()
        count = mw.core.engine.count()
    assert errors == []
    assert loaded["records_loaded"] == 200_000 and loaded["first_error"] == ""
    assert r["all"]["ops"] > 0 and r["all"]["errors"] == 0, r["first_error"]
    assert r["read"]["not_found"] == 0  # every read came after the whole load
    assert count >= 200_000


def test_paced_run_keeps_to_its_schedule():
    # 4 threads x 250/s. A run bounded by its duration issues at most what its schedule
    # has due before the deadline, 4 x 100 in 0.4 s; fewer when a client falls behind (a
    # loaded machine), as it stops at the deadline. A run bounded by its count cannot
    # end before its schedule: of 400 requests one client makes 100 at least, the last
    # due 99 periods (0.396 s) after the start. Neither depends on how fast it runs.
    with Middleware(engine="memory", window_s=0.1) as mw:
        timed = run_ycsb(mw, _small(operation_count=0, duration_s=0.4, target_ops_per_s=1000))
        counted = run_ycsb(mw, _small(operation_count=400, target_ops_per_s=1000))
    assert 0 < timed["all"]["ops"] <= 404
    assert counted["all"]["ops"] == 400
    assert counted["elapsed_s"] >= 0.396


def test_bad_config_is_rejected_clearly():
    with pytest.raises(ValueError, match="sum to 1"):
        _small(read_proportion=0.9).validate()
    with pytest.raises(ValueError, match="distribution"):
        _small(distribution="pareto").validate()
    with pytest.raises(ValueError, match="operation_count or duration_s"):
        _small(operation_count=0, duration_s=0).validate()
    with Middleware(engine="memory") as mw:
        with pytest.raises(Exception, match="unknown option"):
            _core.YcsbGenerator(mw.core, {"recordcount": 5})
        with pytest.raises(Exception, match="threads"):
            _core.YcsbGenerator(mw.core, dict(_small(threads=0).to_options()))


def test_stopped_middleware_is_refused():
    mw = Middleware(engine="memory")
    mw.close()
    with pytest.raises(Exception, match="not running"):
        YcsbWorkload(mw, _small())


def test_capacity_measures_every_target():
    r = measure_capacity(_small(operation_count=5000))
    for target in ("direct", "no-control", "middleware"):
        assert r[target]["ops"] == 5000
        assert r[target]["errors"] == 0
        assert r[target]["ops_per_s"] > 0
    assert r["cores"] >= 1


def test_cli_json(capsys):
    assert main(["ycsb", "--records", "500", "--ops", "1000", "--threads", "2",
                 "--read-proportion", "1.0", "--distribution", "uniform", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["all"]["ops"] == 1000
    assert out["read"]["ops"] == 1000
    assert out["update"]["ops"] == 0
    assert out["config"]["update_proportion"] == 0.0
    assert out["middleware"]["control"] is True


def test_cli_capacity_json(capsys):
    assert main(["ycsb", "--capacity", "--ops", "2000", "--threads", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"direct", "no-control", "middleware"} <= set(out)
    assert out["direct"]["ops"] == 2000


@pytest.mark.parametrize("threads", [0, -1, 33, 64, 2**40])
def test_capacity_refuses_middleware_threads_the_middleware_cannot_run(threads):
    # Was: 0 and 64 ran 1 and 32 workers while the result said 0 and 64; 2**40 was
    # nanobind's TypeError listing signatures.
    from nvmw.errors import InvalidArgumentError
    with pytest.raises(InvalidArgumentError,
                       match=rf"^middleware_threads must be an integer in \[1, 32\] .*, got {threads}$"):
        measure_capacity(_small(operation_count=500), targets=["middleware"], middleware_threads=threads)


def test_capacity_reports_the_middleware_threads_it_ran():
    r = measure_capacity(_small(operation_count=500), targets=["middleware"], middleware_threads=32)
    assert r["middleware_threads"] == 32 and r["middleware"]["ops"] == 500


def test_cli_capacity_refuses_interactive_threads_beyond_the_bound(capsys):
    assert main(["ycsb", "--capacity", "--controller", "fixed:64,2", "--ops", "500", "--threads", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nvmw ycsb: error: --capacity") and "[1, 32]" in err and "got 64" in err
