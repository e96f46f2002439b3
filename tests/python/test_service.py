"""nvmw.lab.service.Service in-process, with a stand-in for the network server: the
controller runs after every window through the control loop, the metrics are valid
Prometheus text with the live values, stop() drains the server before the middleware,
and the server gets exactly the limits it was given. (The real server with real clients:
test_serve.py.)"""
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from nvmw import _core
from nvmw.cli import main
from nvmw.control.loop import INFO_KEYS
from nvmw.errors import InvalidArgumentError, NotSupportedError, ShutdownError
from nvmw.lab.service import Service, run_until_signal


class StubServer:
    """Records how the service drives it; its stop() checks the middleware still serves."""

    def __init__(self, middleware, engine, **kw):
        self.middleware, self.engine, self.kw = middleware, engine, kw
        self.port = kw["port"] or 40001
        self.events = []
        self.stopped_with_middleware_running = None

    def start(self):
        self.events.append("start")

    def stop(self):
        self.events.append("stop")
        # A drain finishes in-flight commands: the middleware must still accept them here.
        self.middleware.put(b"in-flight", b"v", 2)
        self.stopped_with_middleware_running = True

    def stats(self):
        return {"connections_current": 2, "connections_total": 5, "rejected_connections": 1, "commands": 42,
                "protocol_errors": 0, "auth_failures": 3, "output_buffer_closes": 0}


def wait_until(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def metric(text: str, line_prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_prefix + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(line_prefix)


def test_controller_decides_after_every_window():
    calls = []

    def controller(obs, info):
        calls.append(dict(info))
        return (3, 2)

    rows = []
    svc = Service(engine="memory", window_s=0.05, controller=controller, port=0, server_factory=StubServer,
                  on_window=rows.append)
    svc.start()
    try:
        assert wait_until(lambda: len(calls) >= 3)
        # A controller with no starting point starts at 15/15: the limits of the first
        # window (read from it: by now the controller's decision may have replaced them).
        assert calls[0]["threads"] == [15, 15]
        assert wait_until(lambda: svc.mw.threads == (3, 2))
        assert set(calls[0]) == set(INFO_KEYS)
        assert calls[0]["control"] is True and calls[0]["window_s"] == 0.05
        assert wait_until(lambda: any(r["threads"] == [3, 2] for r in rows))
        assert rows[0]["seq"] >= 1
    finally:
        svc.stop()


def test_stop_drains_the_server_before_the_middleware():
    svc = Service(engine="memory", window_s=0.05, port=0, server_factory=StubServer)
    svc.start()
    server, mw = svc.server, svc.mw
    assert server.events == ["start"]
    assert server.kw["bind"] == "127.0.0.1" and server.kw["password"] == ""
    final = svc.stop()
    assert server.events == ["start", "stop"]
    assert server.stopped_with_middleware_running
    assert final["commands"] == 42
    assert svc.mw is None and svc.server is None
    with pytest.raises(ShutdownError):
        mw.put(b"after", b"v")  # closed
    assert svc.stop() == final  # idempotent


def test_only_given_limits_reach_the_server():
    svc = Service(engine="memory", port=0, max_clients=7, io_threads=2, server_factory=StubServer)
    svc.start()
    try:
        kw = svc.server.kw
        assert kw["max_clients"] == 7 and kw["io_threads"] == 2
        assert "max_bulk_bytes" not in kw and "max_args" not in kw and "max_output_bytes" not in kw
    finally:
        svc.stop()


def test_metrics_are_valid_prometheus_text_with_live_values():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: scripts/setup.sh installs it (Debian package prometheus)")
    svc = Service(engine="memory", window_s=0.05, controller="fixed:4,3", port=0, server_factory=StubServer)
    svc.start()
    try:
        for n in range(300):
            svc.mw.put(f"b{n}".encode(), b"x", cls="batch")
        assert wait_until(lambda: metric(svc.metrics_text().decode(),
                                         'nvmw_request_latency_seconds_count{class="batch"}') >= 300)
        text = svc.metrics_text().decode()
    finally:
        svc.stop()
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert metric(text, 'nvmw_thread_limit{class="interactive"}') == 4
    assert metric(text, 'nvmw_thread_limit{class="batch"}') == 3
    assert metric(text, "nvmw_server_commands_total") == 42
    assert metric(text, "nvmw_server_connections") == 2
    assert metric(text, "nvmw_server_auth_failures_total") == 3
    assert metric(text, "nvmw_windows_total") >= 1
    assert metric(text, 'nvmw_request_latency_seconds{class="batch",quantile="0.99"}') >= 0
    assert 'controller="fixed-I4B3"' in text and 'engine="memory"' in text


def test_metric_counts_include_the_windows_a_slow_controller_did_not_read():
    # The control loop reads only the last closed window; one that takes longer than a
    # window skips some. The counts since start must still hold every request.
    slow = lambda row: time.sleep(0.25)  # noqa: E731  (5 windows of 0.05 s per read)
    svc = Service(engine="memory", window_s=0.05, controller="fixed:4,3", port=0, server_factory=StubServer,
                  on_window=slow)
    svc.start()
    try:
        for n in range(40):  # spread over about 40 windows
            for k in range(5):
                svc.mw.put(f"b{n}.{k}".encode(), b"x", cls="batch")
            time.sleep(0.05)
        svc.mw.put(b"i", b"x", cls="interactive")
        assert wait_until(lambda: metric(svc.metrics_text().decode(),
                                         'nvmw_request_latency_seconds_count{class="all"}') >= 201)
        text = svc.metrics_text().decode()
    finally:
        svc.stop()
    assert metric(text, 'nvmw_request_latency_seconds_count{class="batch"}') == 200
    assert metric(text, 'nvmw_request_latency_seconds_count{class="interactive"}') == 1
    assert metric(text, 'nvmw_request_latency_seconds_sum{class="batch"}') > 0
    # windows closed, whether or not the controller judged them
    assert metric(text, "nvmw_windows_total") > metric(text, 'nvmw_sla_windows_met_total{goal="latency"}')


def test_no_control_reports_no_limits():
    svc = Service(engine="memory", window_s=0.05, controller="none", port=0, server_factory=StubServer)
    svc.start()
    try:
        assert svc.mw.control is False
        assert wait_until(lambda: svc.window() is not None)
        assert metric(svc.metrics_text().decode(), 'nvmw_thread_limit{class="interactive"}') == 0
    finally:
        svc.stop()


def test_metrics_endpoint_over_http():
    svc = Service(engine="memory", window_s=0.05, port=0, metrics_port=0, server_factory=StubServer)
    svc.start()
    try:
        url = f"http://127.0.0.1:{svc.metrics_port}"
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain")
            assert b"nvmw_server_commands_total 42.0" in r.read()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "/other", timeout=10)
        assert e.value.code == 404
        e.value.close()
    finally:
        svc.stop()


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while True:
        chunk = sock.recv(65536)  # the socket's timeout bounds the wait
        if not chunk:
            return data
        data += chunk


def test_metrics_endpoint_drops_a_silent_connection():
    svc = Service(engine="memory", window_s=0.05, port=0, metrics_port=0, server_factory=StubServer)
    svc.metrics_idle_timeout_s = 0.2
    svc.start()
    try:
        with socket.create_connection(("127.0.0.1", svc.metrics_port), timeout=30) as half:
            half.sendall(b"GET /met")  # half a request line, then nothing
            assert _read_until_closed(half) == b""
        with urllib.request.urlopen(f"http://127.0.0.1:{svc.metrics_port}/metrics", timeout=10) as r:
            assert r.status == 200
    finally:
        svc.stop()


def test_metrics_endpoint_bounds_its_connections():
    svc = Service(engine="memory", window_s=0.05, port=0, metrics_port=0, server_factory=StubServer)
    svc.metrics_max_connections = 2
    svc.start()
    try:
        addr = ("127.0.0.1", svc.metrics_port)
        idle = [socket.create_connection(addr, timeout=30) for _ in range(2)]
        # Accepted after the two idle ones (the listen queue is FIFO): no slot is left.
        with socket.create_connection(addr, timeout=30) as extra:
            extra.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            assert _read_until_closed(extra) == b""
        for sock in idle:
            sock.close()

        def scrape_works() -> bool:
            try:
                with urllib.request.urlopen(f"http://{addr[0]}:{addr[1]}/metrics", timeout=10) as r:
                    return r.status == 200
            except (urllib.error.URLError, ConnectionError):
                return False
        assert wait_until(scrape_works)
    finally:
        svc.stop()


def test_a_core_without_a_server_is_a_clear_error(monkeypatch):
    monkeypatch.delattr(_core, "Server", raising=False)
    with pytest.raises(NotSupportedError, match="no network server"):
        Service(engine="memory", port=0).start()


def test_serve_refuses_bad_numbers(capsys):
    for argv in (["serve", "--port", "70000"], ["serve", "--metrics-port", "-1"], ["serve", "--max-clients", "0"],
                 ["serve", "--window", "0"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert "out of range" in capsys.readouterr().err


def test_serve_refuses_an_unknown_controller(capsys):
    with pytest.raises(SystemExit) as e:  # a usage error, before anything starts
        main(["serve", "--engine", "memory", "--controller", "bogus"])
    assert e.value.code == 2
    assert "unknown controller" in capsys.readouterr().err


def test_serve_refuses_a_path_for_the_memory_engine(tmp_path):
    # It served from memory and named the path as its store: every SET was lost at exit.
    pool = tmp_path / "kept.pool"
    done = subprocess.run([sys.executable, "-m", "nvmw", "serve", "--engine", "memory", "--path", str(pool),
                           "--port", "0"], env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("nvmw serve: error: --path is the pool of --engine pmem; --engine memory keeps "
                                  "the store in memory, lost at exit"), done.stderr
    assert "listening" not in done.stdout and not pool.exists()


def test_a_controller_that_raises_is_dropped_and_the_windows_go_on(capsys):
    calls = []

    def controller(obs, info):
        calls.append(1)
        if len(calls) == 1:
            return (4, 3)
        raise RuntimeError("model failed")

    svc = Service(engine="memory", window_s=0.05, controller=controller, port=0, server_factory=StubServer)
    svc.start()
    try:
        assert wait_until(lambda: svc.controller_failed)
        seq = svc.window()["stats"]["seq"]
        assert wait_until(lambda: svc.window()["stats"]["seq"] >= seq + 3)  # still judged and counted
        assert len(calls) == 2  # not asked again
        assert svc.mw.threads == (4, 3)  # its last decision kept
        text = svc.metrics_text().decode()
        assert metric(text, "nvmw_controller_failed") == 1.0
        assert metric(text, "nvmw_thread_limit{class=\"interactive\"}") == 4.0
    finally:
        svc.stop()
    err = capsys.readouterr().err
    assert err == "nvmw serve: controller callable failed, limits kept at (4, 3) from now on: " \
                  "RuntimeError: model failed\n"


def test_run_until_signal_does_not_start_after_a_stop():
    stop = threading.Event()
    stop.set()
    svc = Service(engine="memory", port=0, server_factory=StubServer)
    assert run_until_signal(svc, on_start=lambda s: pytest.fail("announced"), stop=stop) == {}
    assert not svc.served and svc.server is None


def test_a_service_starts_once():
    # A second start() opened a second store and server beside the first (which nothing
    # stopped any more), and one after stop() served again with a stop() that returned
    # at once and left it serving.
    svc = Service(engine="memory", port=0, server_factory=StubServer)
    svc.start()
    first = svc.server
    with pytest.raises(RuntimeError, match="a Service starts once: this one was started already"):
        svc.start()
    assert svc.server is first and first.events == ["start"]
    final = svc.stop()
    assert first.events == ["start", "stop"] and final["commands"] == 42
    with pytest.raises(RuntimeError, match="a Service starts once: this one was stopped"):
        svc.start()
    assert svc.server is None and svc.mw is None
    assert svc.stop() == final


class SlowStartServer(StubServer):
    """A stub whose start() waits until the test lets it go."""

    entered = threading.Event()
    release = threading.Event()

    def start(self):
        self.events.append("start")
        SlowStartServer.entered.set()
        assert SlowStartServer.release.wait(30)
        self.events.append("started")


def test_stop_from_another_thread_during_start_drains_what_start_started():
    # stop() while start() ran stopped the server start() was still starting and closed
    # the middleware under it; start() then went on and ran the control thread on a loop
    # stop() had dropped.
    SlowStartServer.entered.clear()
    SlowStartServer.release.clear()
    svc = Service(engine="memory", port=0, server_factory=SlowStartServer)
    starter = threading.Thread(target=svc.start)
    starter.start()
    assert SlowStartServer.entered.wait(30)
    server = svc.server
    stopper = threading.Thread(target=svc.stop)
    stopper.start()
    stopper.join(0.2)  # gives stop() its chance to run before start() is done
    SlowStartServer.release.set()
    starter.join(30)
    stopper.join(30)
    assert not starter.is_alive() and not stopper.is_alive()
    assert server.events == ["start", "started", "stop"]
    assert svc.controller_failed is False
    assert svc.server is None and svc.mw is None and svc._control_thread is not None
    assert not svc._control_thread.is_alive()


def test_stop_from_the_window_callback(capsys):
    # A stop() from on_window, on the control thread, tried to join that thread: it raised,
    # was taken for a failing window log, and left the metrics endpoint serving.
    # What it stops is read in the callback: after start() returns, the first window may
    # already have stopped the service (a caller descheduled for a window and the drain).
    stopped = threading.Event()
    seen = {}

    def on_window(row):
        seen.update(server=svc.server, metrics_port=svc.metrics_port)
        svc.stop()
        stopped.set()

    svc = Service(engine="memory", window_s=0.05, port=0, server_factory=StubServer, metrics_port=0,
                  on_window=on_window)
    svc.start()
    assert stopped.wait(30)
    server, metrics_port = seen["server"], seen["metrics_port"]
    assert server.events == ["start", "stop"]
    assert svc.server is None and svc.mw is None
    assert wait_until(lambda: not svc._control_thread.is_alive())
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", metrics_port), timeout=5)
    assert capsys.readouterr().err == ""


def test_stop_from_the_window_callback_while_another_thread_stops():
    # A stop() on another thread holds start/stop's lock while it joins the control
    # thread; a stop() from on_window, on that thread, then waited for the same lock:
    # neither returned.
    in_callback = threading.Event()
    returned = threading.Event()

    def on_window(row):
        if in_callback.is_set():
            return
        in_callback.set()
        # Until the other thread's stop() is under way (it marks the service stopped
        # before it joins this thread).
        assert wait_until(lambda: svc._stopped)
        svc.stop()
        returned.set()

    svc = Service(engine="memory", window_s=0.05, port=0, server_factory=StubServer,
                  on_window=on_window)
    svc.start()
    server = svc.server
    assert in_callback.wait(30)
    stopper = threading.Thread(target=svc.stop)
    stopper.start()
    stopper.join(30)
    assert not stopper.is_alive()
    assert returned.is_set()
    assert server.events == ["start", "stop"]
    assert not svc._control_thread.is_alive()


@pytest.mark.parametrize("kw, error, message", [
    ({"port": 1 << 40}, InvalidArgumentError, r"port must be an integer in \[0, 65535\], got 1099511627776"),
    ({"metrics_port": 70000}, InvalidArgumentError, r"metrics_port must be an integer in \[0, 65535\]"),
    ({"max_clients": -1}, InvalidArgumentError, r"max_clients must be an integer in \[0, 2\^64-1\], got -1"),
    ({"max_bulk_bytes": 1 << 70}, InvalidArgumentError, r"max_bulk_bytes must be an integer in \[0, 2\^64-1\]"),
    ({"io_threads": 1 << 40}, InvalidArgumentError, r"io_threads must be an integer in \[-2\^31, 2\^31-1\]"),
    ({"max_args": 2.5}, InvalidArgumentError, r"max_args must be an integer, got 2.5"),
    ({"port": "6379"}, TypeError, r"port must be an integer, not str"),
    ({"protected_mode": "yes"}, TypeError, r"protected_mode must be True or False, got 'yes'"),
])
def test_service_arguments_outside_their_type_are_refused_naming_them(kw, error, message):
    # They reached the server's binding, whose TypeError listed its signatures without
    # naming the argument (or, for the metrics port, an OverflowError from bind()).
    with pytest.raises(error, match=message):
        Service(engine="memory", **kw)


def test_service_limits_reach_the_server_as_given():
    svc = Service(engine="memory", port=0, server_factory=StubServer, max_clients=5.0,
                  io_threads=2, protected_mode=False)
    assert svc.limits == {"max_clients": 5, "io_threads": 2, "protected_mode": False}
