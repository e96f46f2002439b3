"""`nvmw serve`'s life as a process: stop signals at any moment (from the first moment
the command's module runs, across its re-execution, while it starts, twice, SIGHUP),
protected mode (clients on other hosts refused without a password), a controller that
fails inside the server or has no shipped file for the device, the metrics endpoint's
errors (a scraper that resets, an IPv6 bind, a port taken). Each case is a `python -m
nvmw serve` child: exit status 0 after a stop signal with the temporary pool removed, one
clear line and never a traceback on stderr."""
import glob
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import nvmw
from ports import free_ports, listening_ports

START_TIMEOUT_S = 60.0
SHIPPED_AGENT = os.path.join(os.path.dirname(nvmw.__file__), "data", "agents", "qlearning-optane-1dimm.joblib")


def child_env() -> dict:
    """The child imports the same nvmw as this test (package dir and dev core)."""
    env = dict(os.environ, PMEM_IS_PMEM_FORCE="1", PYTHONUNBUFFERED="1")
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(nvmw.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


class Child:
    """One `nvmw serve` child; stdout and stderr collected line by line. `launch`: the
    Python code run instead of `-m nvmw` (it gets the words after "-c" in sys.argv)."""

    def __init__(self, *args: str, preexec_fn=None, launch=None, env=None):
        head = ["-c", launch] if launch else ["-m", "nvmw"]

        def preexec() -> None:
            # The stop signals start at their defaults whatever this test run inherited (a
            # run under nohup ignores SIGHUP, a shell's background job SIGINT, and the
            # service keeps an inherited ignore); then the test's own set-up.
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            if preexec_fn is not None:
                preexec_fn()

        self.proc = subprocess.Popen([sys.executable, *head, "serve", *args], env=env or child_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=preexec)
        self.out: list = []
        self.err: list = []
        self._threads = [threading.Thread(target=self._pump, args=(f, buf), daemon=True)
                         for f, buf in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(f, buf) -> None:
        for line in f:
            buf.append(line)

    def wait_for(self, pattern: str, stream: str = "out", after: int = 0) -> re.Match:
        """The first match of `pattern` in the stream's lines from line `after` on."""
        buf = self.out if stream == "out" else self.err
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in list(buf)[after:]:
                m = re.search(pattern, line)
                if m:
                    return m
            if self.proc.poll() is not None and all(not t.is_alive() for t in self._threads):
                break
            time.sleep(0.02)
        self.kill()
        pytest.fail(f"no line matching {pattern!r} on std{stream}:\n{self.text()}")

    def signal(self, *sigs) -> int:
        for sig in sigs:
            self.proc.send_signal(sig)
        return self.finish()

    def finish(self) -> int:
        try:
            rc = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"still running 120 s after it was told to stop:\n{self.text()}")
        finally:
            self.kill()
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for t in self._threads:
            t.join(timeout=30)
        self.proc.stdout.close()
        self.proc.stderr.close()

    def text(self) -> str:
        return "".join(self.out) + "".join(self.err)


@pytest.fixture
def spawn():
    """Child(...), killed at the end of the test whatever happened (a failed assertion
    leaves no server running)."""
    made = []

    def make(*args, **kwargs) -> Child:
        made.append(child := Child(*args, **kwargs))
        return child
    yield make
    for child in made:
        child.kill()


def new_temp_pools(before: set) -> set:
    return set(glob.glob("/dev/shm/nvmw-serve-*")) - before


def assert_no_traceback(child: Child) -> None:
    err = "".join(child.err)
    assert "Traceback" not in err and "Exception occurred" not in err, err


def write_when_read(fifo, child: Child, data: bytes, *, once_read=None) -> None:
    """Write `data` into `fifo` once the child opens it for reading (not if it exits first).

    once_read: a condition that holds once the child has read the data (e.g. it exited).
    Until it holds, `data` is written again whenever the child has the FIFO open for
    reading: a signal that interrupts the child's open() just as this side opens, writes
    and closes leaves the FIFO with no one on either end, and the kernel drops the data;
    the child's retried open() then waits for a writer that already came."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and child.proc.poll() is None:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            time.sleep(0.02)
            continue
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        if once_read is None:
            return
        settle = time.monotonic() + 10.0
        while time.monotonic() < settle and not once_read():
            time.sleep(0.02)
        if once_read():
            return


# --- stop signals ------------------------------------------------------------------------


@pytest.mark.parametrize("sigs", [(signal.SIGTERM,), (signal.SIGHUP,), (signal.SIGTERM, signal.SIGINT)],
                         ids=["SIGTERM", "SIGHUP", "SIGTERM-then-SIGINT"])
def test_a_stop_signal_while_starting_up_exits_cleanly_and_removes_the_temporary_pool(tmp_path, sigs):
    # The SLA spec is a FIFO: the server is held inside its start-up (reading the spec,
    # after the temporary pool's directory is made) until this test writes the spec.
    fifo = tmp_path / "sla.toml"
    os.mkfifo(fifo)
    before = set(glob.glob("/dev/shm/nvmw-serve-*"))
    child = Child("--port", "0", "--sla", str(fifo))
    child.wait_for(r"a temporary pool (\S+)", stream="err")
    for sig in sigs:
        child.proc.send_signal(sig)
    write_when_read(fifo, child, b'name = "test"\nlat_goal = 1000\ntp_goal = 100\n',
                    once_read=lambda: child.proc.poll() is not None)
    rc = child.finish()
    assert rc == 0, child.text()
    assert "nvmw serve: stopped before serving" in "".join(child.out)
    assert "listening on" not in "".join(child.out)
    assert not new_temp_pools(before), child.text()
    assert_no_traceback(child)


# The command line as `python -m nvmw` runs it, saying on stderr when the serve module,
# running, starts importing the first module of nvmw it needs that is not loaded yet,
# nvmw.stop_signals aside (an audit hook sees the import start; cli.main imports the
# command's module itself without the event). nvmw.stop_signals is imported to install
# the handlers, so its import starts before they are installed: a signal sent when it is
# announced could come before them. The next import (nvmw.commands._args, then the core,
# numpy and the controllers) is the module's first after its first lines, the handlers
# in place unless the module installs them later than it says. Ctrl-C's handler is set
# explicitly, as Python sets it: a child of a background job starts with SIGINT ignored,
# and a signal ignored at start stays ignored.
EARLY_LAUNCH = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
state = {"main": False, "told": False}

def announce(event, args):
    if (event == "import" and state["main"] and not state["told"] and args[0].startswith("nvmw.")
            and args[0] != "nvmw.stop_signals"):
        state["told"] = True
        print("IMPORTING", args[0], file=sys.stderr, flush=True)

sys.addaudithook(announce)
from nvmw import cli
state["main"] = True
sys.exit(cli.main(sys.argv[1:]))
"""

EARLY_DELAYS_MS = (0, 20, 50, 100, 200)


def signal_early(sig, delay_ms: int, *args: str, env=None) -> Child:
    """A serve child given `sig` `delay_ms` after its module, past its first lines, started
    importing the rest of nvmw; returns it once it has exited."""
    child = Child(*args, launch=EARLY_LAUNCH, env=env)
    child.wait_for(r"^IMPORTING nvmw\.", stream="err")
    time.sleep(delay_ms / 1000)
    child.proc.send_signal(sig)
    child.finish()
    return child


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("delay_ms", EARLY_DELAYS_MS)
def test_a_stop_signal_in_the_first_moments_of_the_command_exits_cleanly(sig, delay_ms):
    # While the module imports the core, numpy and the controllers (a few hundred ms), and
    # at every later moment, a stop signal is caught: status 0, never -15 or 130.
    child = signal_early(sig, delay_ms, "--port", "0", "--engine", "memory")
    assert child.proc.returncode == 0, child.text()
    last = child.out[-1] if child.out else ""
    assert last.startswith(("nvmw serve: stopped before serving", "nvmw serve: drained and closed")), child.text()
    assert_no_traceback(child)


@pytest.mark.parametrize("delay_ms", EARLY_DELAYS_MS + (400, 800))
def test_a_stop_signal_across_the_re_execution_exits_cleanly_and_leaves_no_pool(delay_ms):
    # A temporary pmem pool makes the command execute itself again with
    # PMEM_IS_PMEM_FORCE=1: a signal before, during or after the exec stops it (the new
    # process starts with the stop signals blocked, pending) and no pool is left.
    env = child_env()
    del env["PMEM_IS_PMEM_FORCE"]
    child = signal_early(signal.SIGTERM, delay_ms, "--port", "0", "--pool-mb", "8", env=env)
    assert child.proc.returncode == 0, child.text()
    pools = [m.group(1) for m in map(re.compile(r"a temporary pool (\S+)").search, child.err) if m]
    assert all(not os.path.exists(os.path.dirname(p)) for p in pools), child.text()
    assert_no_traceback(child)


# The command line as `python -m nvmw` runs it, held after the command has returned (as
# Python's shutdown would hold it a moment) until the test has sent its second signal.
AFTER_LAUNCH = """
import os, sys, time
from nvmw import cli
rc = cli.main(sys.argv[1:])
print("COMMAND RETURNED", file=sys.stderr, flush=True)
while not os.path.exists(os.environ["NVMW_TEST_RELEASE"]):
    time.sleep(0.01)
sys.exit(rc)
"""


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_second_signal_after_the_drain_leaves_status_0(tmp_path, second):
    # A second Ctrl-C (or a supervisor's second SIGTERM) that comes after the drain, while
    # the process exits, is ignored as one during the drain is: status 0, no traceback
    # (the handlers put back at the end of the command ended it with 130, -2 or -15).
    release = tmp_path / "release"
    env = dict(child_env(), NVMW_TEST_RELEASE=str(release))
    child = Child("--port", "0", "--engine", "memory", launch=AFTER_LAUNCH, env=env)
    child.wait_for(r"listening on")
    child.proc.send_signal(signal.SIGTERM)
    child.wait_for(r"^COMMAND RETURNED", stream="err")
    child.proc.send_signal(second)
    release.touch()
    rc = child.finish()
    assert rc == 0, child.text()
    assert "nvmw serve: drained and closed" in "".join(child.out), child.text()
    assert "interrupted" not in "".join(child.err), child.text()
    assert_no_traceback(child)


def test_sighup_drains_like_sigterm(tmp_path):
    before = set(glob.glob("/dev/shm/nvmw-serve-*"))
    child = Child("--port", "0", "--window", "0.2")
    port = int(child.wait_for(r"listening on [\d.]+:(\d+)").group(1))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
        assert s.recv(16) == b"+OK\r\n"
    assert child.signal(signal.SIGHUP) == 0, child.text()
    assert re.search(r"drained and closed \(1 commands, 1 connections\)", "".join(child.out)), child.text()
    assert not new_temp_pools(before), child.text()
    assert_no_traceback(child)


def test_sighup_stays_ignored_under_nohup():
    child = Child("--port", "0", "--engine", "memory",
                  preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    port = int(child.wait_for(r"listening on [\d.]+:(\d+)").group(1))
    child.proc.send_signal(signal.SIGHUP)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:  # still serving
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert s.recv(16) == b"+PONG\r\n"
    assert child.proc.poll() is None
    assert child.signal(signal.SIGTERM) == 0, child.text()


# --- the open-file limit -----------------------------------------------------------------


def open_file_limit(soft: int, hard: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_clients_past_the_open_file_limit_are_refused_not_left_waiting(spawn):
    # A hard limit of 256 descriptors leaves room for fewer than the 10 000 clients asked
    # for: a warning names the cap, and the client past it is told the server is full
    # (before, accept failed once the descriptors ran out and it waited unanswered).
    child = spawn("--port", "0", "--engine", "memory", preexec_fn=open_file_limit(256, 256))
    port = int(child.wait_for(r"listening on [\d.]+:(\d+)").group(1))
    cap = int(child.wait_for(r"open-file limit \(256\) leaves room for (\d+) clients, not 10000",
                             stream="err").group(1))
    assert 0 < cap < 256
    clients = []
    try:
        for _ in range(cap):
            clients.append(s := socket.create_connection(("127.0.0.1", port), timeout=30))
            s.sendall(b"PING\r\n")
            assert s.recv(16) == b"+PONG\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=30) as past:
            assert past.recv(64) == b"-ERR max number of clients reached\r\n"
        clients[0].sendall(b"CONFIG GET maxclients\r\n")
        assert clients[0].recv(64) == b"*2\r\n$10\r\nmaxclients\r\n$%d\r\n%d\r\n" % (len(str(cap)), cap)
    finally:
        for s in clients:
            s.close()
    assert child.signal(signal.SIGTERM) == 0, child.text()
    assert_no_traceback(child)


def test_the_soft_open_file_limit_is_raised_for_the_clients(spawn):
    # A soft limit of 256 under a higher hard one (this process's, at least the 2024 the
    # 1000 clients and the rest of the process are given) is raised, as Redis raises it:
    # the server serves the 1000 clients asked for, with no warning.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard == resource.RLIM_INFINITY or hard >= 2024, f"the hard open-file limit {hard} is too low"
    child = spawn("--port", "0", "--engine", "memory", "--max-clients", "1000",
                  preexec_fn=open_file_limit(256, hard))
    port = int(child.wait_for(r"listening on [\d.]+:(\d+)").group(1))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"CONFIG GET maxclients\r\n")
        assert s.recv(64) == b"*2\r\n$10\r\nmaxclients\r\n$4\r\n1000\r\n"
    assert child.signal(signal.SIGTERM) == 0, child.text()
    assert "open-file limit" not in "".join(child.err), child.text()


# --- a controller that fails inside the server -------------------------------------------


# The command line as `python -m nvmw` runs it, with the shipped agent's greedy policy
# raising at its first decision: a controller that loads and then fails mid-run (a file
# that would do so is refused when loaded).
FAILING_POLICY_LAUNCH = """
import sys
from nvmw import cli
from nvmw.rl import policy

def fail(self, obs):
    raise RuntimeError("the policy failed")

policy.GreedyPolicy.q_values = fail
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_failing_controller_keeps_the_limits_and_the_windows_going():
    child = Child("--port", "0", "--engine", "memory", "--window", "0.1", "--log-windows",
                  "--metrics-port", "0", "--controller", f"q-learning:{SHIPPED_AGENT}",
                  launch=FAILING_POLICY_LAUNCH)
    child.wait_for(r"listening on")
    mport = int(child.wait_for(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
    child.wait_for(r"controller q-learning:\S+ failed, limits kept at \(15, 15\)", stream="err")
    # The windows are still judged and logged after the failure ...
    n = len(child.out)
    child.wait_for(r"^window \d+: I/B 15/15", after=n)
    # ... and exported, with the failure.
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert re.search(r"^nvmw_controller_failed 1\.0$", text, re.M), text
    assert child.signal(signal.SIGTERM) == 0, child.text()
    assert "the controller had failed, limits kept" in "".join(child.out)
    failures = [line for line in child.err if "failed" in line]
    assert len(failures) == 1, child.text()
    assert_no_traceback(child)


# --- the metrics endpoint ----------------------------------------------------------------


def test_metrics_on_a_port_picked_at_start():
    # --metrics-port 0, as --port 0: a free port of its own, printed at start (it was
    # taken as "no metrics", so a test had to pick a port for the endpoint, which another
    # process could take before the child bound it).
    child = Child("--port", "0", "--engine", "memory", "--metrics-port", "0")
    port = int(child.wait_for(r"listening on 127\.0\.0\.1:(\d+) ").group(1))
    mport = int(child.wait_for(r"^nvmw serve: metrics on http://127\.0\.0\.1:(\d+)/metrics$").group(1))
    assert mport not in (0, port), child.text()
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
        assert b"nvmw_windows_total" in r.read()
    assert child.signal(signal.SIGTERM) == 0, child.text()
    assert_no_traceback(child)
    # Without --metrics-port: no endpoint, and no line about one.
    child = Child("--port", "0", "--engine", "memory")
    child.wait_for(r"listening on")
    assert child.signal(signal.SIGTERM) == 0, child.text()
    assert not any("metrics" in line for line in child.out + child.err), child.text()


def test_a_scraper_that_resets_leaves_no_traceback():
    child = Child("--port", "0", "--engine", "memory", "--metrics-port", "0")
    mport = int(child.wait_for(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", mport), timeout=10)
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
        s.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
        assert b"nvmw_windows_total" in r.read()
    assert child.signal(signal.SIGTERM) == 0, child.text()
    assert_no_traceback(child)
    assert not "".join(child.err).strip(), child.text()


def test_metrics_on_an_ipv6_bind():
    try:
        free_ports(host="::1")
    except OSError:
        pytest.fail("this host has no IPv6 loopback (::1)")
    child = Child("--port", "0", "--engine", "memory", "--bind", "::1", "--metrics-port", "0")
    child.wait_for(r"listening on \[::1\]:\d+")
    url = child.wait_for(r"metrics on (http://\[::1\]:\d+/metrics)").group(1)
    with urllib.request.urlopen(url, timeout=10) as r:
        assert b"nvmw_windows_total" in r.read()
    assert child.signal(signal.SIGTERM) == 0, child.text()


def test_a_metrics_port_that_is_taken_is_named():
    port = free_ports()[0]  # refused before anything is bound: another process may have it
    child = Child("--port", str(port), "--engine", "memory", "--metrics-port", str(port))
    assert child.finish() == 1
    assert "".join(child.err).strip() == f"nvmw serve: error: --metrics-port {port} is the server's own --port"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        child = Child("--port", "0", "--engine", "memory", "--metrics-port", str(taken))
        assert child.finish() == 1
    assert "".join(child.err).strip() == \
        f"nvmw serve: error: metrics endpoint 127.0.0.1:{taken}: Address already in use", child.text()


# --- stdout ------------------------------------------------------------------------------


# The command line as `python -m nvmw` runs it, with Service.start() returning only once
# the window log has taken the first window: the main thread as a loaded machine may
# leave it, descheduled between starting the service and saying it listens.
SLOW_ANNOUNCE_LAUNCH = """
import sys, threading
from nvmw import cli
from nvmw.lab import service

start = service.Service.start

def start_then_wait_for_a_window(self):
    logged = threading.Event()
    log = self.on_window

    def on_window(row):
        try:
            log(row)
        finally:
            logged.set()

    self.on_window = on_window
    start(self)
    assert logged.wait(60), "no window in 60 s"
    return self

service.Service.start = start_then_wait_for_a_window
sys.exit(cli.main(sys.argv[1:]))
"""


def test_the_listening_line_comes_before_the_window_lines():
    # `nvmw serve --log-windows`: the first line says where it listens, then the windows
    # from the first (a window that closed before the main thread said so was printed
    # above it).
    child = Child("--port", "0", "--engine", "memory", "--window", "0.05", "--log-windows",
                  launch=SLOW_ANNOUNCE_LAUNCH)
    child.wait_for(r"^window 2:")
    assert child.signal(signal.SIGTERM) == 0, child.text()
    assert child.out[0].startswith("nvmw serve: listening on"), child.text()
    assert child.out[1].startswith("window 1: "), child.text()
    assert_no_traceback(child)


def test_a_stdout_reader_that_goes_away_does_not_fail_the_drain():
    # `nvmw serve --log-windows | head -2`: the status lines after the reader left are
    # dropped; the drain and its exit status are the same.
    proc = subprocess.Popen([sys.executable, "-m", "nvmw", "serve", "--port", "0", "--engine", "memory",
                             "--window", "0.1", "--log-windows"], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "listening on" in proc.stdout.readline()
        assert proc.stdout.readline().startswith("window ")
        proc.stdout.close()  # the reader goes away
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert rc == 0, err
    assert err == "", err


def test_a_stdout_file_that_cannot_take_the_lines_does_not_fail_the_service(tmp_path):
    # Status lines to a file that takes no more (a file size limit here, a full disk
    # alike): the lines are dropped with one note on stderr, and the service serves and
    # drains as ever (it stopped with `error: File too large` and status 1, at start or
    # after the drain). The line with the port it picked goes nowhere: its socket in
    # /proc says where it listens.
    with open(tmp_path / "out.log", "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "nvmw", "serve", "--port", "0", "--engine", "memory",
                                 "--window", "0.1", "--log-windows"], env=child_env(), stdout=out,
                                stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (16, resource.RLIM_INFINITY)))
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (ports := listening_ports(proc.pid)):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, f"not listening after {START_TIMEOUT_S:.0f} s"
            time.sleep(0.05)
        assert len(ports) == 1, ports
        with socket.create_connection(("127.0.0.1", ports.pop()), timeout=30) as s:
            s.sendall(b"PING\r\n")
            assert s.recv(16) == b"+PONG\r\n"
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert rc == 0, err
    assert err == "nvmw serve: stdout: File too large; the status lines are dropped from now on\n", err


# --- bind --------------------------------------------------------------------------------


def host_address() -> str:
    """This machine's own IPv4 address on a network interface other than loopback (the
    one a packet to 10.255.255.255 would leave from; a UDP connect sends nothing): a
    client connecting to it from here has that address as its peer address, not
    loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            address = s.getsockname()[0]
    except OSError as e:
        pytest.fail(f"this host has no IPv4 address besides loopback to test protected mode with: {e}")
    if address.startswith("127.") or address == "0.0.0.0":
        pytest.fail(f"this host has no IPv4 address besides loopback to test protected mode with ({address})")
    return address


def read_until_closed(host: str, port: int, send: bytes = b"") -> bytes:
    """Everything the server sends a new connection (after `send`) until it closes it."""
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(send)
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    return data


def command(host: str, port: int, *lines: bytes) -> list:
    """One reply line per inline command, on one connection."""
    with socket.create_connection((host, port), timeout=30) as s:
        f = s.makefile("rb")
        replies = []
        for line in lines:
            s.sendall(line + b"\r\n")
            replies.append(f.readline())
        return replies


def note_of(child: Child, bind: str) -> str:
    return "".join(line for line in child.err if line.startswith(f"nvmw serve: listening on {bind} without"))


@pytest.mark.parametrize("bind", ["0.0.0.0", "::"])
def test_protected_mode_refuses_other_hosts_and_serves_loopback(bind, spawn):
    # As Redis 7 with protected-mode yes and no password: a client whose address is not
    # loopback gets one -DENIED line saying how to open the server, and is closed.
    # Bound to "::", IPv4 clients have mapped addresses (::ffff:127.0.0.1 is loopback).
    host = host_address()
    child = spawn("--port", "0", "--engine", "memory", "--bind", bind)
    port = int(child.wait_for(r"listening on \S+:(\d+)").group(1))
    denied = read_until_closed(host, port)
    assert denied.startswith(b"-DENIED nvmw is running in protected mode") and denied.endswith(b"\r\n"), denied
    assert denied.count(b"\r\n") == 1, denied
    for fix in (b"--password", b"--bind 127.0.0.1", b"--protected-mode no"):
        assert fix in denied, denied
    loopbacks = ["127.0.0.1"] + (["::1"] if bind == "::" else [])
    for loopback in loopbacks:
        assert command(loopback, port, b"PING") == [b"+PONG\r\n"]
    assert child.signal(signal.SIGTERM) == 0, child.text()
    # The refused connection is not served: only the loopback ones count.
    n = len(loopbacks)
    assert f"drained and closed ({n} commands, {n} connections)" in "".join(child.out), child.text()
    assert "protected mode: only clients on loopback are served" in note_of(child, bind), child.text()
    assert "warning" not in "".join(child.err), child.text()
    assert_no_traceback(child)


def test_a_password_or_protected_mode_no_serves_other_hosts(spawn):
    host = host_address()
    child = spawn("--port", "0", "--engine", "memory", "--bind", "0.0.0.0", "--password", "secret")
    port = int(child.wait_for(r"listening on \S+:(\d+)").group(1))
    assert command(host, port, b"PING", b"AUTH secret", b"PING") == [
        b"-NOAUTH Authentication required.\r\n", b"+OK\r\n", b"+PONG\r\n"]
    assert child.signal(signal.SIGTERM) == 0, child.text()
    assert "".join(child.err) == "", child.text()  # a password: nothing to say

    child = spawn("--port", "0", "--engine", "memory", "--bind", "0.0.0.0", "--protected-mode", "no")
    port = int(child.wait_for(r"listening on \S+:(\d+)").group(1))
    assert command(host, port, b"SET k v", b"GET k") == [b"+OK\r\n", b"$1\r\n"]
    assert child.signal(signal.SIGTERM) == 0, child.text()
    assert "".join(child.err) == (f"nvmw serve: warning: listening on 0.0.0.0 without --password and with "
                                  f"--protected-mode no: any host that reaches port {port} can read and write "
                                  f"the store\n"), child.text()


# --- controllers that need a file shipped for the device ---------------------------------


@pytest.mark.parametrize("controller", ["oracle", "oracle:/nonexistent.json"])
def test_the_oracle_is_refused_as_a_server_has_no_phase(controller, spawn):
    # It used to serve holding its table's default, I15/B15, under the oracle's name.
    child = spawn("--port", "0", "--engine", "memory", "--device", "optane-1dimm", "--controller", controller)
    assert child.finish() == 1, child.text()
    err = "".join(child.err)
    assert err == (f"nvmw serve: error: --controller {controller} looks its limits up by the phase of the "
                   "workload, which a server is not told; use fixed:I,B with the limits of the phase you "
                   "expect, or q-learning, which acts on what it measures\n"), err


@pytest.mark.parametrize("controller", ["q-learning", "q-learning-online"])
def test_a_controller_without_a_file_for_the_device_names_the_devices_that_have_one(controller, spawn):
    child = spawn("--port", "0", "--engine", "memory", "--device", "none", "--controller", controller)
    assert child.finish() == 1, child.text()
    err = "".join(child.err)
    assert err.startswith(f"nvmw serve: error: --controller {controller} ") and err.count("\n") == 1, err
    assert "none is shipped for --device none: use --device optane-1dimm" in err, err
    if controller.startswith("q-learning"):
        assert f"or --controller {controller}:FILE with an agent trained by `nvmw train`" in err, err
    assert "--agent" not in err and "--oracle" not in err, err  # options serve does not have
    # The --device named works.
    child = spawn("--port", "0", "--engine", "memory", "--device", "optane-1dimm", "--controller", controller)
    child.wait_for(r"listening on")
    assert child.signal(signal.SIGTERM) == 0, child.text()


def polled_turns(port: int, mport: int) -> tuple:
    """The server's polled_turns as NVMW.STATS and the metrics endpoint give it."""
    import json
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        f = s.makefile("rb")
        s.sendall(b"NVMW.STATS\r\n")
        n = int(f.readline()[1:])
        stats = json.loads(f.read(n + 2)[:n])
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
        line = [ln for ln in r.read().decode().splitlines() if ln.startswith("nvmw_server_polled_turns_total ")]
    assert len(line) == 1, line
    return stats["server"]["polled_turns"], float(line[0].split()[1])


@pytest.mark.parametrize("poll_us", [0, 1000000])
def test_a_polling_server_serves_drains_and_counts_its_polled_turns(poll_us, spawn):
    # --poll-us at its longest: after each turn with work the loop polls up to a second
    # (while the machine has a core to spare) and still answers, and drains on SIGTERM.
    # The turns whose work polling found are counted (none without --poll-us; with it,
    # as many as the machine's load allowed).
    child = spawn("--port", "0", "--engine", "memory", "--poll-us", str(poll_us), "--metrics-port", "0")
    port = int(child.wait_for(r"listening on \S+:(\d+)").group(1))
    mport = int(child.wait_for(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
    for _ in range(3):
        assert command("127.0.0.1", port, b"SET k v", b"EXISTS k", b"DEL k", b"EXISTS k") == [
            b"+OK\r\n", b":1\r\n", b":1\r\n", b":0\r\n"]
    in_stats, in_metrics = polled_turns(port, mport)
    if poll_us == 0:
        assert in_stats == 0 and in_metrics == 0
    assert child.signal(signal.SIGTERM) == 0, child.text()
    assert "drained and closed (13 commands, 4 connections)" in "".join(child.out), child.text()
    assert_no_traceback(child)


@pytest.mark.parametrize("value", ["-1", "1000001", "20.5"])
def test_a_poll_time_out_of_range_is_a_usage_error(value):
    proc = subprocess.run([sys.executable, "-m", "nvmw", "serve", "--engine", "memory", "--poll-us", value],
                          env=child_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "argument --poll-us" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "unrecognized" not in proc.stderr, proc.stderr
