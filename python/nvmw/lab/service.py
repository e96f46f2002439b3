"""The nvmw service: the middleware behind a Redis-protocol (RESP) network server.

`Service` opens an engine and a `Middleware`, starts the C++ server (`_core.Server`, one
more client of the library: each GET/SET/DEL becomes a middleware request of the
connection's class), runs a controller after every monitor window with the one control
loop (`nvmw.control.loop.ControlLoop`) on the middleware's own window statistics, and
optionally serves Prometheus text metrics over HTTP. `stop()` drains: the server stops
accepting, answers every command it has read, the middleware finishes every accepted
request and the engine is released, so every acknowledged SET is durable (pmem engine).
`run_until_signal` is the foreground life of `nvmw serve`: SIGTERM, SIGINT or SIGHUP
drains (`stop_signals`).

A controller that raises is dropped, not the service: one line on stderr, the limits stay
where its last decision left them (as a fixed controller would keep them), the windows
are still judged, logged and exported, and `nvmw_controller_failed` turns 1."""
from __future__ import annotations

import contextlib
import http.server
import math
import socket
import sys
import threading
from typing import Any, Callable, Iterator, Mapping, Optional

import numpy as np

from nvmw import _core
from nvmw.control.loop import ControlLoop, Reading
from nvmw.control.sla import SLASpec, load_spec
from nvmw.errors import NotSupportedError, ShutdownError, StorageIOError
from nvmw.lab.lineup import ControllerContext, make_controller
from nvmw.middleware import _INT64, _UINT64, Middleware, _c_int, _flag
from nvmw.stop_signals import STOP_SIGNALS, StopSignals

#: A TCP port's range, as the core's integer-type ranges (nvmw.middleware) are written.
_PORT = (0, 65535, "[0, 65535]")


def _size(name: str, value: Any) -> int:
    """`value` as the core's size_t / uint64_t option `name`, or an error naming it."""
    return _c_int(name, value, _UINT64)


def _c_int64(name: str, value: Any) -> int:
    """`value` as the core's int64_t option `name`, or an error naming it."""
    return _c_int(name, value, _INT64)


#: Where the pools start when the controller states no starting point of its own
#: (the thesis's fixed baseline, as phase runs do).
DEFAULT_START = (15, 15)
#: The controller a service runs unless told otherwise.
DEFAULT_CONTROLLER = "fixed:15,15"
#: The request classes the metrics report, as the window stats name them.
STAT_CLASSES = ("interactive", "batch", "all")
#: The latency quantiles of each window (stats key, quantile label).
QUANTILES = (("p50_us", "0.5"), ("p99_us", "0.99"), ("p999_us", "0.999"))
#: The server options passed through to `_core.Server` when given (None: the server's default).
SERVER_LIMITS = ("max_clients", "max_bulk_bytes", "max_args", "max_output_bytes", "io_threads",
                 "batch_io_threads", "batch_io_idle", "protected_mode", "group_commit", "group_min_ready",
                 "poll_ns")


class _MiddlewarePlant:
    """The running middleware as a plant of the control loop: each read blocks until the
    monitor closes the next window (no workload of its own: the network clients are)."""

    def __init__(self, mw: Middleware, timeout_s: float):
        self.mw = mw
        self.timeout_s = timeout_s
        self.seq = int(mw.get_stats()["seq"])

    def apply_threads(self, interactive: int, batch: int) -> None:
        self.mw.set_threads(interactive, batch)

    def read_window(self) -> Reading:
        stats = self.mw.wait_for_window(self.seq, self.timeout_s)
        self.seq = int(stats["seq"])
        state = list(self.mw.get_state())
        if not self.mw.control:
            state[0], state[1] = 0.0, 0.0  # no pools in no-control mode
        return Reading(obs=np.maximum(np.asarray(state, dtype=np.float64), 0.0), stats=stats)


class _Totals:
    """Counts since start (Prometheus counters): the request counts are the middleware's
    own sums over every closed window (the control loop reads only the last window, and
    one slower than the window misses some); the SLA counts are over the windows judged."""

    def __init__(self) -> None:
        self.windows = 0
        self.windows_met = {"latency": 0, "throughput": 0, "both": 0}
        self.ops = {c: 0 for c in STAT_CLASSES}
        self.latency_sum_s = {c: 0.0 for c in STAT_CLASSES}
        self.errors = {c: 0 for c in STAT_CLASSES}
        self.rejected = {c: 0 for c in STAT_CLASSES}

    def add(self, totals: Mapping[str, Any], latency_met: bool, throughput_met: bool) -> None:
        """One judged window; `totals`: `Middleware.totals()` read after it."""
        self.windows = int(totals["all"]["windows"])
        self.windows_met["latency"] += int(latency_met)
        self.windows_met["throughput"] += int(throughput_met)
        self.windows_met["both"] += int(latency_met and throughput_met)
        for c in STAT_CLASSES:
            t = totals[c]
            self.ops[c] = int(t["ops"])
            self.latency_sum_s[c] = float(t["latency_s"])
            self.errors[c] = int(t["errors"])
            self.rejected[c] = int(t["rejected"])


class Service:
    """The middleware served over RESP on `bind`:`port` (0: an ephemeral port).

    engine, path, device, window_s: the store (as `nvmw.Middleware` takes them).
    controller: a controller name (`nvmw.lab.lineup`) or object, run after every window.
    sla: the SLA spec judging each window (name, path or `SLASpec`; default the
        calibrated spec for `device`, the thesis's for the raw engine).
    metrics_port: None for no metrics endpoint, 0 for an ephemeral port, else the port of
        the HTTP endpoint serving Prometheus text metrics at /metrics (on `bind`).
    max_clients ... io_threads: the server's limits (None: its defaults).
    batch_io_threads, batch_io_idle: the server's loops for batch connections and whether
        they run under SCHED_IDLE (None: the server's defaults; docs/server.md).
    protected_mode: without a password, answer clients that are not on loopback with
        one -DENIED line and close them, as Redis does (None: the server's default, on).
    group_commit: make the small SETs read in one busy turn of the server's loop durable
        together, one publish per group (None: the server's default, on; docs/server.md).
    group_min_ready: how many ready connections make a turn busy enough to gather in
        (None: the server's default, 8).
    poll_ns: how long an interactive loop polls for work after a turn with work before it
        sleeps, while the machine has a core to spare (None: the server's default, 0,
        never; docs/server.md, "Polling").
    batch_nice: CPU niceness (0..19) the middleware's batch workers add to the server's
        own (`nvmw.Middleware`'s `batch_nice`). 19 by default: the interactive requests
        run on the network loop at the server's priority, and when the cores are short
        it and its clients run before the batch workers' copies of large values, as they
        do before the batch loops (SCHED_IDLE); beside other normal-priority work batch
        writes can nearly stop (docs/server.md, "Batch workers at nice 19"). 0 keeps them
        at the server's priority.
    on_window: called with one summary row per closed window (from the control thread).
    server_factory: what builds the server, called as `_core.Server` is (default
        `_core.Server`); another RESP front end, or a stand-in in tests, can be put here.
    """

    def __init__(self, *, engine: str = "memory", path: Optional[str] = None, device: Optional[str] = None,
                 window_s: float = 1.0, controller: Any = DEFAULT_CONTROLLER, sla: Any = None,
                 bind: str = "127.0.0.1", port: int = 6379, password: str = "",
                 metrics_port: Optional[int] = None, pool_size: int = 1 << 30, max_threads: int = 32,
                 max_clients: Optional[int] = None, max_bulk_bytes: Optional[int] = None,
                 max_args: Optional[int] = None, max_output_bytes: Optional[int] = None,
                 io_threads: Optional[int] = None, batch_io_threads: Optional[int] = None,
                 batch_io_idle: Optional[bool] = None, protected_mode: Optional[bool] = None,
                 group_commit: Optional[bool] = None, group_min_ready: Optional[int] = None,
                 poll_ns: Optional[int] = None, batch_nice: int = 19, huge_pages: bool = True,
                 on_window: Optional[Callable[[dict], None]] = None,
                 server_factory: Optional[Callable[..., Any]] = None):
        self.device = device or "none"
        self.sla = sla if isinstance(sla, SLASpec) else load_spec(sla, device=self.device)
        self.controller = make_controller(controller, ControllerContext(sla=self.sla, device=self.device))
        self.controller_name = getattr(self.controller, "name", str(controller))
        self.control = bool(getattr(self.controller, "requires_control", True))
        self.engine_name = engine
        self.path = path
        self.window_s = float(window_s)
        self.bind = bind
        self._port = _c_int("port", port, _PORT)
        self.password = password or ""
        self._metrics_port = None if metrics_port is None else _c_int("metrics_port", metrics_port, _PORT)
        self.pool_size = int(pool_size)
        self.max_threads = int(max_threads)
        self.batch_nice = int(batch_nice)
        self.huge_pages = huge_pages
        if not 0 <= self.batch_nice <= 19:
            raise ValueError(f"batch_nice must be in [0, 19], not {batch_nice}")
        # Each checked against its type in the core here (naming it); the server checks
        # its own ranges when it starts.
        self.limits = {k: check(k, v) for k, v, check in (
            ("max_clients", max_clients, _size), ("max_bulk_bytes", max_bulk_bytes, _size),
            ("max_args", max_args, _size), ("max_output_bytes", max_output_bytes, _size),
            ("io_threads", io_threads, _c_int), ("batch_io_threads", batch_io_threads, _c_int),
            ("batch_io_idle", batch_io_idle, _flag),
            ("protected_mode", protected_mode, _flag),
            ("group_commit", group_commit, _flag),
            ("group_min_ready", group_min_ready, _c_int),
            ("poll_ns", poll_ns, _c_int64)) if v is not None}
        self.on_window = on_window
        self.server_factory = server_factory
        self.mw: Optional[Middleware] = None
        self.server = None
        self.loop: Optional[ControlLoop] = None
        self._lock = threading.Lock()
        self._last: Optional[dict] = None
        self._totals = _Totals()
        self._control_thread: Optional[threading.Thread] = None
        self._control_error: Optional[BaseException] = None
        self._http: Optional[http.server.ThreadingHTTPServer] = None
        self._http_thread: Optional[threading.Thread] = None
        self._final_stats: Optional[dict] = None
        # start() and stop() one at a time: a stop() from another thread while start()
        # runs waits for it, then drains what it started.
        self._life = threading.RLock()
        self._started = False
        self._stopped = False
        #: True once the server has started listening.
        self.served = False

    # -- lifetime ----------------------------------------------------------------------------
    def start(self) -> "Service":
        """Open the store, start the server, the control thread and the metrics endpoint.
        A service starts once: a second start(), or one after stop(), raises RuntimeError
        (make a new Service to serve again)."""
        with self._life:
            if self._started or self._stopped:
                raise RuntimeError("a Service starts once: this one was " +
                                   ("stopped" if self._stopped else "started already") +
                                   "; make a new Service to serve again")
            self._started = True
            try:
                return self._start()
            except BaseException:
                self._stop()
                raise

    def _start(self) -> "Service":
        factory = self.server_factory or getattr(_core, "Server", None)
        if factory is None:
            raise NotSupportedError("this build of nvmw._core has no network server (_core.Server): "
                                    "rebuild and reinstall nvmw")
        start = getattr(self.controller, "initial_threads", None) or DEFAULT_START
        self.controller.reset()
        self.mw = Middleware(self.path, engine=self.engine_name, interactive_threads=start[0],
                             batch_threads=start[1], max_threads=self.max_threads, window_s=self.window_s,
                             control=self.control, pool_size=self.pool_size,
                             device=None if self.device == "none" else self.device,
                             batch_nice=self.batch_nice, huge_pages=self.huge_pages)
        self.loop = ControlLoop(_MiddlewarePlant(self.mw, max(1.0, 5 * self.window_s)), self.sla,
                                max_threads=self.max_threads, control=self.control)
        self.loop.restart(start)
        self.server = factory(self.mw.core, self.mw.engine, bind=self.bind, port=self._port,
                              password=self.password, **self.limits)
        self.server.start()
        self.served = True
        if self._metrics_port is not None:
            self._start_metrics()
        # Last: once the control thread runs, an on_window that stops the service finds
        # everything start() makes in place.
        self._control_thread = threading.Thread(target=self._control_run, name="nvmw-control", daemon=True)
        self._control_thread.start()
        return self

    def stop(self) -> dict:
        """Graceful drain: stop accepting connections, answer every command already read,
        finish every accepted middleware request, stop the control thread and the metrics
        endpoint, release the engine. Returns the server's final stats. Idempotent; from
        another thread while start() runs, it waits for start() and drains what it started;
        from on_window too."""
        if threading.current_thread() is self._control_thread:
            # From on_window. start() has nothing left to do once this thread runs, and a
            # stop() on another thread may hold the lock while it joins this very thread.
            return self._stop()
        with self._life:
            return self._stop()

    def _stop(self) -> dict:
        with self._lock:
            if self._stopped:
                return dict(self._final_stats or {})
            self._stopped = True
        if self.server is not None:
            self.server.stop()
            self._final_stats = dict(self.server.stats())
        if self.mw is not None:
            self.mw.close()  # wakes the control thread (ShutdownError) and finishes accepted requests
        if self._control_thread is not None and self._control_thread is not threading.current_thread():
            self._control_thread.join()  # (from on_window, on that thread: it ends once this returns)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http_thread.join()
        # Drop every reference to the engine: the pool is closed when the last one goes.
        self.server = None
        self.mw = None
        self.loop = None
        return dict(self._final_stats or {})

    def __enter__(self) -> "Service":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port the server listens on (the ephemeral one when started with port 0)."""
        return int(self.server.port) if self.server is not None else self._port

    @property
    def metrics_port(self) -> Optional[int]:
        return self._http.server_address[1] if self._http is not None else None

    @property
    def address(self) -> str:
        """BIND:PORT, an IPv6 address in brackets ([::1]:6379)."""
        return f"{_host(self.bind)}:{self.port}"

    @property
    def controller_failed(self) -> bool:
        """True once the controller has raised (its limits are then kept; `_control_run`)."""
        return self._control_error is not None

    # -- control -----------------------------------------------------------------------------
    def _control_run(self) -> None:
        """After every window: judge it with the SLA spec, hand it to the controller, apply
        its decision (the same loop phase runs and the evaluation use). A controller that
        raises is not asked again: the limits stay where they are, and the windows are still
        judged, logged and counted (the metrics stay live, `nvmw_controller_failed` is 1)."""
        loop, mw = self.loop, self.mw  # stop() drops the attributes, maybe while this runs
        while True:
            try:
                w = loop.read()
            except StorageIOError:  # no window within the timeout: ask again
                continue
            except ShutdownError:
                return
            except Exception as e:  # nothing left to read windows with
                self._control_error = e
                _log(f"reading the monitor window failed, limits kept at {loop.threads} and no more "
                     f"windows reported: {_one_line(e)}")
                return
            try:
                totals = mw.totals()
            except ShutdownError:
                return
            m = w.metrics
            threads = list(w.threads) if self.control else [0, 0]
            info = {"stats": w.stats, "p99_us": m.p99_us, "throughput": m.throughput,
                    "offered_ops_per_s": float("nan"), "phase": -1, "threads": threads,
                    "window_s": self.window_s, "sla_latency_met": m.latency_met,
                    "sla_throughput_met": m.throughput_met, "control": self.control}
            with self._lock:
                self._totals.add(totals, m.latency_met, m.throughput_met)
                self._last = {"stats": w.stats, "metrics": m, "threads": threads}
            if self.on_window is not None:
                try:
                    self.on_window(window_row(w.stats, m, threads))
                except Exception as e:  # a log that cannot be written stops, not the control
                    self.on_window = None
                    _log(f"window log stopped: {_one_line(e)}")
            if self._control_error is not None:
                continue  # the controller failed: the limits stay
            try:
                loop.apply(self.controller.act(w.obs, info))
            except ShutdownError:
                return
            except Exception as e:  # any controller failure: keep the last limits
                self._control_error = e
                _log(f"controller {self.controller_name} failed, limits kept at {loop.threads} from now "
                     f"on: {_one_line(e)}")

    def window(self) -> Optional[dict]:
        """The last closed window: {"stats", "metrics", "threads"} (None before the first)."""
        with self._lock:
            return None if self._last is None else dict(self._last)

    def server_stats(self) -> dict:
        server = self.server  # once: stop() may drop it meanwhile (a scrape during the drain)
        if server is not None:
            return dict(server.stats())
        return dict(self._final_stats or {})

    # -- metrics -----------------------------------------------------------------------------
    def metrics_text(self) -> bytes:
        """Prometheus text exposition of the service's metrics (what /metrics serves)."""
        from prometheus_client import generate_latest
        from prometheus_client.registry import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        return generate_latest(registry)

    #: Seconds a metrics connection may stay silent (no complete request) before it is closed.
    metrics_idle_timeout_s = 10.0
    #: Metrics connections served at once; more are closed at once (a scraper retries).
    metrics_max_connections = 32

    def _start_metrics(self) -> None:
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            # A connection that sends nothing, or half a request line, is dropped after
            # this long instead of holding its handler thread for as long as the peer likes.
            timeout = service.metrics_idle_timeout_s

            def do_GET(self) -> None:  # noqa: N802 (http.server's spelling)
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                from prometheus_client import CONTENT_TYPE_LATEST
                body = service.metrics_text()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        try:
            self._http = _MetricsHTTPServer((self.bind, int(self._metrics_port)), Handler,
                                            max_connections=self.metrics_max_connections)
        except OSError as e:  # the port taken (the server's own, another process), or no such address
            raise OSError(f"metrics endpoint {_host(self.bind)}:{self._metrics_port}: "
                          f"{e.strerror or e}") from None
        self._http_thread = threading.Thread(target=self._http.serve_forever, name="nvmw-metrics", daemon=True)
        self._http_thread.start()


class _MetricsHTTPServer(http.server.ThreadingHTTPServer):
    """The metrics endpoint's HTTP server: a thread per connection, as many as
    `max_connections` at once. Beyond that a new connection is closed unanswered, so a
    flood of idle connections costs a bounded number of threads."""

    daemon_threads = True

    def __init__(self, address, handler, max_connections: int):
        self._slots = threading.BoundedSemaphore(max_connections)
        if ":" in address[0]:  # an IPv6 address, as the server takes them
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def handle_error(self, request, client_address) -> None:
        """A scraper that goes away mid-reply is no error of the service; anything else is
        one line on stderr (socketserver would print a traceback per connection)."""
        e = sys.exc_info()[1]
        if isinstance(e, (ConnectionError, TimeoutError)):
            return
        _log(f"metrics request from {client_address[0]} failed: {_one_line(e)}")

    def verify_request(self, request, client_address) -> bool:
        return self._slots.acquire(blocking=False)

    def process_request(self, request, client_address) -> None:
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()  # no thread took the slot over
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _host(bind: str) -> str:
    """`bind` as the host part of an address or URL: an IPv6 address in brackets."""
    return f"[{bind}]" if ":" in bind else bind


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _log(message: str) -> None:
    print(f"nvmw serve: {message}", file=sys.stderr, flush=True)


def window_row(stats: Mapping[str, Any], metrics, threads) -> dict:
    """One printable summary of a window."""
    i, b = stats["interactive"], stats["batch"]
    return {"seq": int(stats["seq"]), "threads": list(threads), "ops_per_s": stats["all"]["ops_per_s"],
            "interactive_p99_us": i["p99_us"], "batch_ops_per_s": b["ops_per_s"],
            "batch_bytes_per_s": b["bytes_per_s"], "interactive_queue": i["queue_len_end"],
            "batch_queue": b["queue_len_end"], "rejected": stats["all"]["rejected"],
            "sla_latency_met": bool(metrics.latency_met), "sla_throughput_met": bool(metrics.throughput_met)}


class _Collector:
    """Builds the metric families from the service's state at scrape time."""

    def __init__(self, service: Service):
        self.service = service

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

        s = self.service
        with s._lock:
            last = None if s._last is None else dict(s._last)
            t = s._totals
            totals = {"windows": t.windows, "met": dict(t.windows_met), "ops": dict(t.ops),
                      "lat": dict(t.latency_sum_s), "errors": dict(t.errors), "rejected": dict(t.rejected)}
        info = GaugeMetricFamily("nvmw_service_info", "The service's configuration (value 1).",
                                 labels=["engine", "device", "controller", "sla"])
        info.add_metric([s.engine_name, s.device, s.controller_name, s.sla.name or "custom"], 1)
        yield info
        yield GaugeMetricFamily("nvmw_controller_failed", "1 once the controller has raised: it is not asked "
                                "again and the thread limits stay where they were.",
                                value=float(s.controller_failed))
        yield GaugeMetricFamily("nvmw_window_seconds", "Length of a monitor window.", value=s.window_s)

        lat = Metric("nvmw_request_latency_seconds", "Request latency (submit to completion, queueing "
                     "included): quantiles of the last closed window, count and sum since start.", "summary")
        for c in STAT_CLASSES:
            if last is not None:
                for key, q in QUANTILES:
                    lat.add_sample("nvmw_request_latency_seconds", {"class": c, "quantile": q},
                                   float(last["stats"][c][key]) / 1e6)
            lat.add_sample("nvmw_request_latency_seconds_count", {"class": c}, float(totals["ops"][c]))
            lat.add_sample("nvmw_request_latency_seconds_sum", {"class": c}, totals["lat"][c])
        yield lat

        per_class = (
            ("nvmw_throughput_ops_per_second", "Requests completed per second in the last window.", "ops_per_s"),
            ("nvmw_throughput_bytes_per_second", "Value bytes moved per second in the last window.", "bytes_per_s"),
            ("nvmw_queue_length", "Requests queued (not yet started) when the last window closed.", "queue_len_end"),
            ("nvmw_queue_length_mean", "Mean queue length over the last window.", "queue_len_mean"),
        )
        if last is not None:
            for name, doc, key in per_class:
                g = GaugeMetricFamily(name, doc, labels=["class"])
                for c in STAT_CLASSES:
                    g.add_metric([c], float(last["stats"][c][key]))
                yield g
            g = GaugeMetricFamily("nvmw_thread_limit", "Concurrency limit of the class (its threads, thesis "
                                  "Table 3.2); 0 in no-control mode.", labels=["class"])
            g.add_metric(["interactive"], float(last["threads"][0]))
            g.add_metric(["batch"], float(last["threads"][1]))
            yield g
            m = last["metrics"]
            yield GaugeMetricFamily("nvmw_sla_latency_met", "1 if the last window met the SLA's latency goal.",
                                    value=float(bool(m.latency_met)))
            yield GaugeMetricFamily("nvmw_sla_throughput_met", "1 if the last window met the SLA's "
                                    "throughput goal.", value=float(bool(m.throughput_met)))
            yield GaugeMetricFamily("nvmw_sla_reward", "The last window's reward (thesis Algorithm 1).",
                                    value=float(m.reward) if math.isfinite(m.reward) else 0.0)
        yield GaugeMetricFamily("nvmw_sla_latency_goal_seconds", f"The SLA's p99 goal for the "
                                f"{s.sla.latency_class} class.", value=s.sla.lat_goal / 1e6)
        yield GaugeMetricFamily("nvmw_sla_throughput_goal_ops_per_second", f"The SLA's throughput goal for "
                                f"the {s.sla.throughput_class} class.", value=float(s.sla.tp_goal))
        yield CounterMetricFamily("nvmw_windows", "Monitor windows closed since start.", value=totals["windows"])
        met = CounterMetricFamily("nvmw_sla_windows_met", "Windows that met the SLA's goal(s).", labels=["goal"])
        for goal, n in totals["met"].items():
            met.add_metric([goal], n)
        yield met
        for name, doc, key in (("nvmw_rejected_requests", "Requests refused with Overloaded (queue full).",
                                "rejected"),
                               ("nvmw_request_errors", "Requests that completed with an error.", "errors")):
            f = CounterMetricFamily(name, doc, labels=["class"])
            for c in STAT_CLASSES:
                f.add_metric([c], totals[key][c])
            yield f

        stats = s.server_stats()
        for key, value in sorted(stats.items()):
            if not isinstance(value, (int, float)):
                continue
            name = "nvmw_server_" + key
            if key.endswith("_current"):
                yield GaugeMetricFamily(name[: -len("_current")], f"Server: {key.replace('_', ' ')}.",
                                        value=float(value))
            elif key.endswith("_peak_bytes"):  # a high-water mark: a gauge, not a count
                yield GaugeMetricFamily(name, f"Server: {key.replace('_', ' ')} since start.",
                                        value=float(value))
            else:
                base = name[: -len("_total")] if name.endswith("_total") else name
                yield CounterMetricFamily(base, f"Server: {key.replace('_', ' ')} since start.", value=value)


@contextlib.contextmanager
def stop_signals() -> Iterator[threading.Event]:
    """While the block runs, SIGTERM, SIGINT and SIGHUP set the event instead of ending the
    process (nvmw.stop_signals.StopSignals); a signal after the first is ignored. Main
    thread only."""
    signals = StopSignals().install()
    try:
        yield signals.event
    finally:
        signals.restore()


def run_until_signal(service: Service, *, on_start: Optional[Callable[[Service], None]] = None,
                     stop: Optional[threading.Event] = None) -> dict:
    """Start `service`, block until `stop` is set (default: until SIGTERM, SIGINT or SIGHUP,
    `stop_signals`), then drain it; returns the server's final stats ({} when `stop` was set
    before the service started: it is not started then). `on_start` is called once the
    service listens, unless a stop came meanwhile. Main thread only (signal handlers)."""
    if stop is None:
        with stop_signals() as stop:
            return run_until_signal(service, on_start=on_start, stop=stop)
    if stop.is_set():
        return {}
    try:
        service.start()
        if on_start is not None and not stop.is_set():
            on_start(service)
        while not stop.wait(0.5):
            pass
    finally:
        final = service.stop()
    return final


@contextlib.contextmanager
def serving(**kwargs) -> Iterator[Service]:
    """`with serving(port=0) as svc:` a started service, drained at the end."""
    svc = Service(**kwargs)
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


__all__ = ["Service", "run_until_signal", "stop_signals", "STOP_SIGNALS", "serving", "window_row", "DEFAULT_CONTROLLER", "DEFAULT_START",
           "SERVER_LIMITS"]
