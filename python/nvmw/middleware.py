"""The Python face of the middleware: `nvmw.Middleware`, a context manager over a
persistent (or in-memory) engine with two classed, resizable worker pools."""
from __future__ import annotations

import concurrent.futures
import operator
import os
from typing import Any, Optional, Union

from nvmw import _core
from nvmw.devices import load_profile, wrap_engine
from nvmw.errors import InvalidArgumentError, NotFoundError

Bytes = Union[bytes, bytearray, memoryview, str]

#: Request classes accepted by every call (``None`` means "auto": the size rule).
CLASSES = {"interactive": 0, "batch": 1, "auto": 2, None: 2}
_OPS = {"get": 0, "put": 1, "remove": 2, "exists": 3}

#: Keys of each per-class dict in :meth:`Middleware.get_stats` (defined once, by the core).
CLASS_STAT_KEYS = tuple(_core.CLASS_STAT_KEYS)
#: Names of the 8 state features (thesis Table 3.2), in :meth:`Middleware.get_state` order.
STATE_NAMES = tuple(_core.STATE_NAMES)


def _b(x: Bytes, name: str = "key") -> bytes:
    """`x` as bytes: a str is encoded as UTF-8; TypeError or InvalidArgumentError naming
    the argument otherwise."""
    if isinstance(x, bytes):
        return x
    if isinstance(x, str):
        try:
            return x.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(
                f"{name} is a str that UTF-8 cannot encode ({e.reason} at index {e.start}); "
                f"pass bytes") from None
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{name} must be bytes, bytearray, memoryview or str, not {type(x).__name__}")


def _cls(cls: Optional[str]) -> int:
    try:
        return CLASSES[cls]
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            f"unknown request class {cls!r}: use 'interactive', 'batch' or 'auto'") from None


# The integer types of the core's options: an argument outside its type is refused here,
# naming the option (the binding's own message would be a TypeError listing signatures).
_INT32 = (-(1 << 31), (1 << 31) - 1, "[-2^31, 2^31-1]")
_INT64 = (-(1 << 63), (1 << 63) - 1, "[-2^63, 2^63-1]")
_UINT64 = (0, (1 << 64) - 1, "[0, 2^64-1]")
# A pool file's size is an off_t (signed 64-bit): libpmemobj refuses a larger size with
# "invalid size (...) for os_off_t". Sizes up to 2^63-1 reach the filesystem, which
# refuses what it cannot hold (NoSpaceError, or "File too large" beyond its largest file).
_POOL_SIZE = (0, (1 << 63) - 1, "[0, 2^63-1]")


def _integer(name: str, value: Any) -> int:
    """`value` as an int: an integer (also numpy's) or a float with an integral value.
    TypeError for other types (a string, None, a bool: True is no count), InvalidArgumentError
    for 1.5, NaN or infinity, each naming the argument, rather than a silently truncated number."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not bool")
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidArgumentError(f"{name} must be an integer, got {value!r}")
        return int(value)
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None


def _seconds(name: str, value: Any) -> float:
    """`value` as a float (an int, a float, numpy's); TypeError naming the argument else."""
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}") from None


def _flag(name: str, value: Any) -> bool:
    """`value` as a bool; TypeError naming the argument for anything but True/False (or 1/0)."""
    if isinstance(value, (str, bytes)) or value is None or value not in (True, False):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _c_int(name: str, value: Any, kind: tuple = _INT32) -> int:
    """`value` as an integer of the core's type `kind`, or InvalidArgumentError naming it.
    The core then checks the option's own range (e.g. max_threads in [1, 1024])."""
    v = _integer(name, value)
    lo, hi, text = kind
    if not lo <= v <= hi:
        raise InvalidArgumentError(f"{name} must be an integer in {text}, got {v}")
    return v


def open_engine(engine: Union[str, "_core.Engine"] = "pmem", path: Optional[str] = None, *,
                pool_size: int = 1 << 30, create_if_missing: bool = True,
                device: Optional[str] = None, verify_checksums: bool = False,
                paranoid_checks: bool = False, file_mode: int = 0o600,
                huge_pages: bool = True) -> "_core.Engine":
    """Open an engine: ``"pmem"`` (a pool file at `path`, created if missing) or
    ``"memory"``; optionally wrapped by an emulated device profile (``"optane-1dimm"``...).

    pmem only: `pool_size` is the size of a pool this call creates (rounded down to a
    multiple of 4 KiB; at least 8 MiB, at most 2^63-1, a file size; InvalidArgumentError
    otherwise, and NoSpaceError when the filesystem cannot hold it); `verify_checksums` checks each entry's checksum on every get
    (a mismatch raises CorruptionError instead of handing out the value; recovery at open
    checks every entry regardless, this guards against damage while the pool is open;
    costs 20-45 ns per small get); `paranoid_checks` refuses to open a pool with any
    damaged entry (CorruptionError; by default such an entry is quarantined: its key
    raises CorruptionError and the rest of the pool works); `file_mode` is the permission
    bits of a pool file this call creates (before the umask); `huge_pages` (default True)
    moves the pool's mapping to 2 MiB pages in the background after the open, which
    spares a request most of its TLB misses on tmpfs (Linux 6.1+; without effect where
    the kernel or filesystem cannot; docs/engine.md, "Huge pages"). `nvmw check POOL`
    reports the damage of a pool and can salvage its readable entries."""
    huge_pages = _flag("huge_pages", huge_pages)
    if not huge_pages and not (isinstance(engine, str) and engine == "pmem"):
        raise InvalidArgumentError("huge_pages=False applies to a pool file this call opens (engine='pmem')")
    # The device first: an error's traceback keeps the frames it passed through, so a
    # pool opened before an unknown device name stayed open (and refused the next open)
    # for as long as the error was kept.
    profile = load_profile(device) if device and device != "none" else None
    if path is not None and not (isinstance(engine, str) and engine == "pmem"):
        # It was ignored: the store named by the path got none of the writes.
        what = "an open engine" if isinstance(engine, _core.Engine) else f"engine={engine!r}"
        raise InvalidArgumentError(
            f"path is the pool file of engine='pmem'; {what} does not use it (got path {path!r})")
    if isinstance(engine, _core.Engine):
        core = engine
    elif engine == "pmem":
        if not path:
            raise InvalidArgumentError("engine='pmem' needs a pool file path")
        path = os.fsencode(path)  # str, bytes or os.PathLike: the file's name as bytes
        file_mode = _integer("file_mode", file_mode)
        if not 0 <= file_mode <= 0o7777:
            raise InvalidArgumentError(f"file_mode must be permission bits (0 to 0o7777), got {file_mode!r}")
        pool_size = _c_int("pool_size", pool_size, _POOL_SIZE)
        core = _core.open_pmem_engine(path, pool_size_bytes=pool_size,
                                      create_if_missing=_flag("create_if_missing", create_if_missing),
                                      verify_checksums=_flag("verify_checksums", verify_checksums),
                                      paranoid_checks=_flag("paranoid_checks", paranoid_checks),
                                      file_mode=file_mode, huge_pages=huge_pages)
    elif engine == "memory":
        core = _core.new_memory_engine()
    else:
        raise InvalidArgumentError(f"unknown engine {engine!r}: use 'pmem' or 'memory'")
    if profile is not None:
        core = wrap_engine(core, profile)
    return core


#: The pool size bound of a middleware unless told otherwise (thesis: 32).
DEFAULT_MAX_THREADS = 32


class Middleware:
    """Workload-aware concurrency control over a key-value engine.

    >>> with nvmw.Middleware("/dev/shm/demo.pool", interactive_threads=2, batch_threads=1) as mw:
    ...     mw.put(b"k", b"v", cls="interactive")
    ...     mw.get(b"k")
    b'v'

    Parameters
    ----------
    path: pool file for ``engine="pmem"`` (created if missing, recovered otherwise); None
        for the other engines (InvalidArgumentError otherwise).
    engine: ``"pmem"``, ``"memory"`` or an already open ``nvmw._core.Engine``.
    interactive_threads, batch_threads: initial pool sizes, clamped to [1, max_threads];
        :attr:`threads` reports the sizes in use.
    max_threads: pool size bound (thesis: 32).
    pool_size: size in bytes of a pool file this call creates (pmem; see :func:`open_engine`).
    huge_pages: back the pool with 2 MiB pages (pmem; see :func:`open_engine`).
    window_s: monitor window length in seconds.
    control: False runs the no-control baseline (callers run operations themselves,
        at most ``no_control_max_inflight`` at once).
    device: emulated device profile (``"none"``, ``"optane-1dimm"``, ``"optane-6dimm"``).
    batch_threshold_bytes: size rule for class "auto": puts of at least this size are batch.
    queue_capacity: per-class queue bound; a full queue raises OverloadedError.
    batch_nice: CPU niceness (0..19) batch workers give themselves so interactive work runs
        first when the CPU is contended; trades batch throughput for interactive tail latency.
    execution: ``"caller-runs"`` (default: a sync call with a free permit of its class runs
        on the calling thread) or ``"handoff"`` (a worker runs every request).

    Blocking calls release the GIL. An acknowledged put is durable (pmem engine).
    Errors raise the typed exceptions of :mod:`nvmw.errors`.
    """

    def __init__(self, path: Optional[str] = None, engine: Union[str, Any] = "pmem", *,
                 interactive_threads: int = 1, batch_threads: int = 1, max_threads: int = DEFAULT_MAX_THREADS,
                 window_s: float = 1.0, control: bool = True, device: Optional[str] = None,
                 pool_size: int = 1 << 30, create_if_missing: bool = True,
                 batch_threshold_bytes: int = 64 * 1024, queue_capacity: int = 1 << 16,
                 no_control_max_inflight: int = 200, max_value_bytes: int = 512 << 20,
                 spin_ns: int = 20000, batch_nice: int = 0, execution: str = "caller-runs",
                 huge_pages: bool = True):
        window_s = _seconds("window_s", window_s)
        if not window_s > 0:
            raise InvalidArgumentError(f"window_s must be > 0, got {window_s}")
        if not isinstance(execution, str):
            raise TypeError(f"execution must be 'caller-runs' or 'handoff', not {type(execution).__name__}")
        control = _flag("control", control)
        max_threads = _c_int("max_threads", max_threads)
        no_control_max_inflight = _c_int("no_control_max_inflight", no_control_max_inflight)
        batch_threshold_bytes = _c_int("batch_threshold_bytes", batch_threshold_bytes, _UINT64)
        queue_capacity = _c_int("queue_capacity", queue_capacity, _UINT64)
        max_value_bytes = _c_int("max_value_bytes", max_value_bytes, _UINT64)
        spin_ns = _c_int("spin_ns", spin_ns, _INT64)
        batch_nice = _c_int("batch_nice", batch_nice)
        # Clamped as the core clamps them (any integer is accepted, also beyond C's int).
        top = max(1, max_threads)
        interactive_threads = min(max(_integer("interactive_threads", interactive_threads), 1), top)
        batch_threads = min(max(_integer("batch_threads", batch_threads), 1), top)
        self.max_threads = max_threads
        self._engine = open_engine(engine, path, pool_size=pool_size,
                                   create_if_missing=create_if_missing, device=device, huge_pages=huge_pages)
        self.device = device or "none"
        self.window_s = window_s
        self.control = control
        try:
            self.core = _core.Middleware(
                self._engine, interactive_threads=interactive_threads, batch_threads=batch_threads,
                max_threads=max_threads, window_s=window_s, control=control,
                no_control_max_inflight=no_control_max_inflight,
                batch_threshold_bytes=batch_threshold_bytes, queue_capacity=queue_capacity,
                max_value_bytes=max_value_bytes, spin_ns=spin_ns, batch_nice=batch_nice,
                execution=execution)
        except BaseException:
            # A refused option: let go of the engine now, not when this half-made object
            # is collected (the error's traceback keeps it, and the pool stays open).
            self._engine = None
            raise

    # -- storage ---------------------------------------------------------------------------
    def get(self, key: Bytes, cls: Optional[str] = None) -> Optional[bytes]:
        """The value of `key`, or None when it does not exist."""
        return self.core.get(_b(key), _cls(cls))

    def put(self, key: Bytes, value: Bytes, cls: Optional[str] = None) -> None:
        """Insert or replace; durable when it returns (pmem engine)."""
        self.core.put(_b(key), _b(value, "value"), _cls(cls))

    def remove(self, key: Bytes, cls: Optional[str] = None) -> bool:
        """Remove `key`; True if it existed."""
        return self.core.remove(_b(key), _cls(cls))

    def exists(self, key: Bytes, cls: Optional[str] = None) -> bool:
        """Whether `key` exists; its value is not copied (a read of 0 bytes in the window
        statistics)."""
        return self.core.exists(_b(key), _cls(cls))

    def submit(self, op: str, key: Bytes, value: Bytes = b"",
               cls: Optional[str] = None) -> "concurrent.futures.Future":
        """Asynchronous request (``op`` in get/put/remove/exists). Returns a Future whose
        result is the value (get; None if missing), None (put) or a bool (remove, exists).
        Its done-callbacks run on the thread that completed it (a worker, or without
        control the caller), which holds the request's permit until they return: they may
        submit() but a synchronous call into this middleware raises NotSupportedError (it
        could wait for that permit). The request cannot be cancelled: ``cancel()`` returns
        False."""
        if not isinstance(op, str) or op not in _OPS:
            raise InvalidArgumentError(f"unknown op {op!r}: use 'get', 'put', 'remove' or 'exists'")
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def done(error: Optional[Exception], value: Optional[bytes]) -> None:
            if error is None:
                fut.set_result(value if op == "get" else (None if op == "put" else True))
            elif isinstance(error, NotFoundError) and op in ("get", "remove", "exists"):
                fut.set_result(None if op == "get" else False)
            else:
                fut.set_exception(error)

        # Accepted, a request runs whatever happens: the future is running from the start,
        # so cancel() says False (it said True for a put that was then applied anyway).
        fut.set_running_or_notify_cancel()
        self.core.submit(_OPS[op], _b(key), _b(value, "value"), _cls(cls), done)
        return fut

    # -- monitoring and control (thesis Table 3.1) ----------------------------------------
    def get_stats(self) -> dict:
        """Last closed window: ``{"seq", "start_s", "duration_s", "interactive", "batch",
        "all"}``; each class dict has the keys in :data:`CLASS_STAT_KEYS`."""
        return self.core.get_stats()

    def totals(self) -> dict:
        """Every window closed since start, summed: ``{"interactive", "batch", "all"}``, each
        ``{"windows", "ops", "errors", "rejected", "latency_s"}``. Counts a reader of
        :meth:`get_stats` or :meth:`wait_for_window` cannot miss by reading too seldom."""
        return self.core.totals()

    def wait_for_window(self, after_seq: int, timeout_s: float = 60.0) -> dict:
        """Block until a window with ``seq > after_seq`` closes; return its stats."""
        after_seq = _c_int("after_seq", after_seq, _UINT64)
        return self.core.wait_for_window(after_seq, _seconds("timeout_s", timeout_s))

    def get_state(self) -> list:
        """The 8-feature state of thesis Table 3.2 (names in :data:`STATE_NAMES`)."""
        return self.core.get_state()

    def perform_action(self, action: int) -> tuple:
        """Thesis Table 3.3 action 0..8; thread counts are clamped to [1, max_threads].
        Returns the (interactive, batch) sizes now in use (after the clamp)."""
        action = _integer("action", action)
        if not 0 <= action < _core.N_ACTIONS:
            raise InvalidArgumentError(f"action must be in [0, {_core.N_ACTIONS - 1}], got {action}")
        self.core.perform_action(action)
        return self.threads

    def set_threads(self, interactive: int, batch: int) -> tuple:
        """Set both pool sizes, each in [1, max_threads] (InvalidArgumentError otherwise,
        nothing changed). Returns the (interactive, batch) sizes now in use."""
        i, b = _integer("interactive", interactive), _integer("batch", batch)
        if not (1 <= i <= self.max_threads and 1 <= b <= self.max_threads):
            raise InvalidArgumentError(
                f"thread counts must be in [1, {self.max_threads}], got ({i}, {b})")
        self.core.set_threads(i, b)
        return self.threads

    @property
    def threads(self) -> tuple:
        """Current (interactive, batch) pool sizes."""
        return tuple(self.core.threads)

    def queue_length(self, cls: str) -> int:
        """Requests of class `cls` (``"interactive"`` or ``"batch"``) waiting to start."""
        if cls not in ("interactive", "batch"):
            raise InvalidArgumentError(f"queue_length needs class 'interactive' or 'batch', got {cls!r}")
        return self.core.queue_length(_cls(cls))

    @property
    def engine(self):
        return self._engine

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop accepting, finish every accepted request (their futures are resolved when
        this returns), stop the pools. Idempotent and safe while other threads call in:
        they get a result or ShutdownError, and every later call raises ShutdownError.
        A YCSB workload or trace replay still running on it ends at its first
        ShutdownError. Also called on garbage collection; at interpreter exit every
        middleware still open is closed before Python finalizes. Called from a completion
        callback of this middleware, it returns at once and the requests still accepted
        finish on another thread. Ctrl-C during the drain raises KeyboardInterrupt at once;
        the drain goes on, and a later close() waits for it. In a child process forked
        after it was opened, every call raises NotSupportedError (its threads run in the
        parent, and its store is the parent's) and close() only lets go of the child's
        copy."""
        core = getattr(self, "core", None)
        if core is not None:
            core.stop()
        self._engine = None

    def __copy__(self):
        # A copy shared the running core, and collecting the copy closed the original.
        raise TypeError("a Middleware cannot be copied: share the object itself")

    def __deepcopy__(self, memo):
        raise TypeError("a Middleware cannot be copied: share the object itself")

    def __reduce_ex__(self, protocol):
        raise TypeError("a Middleware cannot be pickled: its workers and pool belong to "
                        "this process; open one in the other process")

    def __enter__(self) -> "Middleware":
        self.core.threads  # ShutdownError once closed (NotSupportedError in a forked child)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

