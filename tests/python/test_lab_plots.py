"""How the lab writes its plots: as its other outputs, beside the path and renamed onto it,
so a plot is whole or absent whatever stops the writer (Ctrl-C, a full disk); a file
replaced keeps its permission bits, a device or a FIFO is written in place, and the file
is written under the name given."""
from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import threading

import pytest
from matplotlib.figure import Figure

from cli_output import one_error_line
from cli_output import write_sweep as _sweep
from nvmw.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _savefig_fails_halfway(monkeypatch):
    """Figure.savefig writes the start of a PNG, then the disk is full."""
    def savefig(self, fname, **kwargs):
        if hasattr(fname, "write"):
            fname.write(PNG_MAGIC + b"\0" * 100)
            fname.flush()
        else:
            with open(fname, "wb") as fh:
                fh.write(PNG_MAGIC + b"\0" * 100)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(Figure, "savefig", savefig)


def _curve(path):
    from nvmw.lab.training import plot_curve

    history = [{"phase": ph, "reward_median": -1.0 * k, "epsilon": 0.9 / (k + 1)} for ph in (1, 2) for k in range(4)]
    plot_curve(history, path, {"env": "synthetic", "device": "optane-1dimm", "window_s": 0.1, "sla": "default"})


def _sweep_plot(path):
    from nvmw.lab.sweep import plot_sweep

    configs = [{"config": c, "control": c != "none", "p99_samples_us": [100.0, 120.0, 150.0],
                "batch_ops_per_s": 1000.0 + k} for k, c in enumerate(["none", "1/1", "2/1"])]
    plot_sweep({"configs": configs, "device": "optane-1dimm", "cores": 2, "ycsb_clients": 2, "batch_clients": 1,
                "workload": {"ycsb": {"distribution": "zipfian", "value_bytes": 100, "read_proportion": 0.5}}},
               path)


def _traces_plot(path):
    from nvmw.lab.evaluation import plot_traces

    steps = list(range(20))
    trace = {"step": steps, "interactive_threads": [2] * 20, "batch_threads": [1] * 20,
             "throughput": [1000.0] * 20, "p99_us": [100.0] * 20, "offered_ops_per_s": [900.0] * 20,
             "schedule": [1, 2]}
    plot_traces({"fixed": trace}, path, 10)


def _interference_plot(path):
    from nvmw.lab.interference import plot

    rows = [{"scenario": s, "interactive_p99_us": 100.0 * (k + 1), "batch_mb_per_s": 10.0 * k}
            for k, s in enumerate(["alone", "shared", "controlled"])]
    plot({"rows": rows, "cores": 2, "config": {"interactive_clients": 2, "interactive_bytes": 100,
                                               "batch_clients": 1, "batch_bytes": 65536, "engine": "memory",
                                               "device": "optane-1dimm"}}, path)


@pytest.mark.parametrize("argv", [
    ["device", "plot", "{out}"],
    ["sim", "check", "{sweep}", "--windows", "1", "--plot", "{out}"],
])
def test_a_command_whose_plot_fails_halfway_keeps_the_previous_file(tmp_path, monkeypatch, capsys, argv):
    # Was: the start of the PNG stayed at the path, under the final name, and the error
    # did not name the file.
    sweep = _sweep(tmp_path)
    out = tmp_path / "out.png"
    out.write_bytes(b"previous")
    _savefig_fails_halfway(monkeypatch)
    assert main([a.format(out=out, sweep=sweep) for a in argv]) == 1
    assert out.read_bytes() == b"previous"
    assert sorted(os.listdir(tmp_path)) == ["out.png", "sweep.json"]  # no temporary left
    one_error_line(capsys, "No space left on device", str(out))


@pytest.mark.parametrize("write", [_curve, _sweep_plot, _traces_plot, _interference_plot])
def test_a_plot_that_fails_halfway_keeps_the_previous_file(tmp_path, monkeypatch, write):
    out = tmp_path / "out.png"
    out.write_bytes(b"previous")
    _savefig_fails_halfway(monkeypatch)
    with pytest.raises(OSError, match="No space left on device"):
        write(str(out))
    assert out.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["out.png"]


def test_a_plot_replaced_keeps_its_permission_bits(tmp_path):
    out = tmp_path / "curve.png"
    out.write_bytes(b"previous")
    out.chmod(0o600)
    _curve(str(out))
    assert out.read_bytes().startswith(PNG_MAGIC)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["curve.png"]


def test_a_plot_is_written_as_named(tmp_path, capsys):
    # Was: matplotlib added ".png" to a name without an extension: `device plot curve`
    # wrote curve.png and printed curve.
    out = tmp_path / "curve"
    assert main(["device", "plot", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert os.listdir(tmp_path) == ["curve"]
    assert out.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize("argv", [
    ["device", "plot", "/dev/stdout"],
    ["sim", "check", "{sweep}", "--windows", "1", "--plot", "/dev/stdout"],
    ["train", "--env", "synthetic", "--collect-episodes", "1", "--steps", "10", "--episodes", "1", "--phases", "1",
     "--out", "{d}/agent.joblib", "--curve", "/dev/stdout"],
])
def test_a_plot_written_to_stdout_is_all_that_stdout_carries(tmp_path, argv):
    # Was: the command printed its report (the path, the JSON summary) to stdout after
    # the PNG, so `nvmw device plot /dev/stdout > x.png` through a pipe was not a PNG.
    sweep = _sweep(tmp_path)
    r = subprocess.run([sys.executable, "-m", "nvmw", *[a.format(d=tmp_path, sweep=sweep) for a in argv]],
                       capture_output=True, timeout=300, env=dict(os.environ))
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert r.stdout.startswith(PNG_MAGIC)
    assert r.stdout.endswith(b"IEND\xaeB`\x82")  # the PNG's last chunk, and nothing after it
    assert b"/dev/stdout" in r.stderr  # the report went to stderr instead


def test_a_plot_into_a_fifo_is_written_in_place(tmp_path):
    # Was: matplotlib opened the path to read it back, which a FIFO refuses
    # ("File or stream is not seekable").
    fifo = str(tmp_path / "curve.png")
    os.mkfifo(fifo)
    got = []

    def read():
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        _curve(fifo)
    except BaseException:
        # The writer failed, maybe before it opened the FIFO: let a reader waiting there go.
        # (Not after a success: the reader may have read and closed already, and the open
        # then fails with ENXIO.)
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        raise
    finally:
        reader.join(timeout=60)
    assert got[0].startswith(PNG_MAGIC) and len(got[0]) > 1000
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["curve.png"]


# What the figures say: every panel names what it draws.

@pytest.fixture
def drawn(monkeypatch):
    """The figures the lab draws, kept instead of written."""
    from nvmw import jsonfiles

    figures = []
    monkeypatch.setattr(jsonfiles, "save_figure", lambda fig, path, **kwargs: figures.append(fig))
    return figures


def _legend(ax):
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend is not None else []


def _curves(ax):
    """The data lines of a panel (not the phase boundaries: vertical lines of two points)."""
    return [list(line.get_ydata()) for line in ax.get_lines() if len(set(line.get_xdata())) > 1]


def test_the_traces_plot_draws_no_threads_for_no_control(drawn):
    # Was: no control's panel drew both pools at 0 threads (what the env reports for it),
    # as if it held no permit at all, where it has no limit.
    from nvmw.lab.evaluation import plot_traces

    steps = list(range(20))
    common = {"step": steps, "throughput": [1000.0] * 20, "p99_us": [100.0] * 20,
              "offered_ops_per_s": [900.0] * 20, "schedule": [1, 2]}
    plot_traces({"no-control": dict(common, interactive_threads=[0] * 20, batch_threads=[0] * 20),
                 "fixed-I2B1": dict(common, interactive_threads=[2] * 20, batch_threads=[1] * 20)}, "x.png", 10)
    axes = drawn[0].axes
    none_threads, fixed_threads = axes[0], axes[1]  # the top row, one column per controller
    assert none_threads.get_title() == "no-control" and fixed_threads.get_title() == "fixed-I2B1"
    assert _curves(none_threads) == []
    assert [t.get_text() for t in none_threads.texts] == ["no limits (no control)"]
    assert _curves(fixed_threads) == [[2] * 20, [1] * 20]
    assert _legend(fixed_threads) == ["interactive", "batch"]


def _history(epsilons, both=None):
    return [{"phase": ph, "reward_median": -1.0 * k, "epsilon": eps[k],
             "both_sla_fraction": None if both is None else both[k]}
            for ph, eps in epsilons.items() for k in range(len(eps))]


def test_the_learning_curve_draws_a_schedule_every_phase_shares_once(drawn):
    # Was: six identical epsilon lines over each other showed only the last phase's
    # colour, and only the first panel had a legend.
    from nvmw.lab.training import plot_curve

    header = {"env": "synthetic", "device": "optane-1dimm", "window_s": 0.1, "sla": "default"}
    eps = [0.9, 0.81, 0.729]
    plot_curve(_history({1: eps, 2: eps}, both=[0.5, 0.75, 1.0]), "x.png", header)
    reward, epsilon, both = drawn[0].axes
    assert _curves(epsilon) == [eps]
    assert _legend(epsilon) == ["every phase"]
    assert _legend(reward) == _legend(both) == ["phase 1", "phase 2"]
    assert both.get_ylabel() == "fraction of steps meeting both SLAs"

    plot_curve(_history({1: eps, 2: [0.9, 0.5, 0.1]}), "x.png", header)  # schedules that differ
    assert _legend(drawn[1].axes[1]) == ["phase 1", "phase 2"]


def test_the_interference_plot_has_room_for_the_tallest_bars_label(drawn):
    # Was: the log axis ended just above the tallest bar, whose "23.9 ms" ran into the frame.
    _interference_plot("x.png")
    p99 = drawn[0].axes[0]
    assert p99.get_ylim()[0] == 1
    assert p99.get_ylim()[1] >= 3 * 300.0  # the tallest bar of _interference_plot


def test_the_sim_check_plot_names_its_diagonal(tmp_path, drawn):
    # Was: the dashed line of equal real and simulated p99 had no legend entry.
    assert main(["sim", "check", _sweep(tmp_path), "--windows", "1", "--plot", str(tmp_path / "x.png")]) == 0
    panels = [ax for ax in drawn[0].axes if ax.get_title().startswith("phase")]
    assert len(panels) == 2
    for ax in panels:
        assert "simulated = real" in _legend(ax)
        assert ax.get_xlabel() == "real p99, median window (us)"


def test_the_traces_plot_staggers_the_phase_labels_of_many_segments(drawn):
    # Was: the 20 phase labels of a 4,000-step run ran into one another ("P4P3P6P5...").
    from nvmw.lab.evaluation import plot_traces

    def trace(schedule):
        steps = list(range(10 * len(schedule)))
        return {"step": steps, "interactive_threads": [2] * len(steps), "batch_threads": [1] * len(steps),
                "throughput": [1000.0] * len(steps), "p99_us": [100.0] * len(steps),
                "offered_ops_per_s": [900.0] * len(steps), "schedule": schedule}

    plot_traces({"fixed": trace([4, 3, 6, 5, 1, 2] * 3 + [5, 6])}, "x.png", 10)
    plot_traces({"fixed": trace([4, 3, 6, 5, 1, 2])}, "x.png", 10)
    for fig, rows in zip(drawn, ({0.02, 0.12}, {0.02})):
        offered = fig.axes[-1]
        labels = [t for t in offered.texts if t.get_text().startswith("P")]
        assert [t.get_text() for t in labels][:3] == ["P4", "P3", "P6"]
        assert {round(t.get_position()[1], 2) for t in labels} == rows
