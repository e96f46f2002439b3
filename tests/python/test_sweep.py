"""Tests of the concurrency sweep: a tiny grid end to end (CSV, JSON, PNG), the
summary's arithmetic, configuration checks and the `nvmw sweep` command."""
from __future__ import annotations

import csv
import json
import os

import pytest

from nvmw.cli import main
from nvmw.lab.sweep import (CSV_FIELDS, SUMMARY_KEYS, SweepConfig, config_from_dict,
                            quick_config, run_sweep, summarize)

TINY = dict(grid_i=(1, 2), grid_b=(1, 2), reps=2, duration_s=0.3, ycsb_clients=4,
            batch_clients=4, record_count=500, batch_rows=300, batch_scale=0.001,
            batch_key_space=16, interval_s=0.1)


def test_tiny_sweep_writes_csv_json_png(tmp_path):
    lines = []
    summary = run_sweep(SweepConfig(out_dir=str(tmp_path), **TINY), progress=lines.append)
    assert len(lines) == 5  # one progress line per configuration
    with open(tmp_path / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5 * 2
    assert tuple(rows[0]) == CSV_FIELDS
    assert [r["config"] for r in rows[:2]] == ["baseline", "baseline"]
    assert {r["config"] for r in rows[2:]} == {"1/1", "1/2", "2/1", "2/2"}
    for r in rows:
        assert int(r["ycsb_ops"]) > 0
        assert int(r["batch_ops"]) > 0
        assert float(r["ycsb_p99_us"]) > 0
        assert int(r["ycsb_errors"]) == 0 and int(r["batch_errors"]) == 0
    with open(tmp_path / "summary.json") as f:
        saved = json.load(f)
    for key in SUMMARY_KEYS:
        assert key in saved, key
    assert saved["device"] == "none"
    assert saved["cores"] == (os.cpu_count() or 1)
    assert saved["ycsb_clients"] == 4
    # Ratios are the medians' ratios.
    assert saved["p99_improvement_x"] == pytest.approx(
        saved["baseline_p99_us"] / saved["best_p99_us"], rel=1e-3)
    assert saved["throughput_improvement_x"] == pytest.approx(
        saved["best_throughput"] / saved["baseline_throughput"], rel=1e-3)
    grid = [c for c in saved["configs"] if c["control"]]
    assert saved["best_p99_us"] == min(c["p99_us"] for c in grid)
    assert saved["best_throughput"] == max(c["batch_ops_per_s"] for c in grid)
    base_rows = [float(r["ycsb_p99_us"]) for r in rows if r["config"] == "baseline"]
    assert saved["baseline_p99_us"] == pytest.approx(sorted(base_rows)[0] / 2 + sorted(base_rows)[1] / 2)
    png = tmp_path / "sweep.png"
    assert png.stat().st_size > 1000
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert summary["best_p99_config"] in {"1/1", "1/2", "2/1", "2/2"}


def _entry(name, p99, thr, control=True):
    return {"config": name, "control": control, "p99_us": p99, "batch_ops_per_s": thr,
            "batch_mb_per_s": thr / 10, "p99_samples_us": [p99]}


def test_summarize_picks_best_of_each_axis():
    per = [_entry("baseline", 1000.0, 100.0, control=False), _entry("1/1", 10.0, 50.0),
           _entry("1/8", 400.0, 800.0), _entry("8/8", 2000.0, 150.0)]
    s = summarize(SweepConfig(), per)
    assert s["best_p99_config"] == "1/1" and s["p99_improvement_x"] == 100.0
    assert s["best_throughput_config"] == "1/8" and s["throughput_improvement_x"] == 8.0
    assert s["configs_beating_baseline_on_both"] == ["1/8"]


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="grid_i"):
        SweepConfig(grid_i=()).validate()
    with pytest.raises(ValueError, match="reps"):
        SweepConfig(reps=0).validate()
    with pytest.raises(ValueError, match="engine"):
        SweepConfig(engine="disk").validate()
    with pytest.raises(ValueError, match="unknown sweep option"):
        config_from_dict({"grid": [1]})
    q = quick_config()
    assert q.quick and len(q.grid_i) * len(q.grid_b) <= 9


def test_cli_rejects_bad_grid(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--grid-i", "1,x"])


def test_cli_tiny_sweep(tmp_path, capsys):
    assert main(["sweep", "-o", str(tmp_path), "--grid-i", "2", "--grid-b", "1", "--reps", "1",
                 "--duration", "0.3", "--clients", "3", "--records", "300", "--batch-scale",
                 "0.001", "--interval", "0.1", "--no-plot", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["best_p99_config"] == "2/1"
    assert out["grid_i"] == [2] and out["batch_clients"] == 3
    assert "baseline" in captured.err  # progress lines
    assert (tmp_path / "sweep.csv").exists() and not (tmp_path / "sweep.png").exists()
