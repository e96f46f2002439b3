"""`nvmw serve`: the middleware as a Redis-protocol network service (nvmw.lab.service).

When this process runs `nvmw serve`, the stop signals are caught before this module
imports anything of nvmw (the core, numpy and the controllers take a few hundred ms to
import): a signal at any moment after the module starts running drains, or stops the
command before it serves, with status 0."""
from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import resource
import sys
import threading
from typing import Iterator, Optional

from nvmw.stop_signals import StopSignals  # the standard library alone


# Installed here, before the imports below start any thread, when this process runs
# `nvmw serve` (the `nvmw` script or `python -m nvmw` with serve as the command): the
# module is also imported where it only registers its options (every command's parser
# is built), and there the signals must keep their usual effect. Otherwise run()
# installs them.
_early_stop = (StopSignals().install(block=True)
               if sys.argv[1:2] == ["serve"] and threading.current_thread() is threading.main_thread()
               else None)

from nvmw.commands import SUMMARIES  # noqa: E402
from nvmw.commands._args import add_store_args, argv_of, controller_help, controller_spelling  # noqa: E402
from nvmw.commands._args import int_in, pool_path  # noqa: E402
from nvmw.commands._util import ensure_pmem_force  # noqa: E402
from nvmw.devices import list_profiles  # noqa: E402
from nvmw.lab.runs import shipped_agent_path  # noqa: E402
from nvmw.lab.service import DEFAULT_CONTROLLER, Service, run_until_signal  # noqa: E402

_MIB = 1 << 20
#: The server's client cap unless --max-clients says otherwise (ServerOptions::max_clients).
DEFAULT_MAX_CLIENTS = 10000
#: Descriptors the process needs besides its clients' (the pool, the loops, the
#: interpreter's, the metrics endpoint's), asked for on top of the client cap.
_OTHER_FDS = 1024


_port = int_in(0, 65535)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help=SUMMARIES["serve"],
        description="Serve the middleware over the Redis protocol: GET, SET, DEL, EXISTS, MGET, MSET "
        "and the usual connection commands, plus NVMW.CLASS interactive|batch|auto (the class of the "
        "connection's requests; auto: SETs of at least 64 KiB are batch) and NVMW.STATS. The controller "
        "resizes the two classes' limits after every monitor window (a controller that fails is "
        "dropped, the limits kept). Without a password only clients on loopback are served (protected "
        "mode, as in Redis). SIGTERM, SIGINT (Ctrl-C) or SIGHUP drains: no new connections, "
        "every command already read is answered, every acknowledged SET is durable (pmem engine), "
        "exit status 0. Any Redis client, redis-cli, redis-benchmark or twemproxy can talk to it.")
    p.add_argument("--port", type=_port, default=6379, help="TCP port (default %(default)s; "
                   "0 picks a free one, printed at start)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default %(default)s)")
    p.add_argument("--password", default=None, help="require AUTH with this password (default: none; "
                   "also read from $NVMW_PASSWORD so it stays out of the process list)")
    p.add_argument("--protected-mode", choices=("yes", "no"), default="yes",
                   help="as Redis's: without a password, clients not on loopback get a -DENIED error "
                   "and are closed (default %(default)s; no: serve every host that reaches the port)")
    add_store_args(p, engine_default="pmem")
    p.add_argument("--pool-mb", type=int_in(8, 1 << 24), default=1024,
                   help="size of a new pmem pool, MiB (default %(default)s)")
    p.add_argument("--controller", default=DEFAULT_CONTROLLER, type=controller_spelling(leave_out=("oracle",)),
                   help=controller_help("%(default)s", leave_out=("oracle",)))
    p.add_argument("--sla", default=None, help="SLA spec judging each window: a TOML path or a shipped "
                   "name (default: the calibrated spec for --device, the thesis's for none)")
    p.add_argument("--metrics-port", type=_port, default=None,
                   help="serve Prometheus text metrics on http://BIND:PORT/metrics (default: off; 0 picks a "
                   "free port, printed at start)")
    p.add_argument("--max-clients", type=int_in(1, 1 << 20), default=None,
                   help="connections served at once; more are refused with an error (default: the server's, 10000; "
                   "the soft open-file limit is raised for them within the hard one, and the cap lowered, with "
                   "a warning, to what it leaves room for)")
    p.add_argument("--max-bulk-bytes", type=int_in(1, 1 << 40), default=None,
                   help="largest value or argument accepted, bytes (default: the server's, 512 MiB)")
    p.add_argument("--io-threads", type=int_in(1, 64), default=None,
                   help="network threads (default: the server's, 1)")
    p.add_argument("--batch-io-threads", type=int_in(0, 64), default=None,
                   help="network threads of their own for batch connections: a connection sending a value "
                   "of at least the batch threshold (64 KiB) or NVMW.CLASS batch is moved to them, so "
                   "interactive connections never wait behind a large receive (default: the server's, 1; 0 keeps "
                   "them on the network threads)")
    p.add_argument("--batch-io-idle", action=argparse.BooleanOptionalAction, default=None,
                   help="run the batch network threads under SCHED_IDLE: they get a core only when no thread "
                   "of normal priority wants it (default: on)")
    p.add_argument("--batch-nice", type=int_in(0, 19), default=19,
                   help="niceness the batch workers add to the server's own (default %(default)s: when the "
                   "cores are short the interactive loop and its clients run first; beside other "
                   "normal-priority work batch writes can nearly stop; 0 keeps the server's priority)")
    p.add_argument("--huge-pages", action=argparse.BooleanOptionalAction, default=True,
                   help="move the pmem pool's mapping to 2 MiB pages in the background after the open "
                   "(default: on; fewer TLB misses per request on tmpfs; no effect where the kernel or "
                   "filesystem cannot; --no-huge-pages keeps 4 KiB pages)")
    p.add_argument("--group-commit", action=argparse.BooleanOptionalAction, default=None,
                   help="make the small SETs read in one turn of the network loop durable together, one "
                   "publish per group of up to 8 keys, each answered once its group is durable (default: "
                   "on; --no-group-commit makes each SET durable alone)")
    p.add_argument("--group-min-ready", type=int_in(1, 256), default=None,
                   help="group commit gathers only in a loop turn that began with at least this many ready "
                   "connections (default: the server's, 8: with fewer the loop is not busy and holding "
                   "replies would only delay them)")
    p.add_argument("--poll-us", type=int_in(0, 1_000_000), default=0, metavar="US",
                   help="after a turn with work, an interactive network loop polls this many microseconds "
                   "for the next request before it sleeps, while the machine has a core to spare (default 0: "
                   "never; 20 lets a quiet machine's clients skip waking the server: docs/server.md, \"Polling\")")
    p.add_argument("--log-windows", action="store_true",
                   help="print one line per monitor window (threads, ops/s, interactive p99, queues, SLA)")
    p.set_defaults(func=run)


def _say(line: str) -> None:
    """One status line on stdout. A reader that went away (`nvmw serve | head`), or a file
    that cannot take it (a full disk, a file size limit), does not fail the service: the
    lines are dropped from then on (stdout to /dev/null), the second case said on stderr."""
    try:
        print(line, flush=True)
    except OSError as e:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
        if not isinstance(e, BrokenPipeError):
            with contextlib.suppress(OSError):
                print(f"nvmw serve: stdout: {e.strerror or e}; the status lines are dropped from now on",
                      file=sys.stderr, flush=True)


def _print_window(row: dict) -> None:
    i, b = row["threads"]
    _say(f"window {row['seq']}: I/B {i}/{b}, {row['ops_per_s']:.0f} ops/s, interactive p99 "
          f"{row['interactive_p99_us']:.0f} us, batch {row['batch_ops_per_s']:.0f} ops/s "
          f"({row['batch_bytes_per_s'] / 1e6:.1f} MB/s), queues {row['interactive_queue']}/{row['batch_queue']}, "
          f"rejected {row['rejected']}, SLA latency {'met' if row['sla_latency_met'] else 'missed'}, "
          f"throughput {'met' if row['sla_throughput_met'] else 'missed'}")


class _WindowLog:
    """--log-windows: the window lines come after the lines saying where the service
    listens. The control thread runs once the service has started, before the main thread
    says so: a window it closes meanwhile is held, and printed after them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Optional[list] = []  # None once the service has said where it listens

    def window(self, row: dict) -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(row)
            else:
                _print_window(row)

    @contextlib.contextmanager
    def announcing(self) -> Iterator[None]:
        """Around the lines saying where the service listens; the windows held follow them."""
        with self._lock:
            try:
                yield
            finally:
                held, self._held = self._held or [], None
                for row in held:
                    _print_window(row)


def run(args: argparse.Namespace) -> int:
    global _early_stop
    own_process = _early_stop is not None  # this process runs `nvmw serve` and ends with it
    signals = _early_stop or StopSignals().install(block=True)
    _early_stop = None
    try:
        return _serve(args, signals)
    finally:
        if own_process:
            signals.ignore_to_exit()  # a signal while the process exits leaves status 0
        else:
            signals.restore()


def _serve(args: argparse.Namespace, signals: StopSignals) -> int:
    """The command. The stop signals are held (blocked) until the command is past its
    re-execution, then set `signals.event`."""
    stop = signals.event
    if args.path is not None and args.engine != "pmem":
        # The memory engine has no pool: the path would be printed as the store's and nothing
        # written there, every SET lost at exit.
        raise ValueError(f"--path is the pool of --engine pmem; --engine {args.engine} keeps the store in "
                         f"memory, lost at exit (drop --path, or use --engine pmem to keep it in {args.path})")
    if args.metrics_port and args.metrics_port == args.port:  # (two 0s are two ports of their own)
        raise ValueError(f"--metrics-port {args.metrics_port} is the server's own --port")
    _check_shipped_file(args.controller, args.device)
    password = args.password if args.password is not None else os.environ.get("NVMW_PASSWORD", "")
    protected = args.protected_mode == "yes"
    if args.engine == "pmem" and args.path is None and not signals.pending():
        # A temporary pool lives on tmpfs, which wants PMEM_IS_PMEM_FORCE=1: without it
        # the command executes itself again with it set, the stop signals still blocked
        # (a signal that comes meanwhile is pending in the new process).
        ensure_pmem_force(argv_of(args))
    signals.deliver()
    if stop.is_set():
        _say("nvmw serve: stopped before serving")
        return 0
    max_clients = args.max_clients or DEFAULT_MAX_CLIENTS
    _raise_open_file_limit(max_clients)
    log = _WindowLog()
    with pool_path(args.engine, args.path, argv_of(args), "nvmw-serve-") as path:
        if args.engine == "pmem" and args.path is None:
            print(f"nvmw serve: no --path: a temporary pool {path}, removed at exit", file=sys.stderr)
        svc = Service(engine=args.engine, path=path, device=args.device, window_s=args.window,
                      controller=args.controller, sla=args.sla, bind=args.bind, port=args.port,
                      password=password, metrics_port=args.metrics_port,
                      pool_size=args.pool_mb * _MIB, max_clients=args.max_clients,
                      max_bulk_bytes=args.max_bulk_bytes, io_threads=args.io_threads,
                      batch_io_threads=args.batch_io_threads, batch_io_idle=args.batch_io_idle,
                      batch_nice=args.batch_nice, huge_pages=args.huge_pages,
                      protected_mode=protected, group_commit=args.group_commit,
                      group_min_ready=args.group_min_ready, poll_ns=args.poll_us * 1000,
                      on_window=log.window if args.log_windows else None)

        def started(s: Service) -> None:
            cap = getattr(s.server, "max_clients", max_clients)
            if cap < max_clients:
                print(f"nvmw serve: warning: the open-file limit ({_open_file_limit()}) leaves room for "
                      f"{cap} clients, not {max_clients}: more are refused (-ERR max number of clients "
                      f"reached); raise `ulimit -n` to serve more", file=sys.stderr, flush=True)
            if not password and not _loopback(s.bind):
                if protected:
                    print(f"nvmw serve: listening on {s.bind} without --password, in protected mode: only "
                          f"clients on loopback are served, others get a -DENIED error (set --password, "
                          f"or --protected-mode no on a trusted network)", file=sys.stderr, flush=True)
                else:
                    print(f"nvmw serve: warning: listening on {s.bind} without --password and with "
                          f"--protected-mode no: any host that reaches port {s.port} can read and write "
                          f"the store", file=sys.stderr, flush=True)
            with log.announcing():
                _say(f"nvmw serve: listening on {s.address} (engine {s.engine_name}"
                     f"{' ' + path if path else ''}, device {s.device}, controller {s.controller_name}, "
                     f"window {s.window_s:g} s{', AUTH required' if password else ''})")
                if s.metrics_port is not None:
                    _say(f"nvmw serve: metrics on http://{_url_host(s.bind)}:{s.metrics_port}/metrics")

        final = run_until_signal(svc, on_start=started, stop=stop)
        if not svc.served:
            _say("nvmw serve: stopped before serving")
        else:
            _say(f"nvmw serve: drained and closed ({final.get('commands', 0)} commands, "
                 f"{final.get('connections_total', 0)} connections"
                 f"{'; the controller had failed, limits kept' if svc.controller_failed else ''})")
    return 0


def _check_shipped_file(controller: str, device: str) -> None:
    """q-learning without a file of its own loads the agent shipped for the device:
    without one for --device, the error names the --device values that have one (the
    controller's own message names options of other commands). The oracle is refused:
    it looks each window's limits up by the workload's phase, which a service is never
    told, so it would only ever hold its table's default (the thesis's 15/15)."""
    kind, _, arg = str(controller).partition(":")
    if kind == "oracle":
        raise ValueError(f"--controller {controller} looks its limits up by the phase of the workload, "
                         "which a server is not told; use fixed:I,B with the limits of the phase you "
                         "expect, or q-learning, which acts on what it measures")
    if kind in ("q-learning", "q-learning-online") and not arg:
        shipped, uses = shipped_agent_path, "acts with the agent shipped for the device"
        other = f"--controller {kind}:FILE with an agent trained by `nvmw train`"
    else:
        return
    if os.path.exists(shipped(device)):
        return
    fixes = [f"--device {d}" for d in list_profiles() if os.path.exists(shipped(d))] + ([other] if other else [])
    raise ValueError(f"--controller {controller} {uses}, and none is shipped for --device {device}: "
                     f"use {' or '.join(fixes) if fixes else 'another controller'}")


def _open_file_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _raise_open_file_limit(max_clients: int) -> None:
    """As Redis does at start: raises the soft open-file limit, within the hard one, to
    leave room for `max_clients` connections beside the descriptors of the rest of the
    process. The server lowers its client cap to what the limit leaves room for."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_clients + _OTHER_FDS
    if soft == resource.RLIM_INFINITY or soft >= want:
        return
    new = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if new > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        except (OSError, ValueError):  # refused: the server's cap fits the limit as it is
            pass


def _loopback(bind: str) -> bool:
    try:
        return bind == "localhost" or ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def _url_host(bind: str) -> str:
    return f"[{bind}]" if ":" in bind else bind
