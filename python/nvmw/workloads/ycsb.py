"""YCSB-style workload from Python: a typed parameter set (`YcsbConfig`) and thin
wrappers over the C++ generator `nvmw._core.YcsbGenerator` (closed-loop clients,
client-side latency), including a background mode to co-run with a batch replay."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from nvmw import _core
from nvmw.errors import InvalidArgumentError
from nvmw.middleware import DEFAULT_MAX_THREADS, _integer
from nvmw.workloads.counts import count_in
from nvmw.workloads.traces import MAX_SCHEDULE_S

DISTRIBUTIONS = ("uniform", "zipfian", "latest")
CLASSES = ("interactive", "batch", "auto")
CAPACITY_TARGETS = ("direct", "no-control", "middleware")
#: The most records a run loads (`record_count`; `nvmw ycsb|sweep --records`): about 300 B
#: of memory and 1.2 us of loading each with the default 128 B values on the memory engine
#: (30 GB and two minutes at the bound, more with larger values).
RECORDS_MAX = 100_000_000
#: The most operations of a run (`operation_count`; `nvmw ycsb --ops`): about 3 us each
#: through the middleware on the memory engine with 16 clients (nearly an hour at the bound,
#: longer on an emulated device); an insert adds a record.
OPERATIONS_MAX = 1_000_000_000
#: The most client threads of a command (`nvmw ycsb|replay --threads`, `nvmw sweep
#: --clients`, `nvmw calibrate --capacity-clients`): a thread each, with its own stack.
THREADS_MAX = 4096
#: Longest gap between one thread's paced requests, in ns: the generator staggers up to
#: 100,000 threads' schedules by that much in int64 nanoseconds (its own check is the same).
_MAX_GAP_NS = 1e13


@dataclass
class YcsbConfig:
    """Parameters of one YCSB-style run (the C++ `YcsbOptions`, same names)."""

    record_count: int = 10_000
    """Records inserted by the load phase; the initial key space."""
    operation_count: int = 0
    """Operations over all threads (0 = no limit: `duration_s` decides)."""
    duration_s: float = 5.0
    """Run length in seconds (0 = no limit: `operation_count` decides)."""
    read_proportion: float = 0.5
    """Fraction of reads; the three proportions must sum to 1."""
    update_proportion: float = 0.5
    """Fraction of updates (overwrite an existing key)."""
    insert_proportion: float = 0.0
    """Fraction of inserts (a new key each)."""
    distribution: str = "zipfian"
    """Key choice: uniform | zipfian (YCSB scrambled, constant 0.99) | latest."""
    zipfian_constant: float = 0.99
    """Skew of zipfian/latest (YCSB's 0.99)."""
    value_bytes: int = 128
    """Bytes per update/insert/load value."""
    threads: int = 16
    """Closed-loop client threads (one request outstanding each)."""
    load_threads: int = 0
    """Threads of the load phase (0 = `threads`)."""
    target_ops_per_s: float = 0.0
    """Total target rate, paced per thread (0 = as fast as possible)."""
    request_class: str = "interactive"
    """Class hint sent with every request: interactive | batch | auto."""
    seed: int = 1
    """Seed of every random choice."""
    interval_s: float = 0.0
    """> 0: also report per-interval p50/p99/throughput of this length."""

    def to_options(self) -> dict:
        """The dict `_core.YcsbGenerator` takes."""
        return dataclasses.asdict(self)

    def validate(self) -> "YcsbConfig":
        """Raise ValueError for choices the C++ side would also reject (earlier, clearer)."""
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, not {self.distribution!r}")
        if self.request_class not in CLASSES:
            raise ValueError(f"request_class must be one of {CLASSES}, not {self.request_class!r}")
        total = self.read_proportion + self.update_proportion + self.insert_proportion
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"read + update + insert proportions must sum to 1, got {total:g}")
        count_in("record_count", self.record_count, 0, RECORDS_MAX)
        count_in("operation_count", self.operation_count, 0, OPERATIONS_MAX)
        if self.operation_count <= 0 and self.duration_s <= 0:
            raise ValueError("set operation_count or duration_s")
        if not self.duration_s <= MAX_SCHEDULE_S:
            # The deadline is a steady-clock time point in int64 nanoseconds: past that range
            # it wrapped into the past and the run ended at once with no operations.
            raise ValueError(f"duration_s must be at most {MAX_SCHEDULE_S:g} s, got {self.duration_s:g}")
        if self.target_ops_per_s > 0 and 1e9 * max(self.threads, 1) / self.target_ops_per_s > _MAX_GAP_NS:
            # Each thread waits threads / rate between requests, counted in int64 nanoseconds
            # by the generator: a gap past that range overflows and the run never ends.
            slowest = 1e9 * max(self.threads, 1) / _MAX_GAP_NS
            raise ValueError(f"target_ops_per_s {self.target_ops_per_s:g} is too slow to pace {self.threads} "
                             f"threads: use 0 (unpaced) or at least {slowest:.2g}")
        return self


def _core_handle(middleware: Any) -> Any:
    """Accept an `nvmw.Middleware` (uses its `.core`) or a `_core.Middleware`."""
    return getattr(middleware, "core", middleware)


class YcsbWorkload:
    """One YCSB run against a middleware: `load()`, then `run()` or
    `start()` ... `stop()` / `join()` in the background.

    The middleware must be running; the workload shares it, and closing it ends the run
    (each client stops at its first ShutdownError). Results are dicts:
    ``{"elapsed_s", "all", "read", "update", "insert", "intervals", ...}``, each
    op dict holding ops, errors, not_found, ops_per_s, mean/min/max/p50/p99/p999 (µs).
    """

    def __init__(self, middleware: Any, config: Optional[YcsbConfig] = None):
        self.config = (config or YcsbConfig()).validate()
        self._gen = _core.YcsbGenerator(_core_handle(middleware), self.config.to_options())

    def load(self) -> dict:
        """Insert `record_count` records (blocking). Returns records_loaded and load_s."""
        r = self._gen.load()
        return {"records_loaded": r["records_loaded"], "load_s": r["load_s"]}

    def start(self) -> "YcsbWorkload":
        self._gen.start()
        return self

    def stop(self) -> None:
        self._gen.stop()

    def join(self) -> dict:
        return self._gen.join()

    def run(self) -> dict:
        return self._gen.run()

    @property
    def running(self) -> bool:
        return self._gen.running


def run_ycsb(middleware: Any, config: Optional[YcsbConfig] = None, *, load: bool = True) -> dict:
    """Load (unless `load=False`) and run one YCSB workload; return the results dict."""
    w = YcsbWorkload(middleware, config)
    loaded = w.load() if load else {"records_loaded": 0, "load_s": 0.0}
    result = w.run()
    result.update(loaded)
    return result


def measure_capacity(config: Optional[YcsbConfig] = None,
                     targets: Iterable[str] = CAPACITY_TARGETS,
                     middleware_threads: int = 2) -> dict:
    """Client-side ceiling: run `config` against a no-op engine, directly and through
    the middleware (no-control, and queues+pools with `middleware_threads` interactive
    workers, 1 to the middleware's 32: InvalidArgumentError otherwise, where the core
    would run another count than the one reported). Returns ``{target: {"ops_per_s",
    "p50_us", "p99_us", ...}, "cores": n, "middleware_threads": n, ...}``."""
    cfg = (config or YcsbConfig(duration_s=2.0)).validate()
    middleware_threads = _integer("middleware_threads", middleware_threads)
    if not 1 <= middleware_threads <= DEFAULT_MAX_THREADS:
        raise InvalidArgumentError(f"middleware_threads must be an integer in [1, {DEFAULT_MAX_THREADS}] "
                                   f"(the middleware target's interactive workers), got {middleware_threads}")
    targets = list(targets)
    for target in targets:
        if target not in CAPACITY_TARGETS:
            raise ValueError(f"capacity target must be one of {CAPACITY_TARGETS}, not {target!r}")
    out: dict = {"cores": os.cpu_count() or 1, "threads": cfg.threads,
                 "value_bytes": cfg.value_bytes, "duration_s": cfg.duration_s,
                 "operation_count": cfg.operation_count, "middleware_threads": middleware_threads,
                 "read_proportion": cfg.read_proportion, "distribution": cfg.distribution}
    for target in targets:
        r = _core.ycsb_capacity(cfg.to_options(), target, middleware_threads)
        out[target] = {"ops_per_s": r["all"]["ops_per_s"], "ops": r["all"]["ops"],
                       "elapsed_s": r["elapsed_s"], "p50_us": r["all"]["p50_us"],
                       "p99_us": r["all"]["p99_us"], "mean_us": r["all"]["mean_us"],
                       "errors": r["all"]["errors"]}
    return out
