"""Ctrl-C ends a long run promptly: blocking calls of the core wait in slices and run the
pending signal handlers between them, so KeyboardInterrupt reaches Python while C++ is
waiting (for clients, a preload or a window), the work is stopped and joined first, the
command line exits with 130, and the runs that keep results (sweep, evaluate) write
what they measured so far and say so.

The timeouts below only detect a hang; nothing here asserts how fast a stop is."""
from __future__ import annotations

import _thread
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from nvmw import _core
from nvmw.middleware import Middleware
from nvmw.workloads import traces
from nvmw.workloads.ycsb import YcsbConfig, YcsbWorkload

HANG_S = 60.0  # a run that ignores Ctrl-C outlives this (the runs asked for are longer)

# The command line as `python -m nvmw` runs it, announcing on stderr once every command
# module is imported and main() is about to start, so that the SIGINT lands in the run.
# Ctrl-C's handler is set explicitly: a child of a shell's background job starts with
# SIGINT ignored, and Python keeps it so.
_LAUNCH = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
           "from nvmw import cli; cli.build_parser(); "
           "print('READY', file=sys.stderr, flush=True); sys.exit(cli.main(sys.argv[1:]))")


class _Cli:
    """One `nvmw` command in a child process, its stderr collected by a thread."""

    def __init__(self, *argv: str, cwd=None):
        self.proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, *argv], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=dict(os.environ), cwd=cwd)
        self.err: list[str] = []
        self.out: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(stream, into), daemon=True)
                         for stream, into in ((self.proc.stderr, self.err), (self.proc.stdout, self.out))]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(stream, into: list) -> None:  # drains the pipe so the child never blocks on it
        for chunk in iter(lambda: stream.read(1), ""):
            into.append(chunk)

    def stderr(self) -> str:
        return "".join(self.err)

    def wait_for(self, pattern: str, timeout: float = HANG_S) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.stderr())
            if m:
                return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.close()
        pytest.fail(f"never saw {pattern!r} on stderr (exit {self.proc.returncode}):\n{self.stderr()[-2000:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for t in self._readers:
            t.join(timeout=10)
        self.proc.stdout.close()
        self.proc.stderr.close()

    def interrupt(self, sig: signal.Signals = signal.SIGINT) -> tuple[int, str, str]:
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            self.close()
            pytest.fail(f"still running {HANG_S:.0f} s after {sig.name}:\n{self.stderr()[-2000:]}")
        self.close()
        return self.proc.returncode, "".join(self.out), self.stderr()


def _started(cli: _Cli, settle_s: float = 1.5) -> None:
    """Wait until main() runs, then a little longer so the long call is under way."""
    cli.wait_for("READY")
    time.sleep(settle_s)


@pytest.mark.parametrize("argv", [
    ["ycsb", "--duration", "600", "--threads", "4", "--records", "500"],
    ["ycsb", "--capacity", "--duration", "600", "--threads", "2"],
    ["run-phase", "1", "--duration", "600", "--window", "0.2"],
    ["sim", "run", "--phase", "1", "--windows", "1000000", "--window", "10"],
], ids=["ycsb", "ycsb-capacity", "run-phase", "sim-run"])
def test_ctrl_c_ends_a_long_command_with_130(argv):
    cli = _Cli(*argv)
    _started(cli)
    rc, _out, err = cli.interrupt()
    assert rc == 130, err[-2000:]
    assert "interrupted" in err
    assert "Traceback" not in err


def test_ctrl_c_ends_a_replay_with_130(tmp_path):
    trace = tmp_path / "t.csv"
    traces.synth("azure", rows=2000, seed=1).write(str(trace), "azure")
    cli = _Cli("replay", str(trace), "--threads", "4", "--loop", "--duration", "600")
    _started(cli)
    rc, _out, err = cli.interrupt()
    assert rc == 130, err[-2000:]
    assert "Traceback" not in err


def test_ctrl_c_in_a_sweep_keeps_the_finished_configurations(tmp_path):
    out = tmp_path / "sweep"
    cli = _Cli("sweep", "--out", str(out), "--grid-i", "1", "--grid-b", "1,2,4,8,16,32", "--reps", "1",
               "--duration", "0.5", "--clients", "8", "--records", "200", "--no-plot")
    cli.wait_for(r"\[ 2/7\]")  # the baseline and one configuration are done
    rc, _out, err = cli.interrupt()
    assert rc == 130, err[-2000:]
    assert "interrupted: wrote" in err and str(out) in err
    with open(out / "summary.json") as f:
        summary = json.load(f)
    assert summary["interrupted"] is True
    assert summary["configs_planned"] == 7
    assert 2 <= summary["configs_done"] < 7
    assert summary["configs"][0]["config"] == "baseline"
    rows = (out / "sweep.csv").read_text().splitlines()
    assert len(rows) - 1 >= summary["configs_done"]  # header + one row per finished repetition
    assert not (out / "sweep.png").exists()


def test_ctrl_c_in_evaluate_writes_the_steps_taken(tmp_path):
    out = tmp_path / "eval"
    cli = _Cli("evaluate", "--env", "real", "--device", "none", "--window", "0.1", "--steps", "5000",
               "--switch-every", "5", "--controllers", "none", "fixed:4,4", "--out", str(out))
    cli.wait_for(r"\| *(1[2-9]|[2-9]\d|\d{3,})/10000")  # both controllers have taken steps
    rc, _out, err = cli.interrupt()
    assert rc == 130, err[-2000:]
    assert "partial results in" in err
    with open(out / "eval.json") as f:
        summaries = json.load(f)
    assert set(summaries) == {"no-control", "fixed-I4B4"}
    assert all(0 < s["steps"] < 5000 for s in summaries.values())
    with open(out / "traces.json") as f:
        steps = {name: len(tr["step"]) for name, tr in json.load(f).items()}
    assert steps == {name: s["steps"] for name, s in summaries.items()}
    with open(out / "run.json") as f:
        assert "interrupted" in json.load(f)
    assert not (out / "eval.png").exists()


# ---- the library calls themselves (the main thread interrupted by a timer) ----------

@pytest.fixture(autouse=True)
def _ctrl_c_raises():
    """Python's own SIGINT handler (KeyboardInterrupt), also when the test run inherited
    SIGINT ignored (a shell's background job); restored afterwards."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _interrupt_main_after(seconds: float) -> threading.Timer:
    """Raise SIGINT's handler in the main thread as a real Ctrl-C would (the signal flag)."""
    t = threading.Timer(seconds, _thread.interrupt_main, args=(signal.SIGINT,))
    t.start()
    return t


def test_generator_run_stops_its_clients_on_ctrl_c():
    with Middleware(engine="memory", interactive_threads=2, batch_threads=1) as mw:
        w = YcsbWorkload(mw, YcsbConfig(record_count=100, duration_s=HANG_S, threads=3))
        w.load()
        timer = _interrupt_main_after(0.5)
        with pytest.raises(KeyboardInterrupt):
            w.run()
        timer.join()
        assert not w.running  # the clients were stopped and joined before it raised
        done = w._gen.results()
        assert done["all"]["ops"] > 0  # what they did before the stop is kept
        mw.put(b"k", b"v")  # the middleware still serves
        assert mw.get(b"k") == b"v"


def test_replay_join_stops_its_clients_on_ctrl_c():
    trace = traces.synth("azure", rows=500, seed=3)
    with Middleware(engine="memory", interactive_threads=2, batch_threads=1) as mw:
        r = _core.Replay(trace, traces.replay_options(threads=2, loop=True, duration_s=HANG_S))
        r.start(mw.core)
        timer = _interrupt_main_after(0.5)
        with pytest.raises(KeyboardInterrupt):
            r.join()
        timer.join()
        assert not r.running
        assert r.join()["stopped"] is True


def test_wait_for_window_is_interruptible():
    with Middleware(engine="memory", window_s=3600.0) as mw:
        timer = _interrupt_main_after(0.3)
        with pytest.raises(KeyboardInterrupt):
            mw.wait_for_window(0, timeout_s=HANG_S)
        timer.join()
        assert mw.core.running
        with pytest.raises(OSError, match="timeout"):  # a real timeout is still a timeout
            mw.wait_for_window(0, timeout_s=0.2)


def test_close_is_interruptible_and_its_drain_goes_on():
    # close() finishes every accepted request; behind a callback that waits, Ctrl-C was
    # held until the callback returned and the drain ended.
    mw = Middleware(engine="memory", interactive_threads=1, batch_threads=1)
    entered, release, returned = threading.Event(), threading.Event(), []

    def waits(error, value):
        entered.set()
        release.wait(HANG_S)
        returned.append(True)

    mw.core.submit(0, b"k", b"", 1, waits)  # holds the only batch worker
    assert entered.wait(HANG_S)
    pending = mw.submit("put", b"k", b"v", cls="batch")
    timer = _interrupt_main_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        mw.close()
    timer.join()
    assert returned == []  # raised while the drain still waited for the callback
    assert not mw.core.running
    release.set()
    mw.close()  # waits for the drain the first close() began
    assert returned == [True]
    assert pending.done() and pending.result() is None


def test_reading_a_trace_is_interruptible(tmp_path):
    # An endless trace (a FIFO fed until the read stops or HANG_S passes): only a
    # cancelled read ends before the writer gives up.
    fifo = tmp_path / "endless.csv"
    os.mkfifo(fifo)

    def feed() -> None:
        deadline = time.monotonic() + HANG_S
        try:
            with open(fifo, "w") as f:
                f.write("time_ms,op,key,bytes\n")
                i = 0
                while time.monotonic() < deadline:
                    f.write("".join(f"{i + k},W,k{(i + k) % 1000},100\n" for k in range(1000)))
                    i += 1000
        except BrokenPipeError:
            pass  # the reader stopped

    writer = threading.Thread(target=feed)
    writer.start()
    timer = _interrupt_main_after(0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            traces.read_trace(fifo, "native")
    finally:
        timer.join()
        writer.join()


def test_ctrl_c_in_collect_saves_the_transitions_so_far(tmp_path):
    from nvmw.rl.pretrain import load_transitions
    out = tmp_path / "t.npz"
    cli = _Cli("collect", "--env", "real", "--device", "none", "--window", "0.1", "--steps", "50",
               "--episodes", "1000", "--phases", "1", "--out", str(out))
    cli.wait_for(r"collect: +0%.*\| *[1-9]\d*/1000")  # an episode is done
    rc, _out, err = cli.interrupt()
    assert rc == 130, err[-2000:]
    assert f"transitions collected to {out}" in err
    data = load_transitions(out)
    n = len(data["actions"])
    assert n >= 50 and all(len(data[k]) == n for k in ("states", "rewards", "next_states", "phases"))
    assert "interrupted" in json.loads(data["meta"])


def test_sigterm_stops_a_run_as_ctrl_c_does_and_removes_its_temporary_pool():
    # Was: SIGTERM (kill, timeout, a batch system ending the job) ended the process at once
    # with -15: the run's temporary pmem pool (1 GiB of memory on /dev/shm by default)
    # stayed behind, and a sweep or evaluation lost what it had measured.
    cli = _Cli("run-phase", "1", "--duration", "600", "--window", "0.2", "--engine", "pmem")
    deadline = time.monotonic() + HANG_S
    while not re.search(r"(?m)^ +\d+ +\d+/\d+ ", "".join(cli.out)):  # a window is printed
        if time.monotonic() > deadline or cli.proc.poll() is not None:
            cli.close()
            pytest.fail(f"no window printed (exit {cli.proc.returncode}):\n{cli.stderr()[-2000:]}")
        time.sleep(0.05)
    with open(f"/proc/{cli.proc.pid}/maps") as fh:
        pools = {line.split()[-1] for line in fh if "/nvmw-phase-" in line}
    assert len(pools) == 1, pools
    pool = pools.pop()
    code, _, err = cli.interrupt(signal.SIGTERM)
    assert code == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    assert not os.path.exists(os.path.dirname(pool))


def test_main_puts_back_the_sigterm_action_it_found():
    from nvmw.cli import main
    before = signal.getsignal(signal.SIGTERM)
    assert main(["trace", "stats", os.devnull]) == 1
    assert signal.getsignal(signal.SIGTERM) is before
