"""Phases 1-4 as data (load, validate, build reproducible traces) and a short co-run
of a PhaseWorkload producing windows where both classes complete requests."""
import time

import pytest

import nvmw
from nvmw.lab import lineup
from nvmw.workloads import phases


def test_shipped_phases_follow_appendix_c():
    assert phases.list_phases() == [1, 2, 3, 4, 5, 6]
    p = {n: phases.load_phase(n) for n in (1, 2, 3, 4)}
    assert (p[1].interactive.requests, p[1].interactive.write_ratio, p[1].interactive.clients) == (2039, 0.2, 200)
    assert (p[1].interactive.min_bytes, p[1].interactive.max_bytes) == (30, 50)
    assert (p[1].batch.requests, p[1].batch.write_ratio, p[1].batch.fixed_bytes, p[1].batch.clients) == (3847, 0.5, 800_000, 200)
    assert (p[2].interactive.clients, p[2].batch.clients) == (150, 320)
    assert p[3].interactive.clients == 400
    assert (p[3].batch.fixed_bytes, p[3].batch.write_ratio) == (4096, 0.0)
    assert (p[4].interactive.requests, p[4].interactive.write_ratio) == (7814, 0.9)
    assert p[4].batch == p[3].batch
    for ph in p.values():
        assert ph.interactive.loop and ph.batch.loop


def test_phase_traces_match_their_spec_and_seed():
    ph = phases.load_phase(4)
    t = phases.build_trace(ph.interactive, 3)
    s = t.summary()
    assert s["rows"] == 7814
    assert s["writes"] == round(0.9 * 7814)
    assert 400 <= s["bytes_p50"] <= 600
    assert phases.build_trace(ph.interactive, 3).records() == t.records()
    assert phases.build_trace(ph.interactive, 4).records() != t.records()
    b = phases.build_trace(ph.batch, 3).summary()
    assert b["rows"] == 3847 and b["writes"] == 0 and b["bytes_max"] == 4096


def test_bad_phase_files(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text("number = 9\n[interactive]\nsource='azure'\nrequests=10\nclients=2\n"
                   "target_ops_per_s=5\n[batch]\nsource='nope'\nrequests=1\nclients=1\naccel=1\n")
    with pytest.raises(ValueError, match="source must be one of"):
        phases.load_phase(bad)
    bad.write_text("number = 9\n[interactive]\nsource='azure'\nrequests=10\nclients=2\n"
                   "target_ops_per_s=5\naccel=2\n[batch]\nsource='svd'\nrequests=1\nclients=1\naccel=1\n")
    with pytest.raises(ValueError, match="exactly one of"):
        phases.load_phase(bad)
    with pytest.raises(ValueError):
        phases.load_phase(7)


@pytest.mark.parametrize("word", ["\u0661", "\uff11", "\u00b2", "1\u0661"])  # ARABIC-INDIC ONE, FULLWIDTH ONE, SUPERSCRIPT TWO
def test_a_phase_number_is_ascii_digits(word):
    # Was: str.isdigit() took them for numbers and int() read "١" and "１" as 1 (phase 1
    # ran) and failed on "²" ("invalid literal for int() with base 10").
    with pytest.raises(ValueError, match=f"'{word}' is not a phase number \\(decimal digits 0-9\\) or a phase file"):
        phases.load_phase(word)
    assert phases.load_phase("1").number == 1


@pytest.mark.parametrize("flag", [True, False])
def test_a_phase_number_is_not_a_bool(flag):
    # Was: a bool is an int to isinstance, so load_phase(True) loaded phase 1 and
    # phase_workloads(True, 0) built phase 1's traces (or was served them from the cache).
    phases.phase_workloads(1, 0)
    with pytest.raises(TypeError, match="n_or_path must be a phase number or a phase file, not bool"):
        phases.load_phase(flag)
    with pytest.raises(TypeError, match="phase must be a phase number, not bool"):
        phases.phase_workloads(flag, 0)
    with pytest.raises(TypeError, match="phase must be a phase number, not float"):
        phases.phase_workloads(1.0, 0)


def test_load_phase_takes_any_integer_type_and_names_what_it_refuses():
    # Was: numpy's integers, the numbers a sweep produces, reached os.fspath and failed
    # with "expected str, bytes or os.PathLike object, not int64".
    import numpy as np

    assert phases.load_phase(np.int64(2)).number == phases.load_phase(2).number == 2
    with pytest.raises(TypeError, match=r"must be a phase number \(an integer\) or a phase file path, not float"):
        phases.load_phase(2.0)
    with pytest.raises(TypeError, match="not NoneType"):
        phases.load_phase(None)


def test_list_phases_counts_only_ascii_numbers(tmp_path, monkeypatch):
    for name in ("phase1.toml", "phase\u0662.toml", "phase\u00b2.toml"):
        (tmp_path / name).write_text("")
    monkeypatch.setattr(phases, "PHASE_DIR", str(tmp_path))
    assert phases.list_phases() == [1]


def test_make_controller_specs():
    assert lineup.make_controller("fixed:3,4").act(None, {}) == (3, 4)
    assert lineup.make_controller("none").requires_control is False
    with pytest.raises(ValueError):
        lineup.make_controller("fixed:3")
    with pytest.raises(ValueError):
        lineup.make_controller("warp:9")
    lineup.register_controller("const", lambda arg, ctx: lineup.make_controller(lambda obs, info: int(arg)))
    assert lineup.make_controller("const:5").act(None, {}) == 5


def test_phase_workload_co_run_both_classes_progress():
    with nvmw.Middleware(engine="memory", window_s=0.25, interactive_threads=4, batch_threads=4) as mw:
        work = phases.PhaseWorkload(1, mw.core, seed=1, rate_scale=0.5)
        assert work.offered_ops_per_s() == pytest.approx(0.5 * (4000 + 500), rel=0.01)
        work.start()
        assert work.running
        with pytest.raises(RuntimeError):
            work.start()
        seq = mw.get_stats()["seq"]
        both = 0
        for _ in range(4):
            stats = mw.wait_for_window(seq, 10.0)
            seq = stats["seq"]
            both += stats["interactive"]["ops"] > 0 and stats["batch"]["ops"] > 0
        res = work.stop()
        assert not work.running
        assert both >= 1
        assert res["interactive"]["all"]["ops"] > 0 and res["batch"]["all"]["ops"] > 0
        assert res["interactive"]["errors"] == 0 and res["batch"]["errors"] == 0
        assert res["interactive"]["read"]["not_found"] == 0
        # Restartable on the same middleware.
        work.start()
        for _ in range(2000):  # poll, no timing assertion: a loaded machine may be slow
            if work.issued()["interactive"] > 0:
                break
            time.sleep(0.005)
        res2 = work.stop()
        assert res2["interactive"]["all"]["ops"] > 0


def test_run_phase_cli_prints_windows(capsys):
    from nvmw.cli import main

    assert main(["run-phase", "3", "--duration", "1", "--window", "0.25", "--controller", "fixed:2,2",
                 "--rate-scale", "0.25"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip().startswith(tuple("0123456789"))]
    assert len(lines) >= 3
    assert all(" 2/2" in line for line in lines)
    with pytest.raises(SystemExit) as e:  # a usage error, before the run
        main(["run-phase", "1", "--controller", "bogus"])
    assert e.value.code == 2
