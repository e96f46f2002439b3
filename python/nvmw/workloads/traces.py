"""Traces from Python: read (Azure Functions Blob 2020 CSV or native CSV), synthesise
(Azure-like interactive, Wukong-SVD-like batch), summarise, filter/transform, and
replay open-loop through a middleware. Thin wrappers over `nvmw._core` (C++)."""
from __future__ import annotations

import math
import os
import stat
from typing import Any, Optional

from nvmw import _core
from nvmw.devices import core_file_name
from nvmw.workloads.counts import count_in

FORMATS = ("azure", "native")
SYNTH_KINDS = ("azure", "svd")
CLASSES = ("interactive", "batch", "auto")

#: The longest schedule a replay or a synthetic trace may span, s (about 31 years): the
#: core counts trace and replay time in int64 micro- and nanoseconds (2^63 ns is about
#: 292 years) and refuses longer schedules, which would wrap to negative times. The
#: commands check it before any work starts.
MAX_SCHEDULE_S = float(_core.MAX_SCHEDULE_S)

#: The most rows of a synthetic trace (`synth`, `nvmw trace synth --rows`): the trace is
#: built whole in memory, about 150 B a row (15 GB at the bound), at about 0.4 us a row.
SYNTH_ROWS_MAX = 100_000_000
#: The most parallel tasks of the SVD trace (`nvmw trace synth svd --tasks`; the core's
#: own bound).
SVD_TASKS_MAX = 100_000

#: Keys of the dict printed by `nvmw trace stats --json` (see docs/workloads-trace.md).
STATS_KEYS = ("rows", "reads", "writes", "skipped_rows", "bytes_p50", "bytes_p99", "duration_s")


def read_trace(path: str | os.PathLike, format: str = "azure", *, skip_malformed: bool = False,
               start_unix_ms: Optional[int] = None, end_unix_ms: Optional[int] = None,
               max_rows: int = 0, max_bytes: int = 0) -> "_core.Trace":
    """Read a trace file. A malformed row raises InvalidArgumentError whose message starts
    with ``<path>:<line>:``; with `skip_malformed` it is dropped and counted in
    ``trace.skipped_rows`` (``trace.first_skip_reason`` names the first). A row that is not
    UTF-8 text is malformed (its byte and column are named), and so, with `max_bytes` > 0,
    is a row whose size is above `max_bytes` (an absurd size is reported with its line
    instead of being allocated later). Azure rows may be unsorted (they are sorted by
    Timestamp). `max_rows` > 0 stops after that many accepted rows."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, not {format!r}")
    if max_rows < 0 or max_bytes < 0:
        raise ValueError(f"max_rows and max_bytes must be >= 0, got {max_rows} and {max_bytes}")
    return _core.read_trace(core_file_name(path), format, skip_malformed, start_unix_ms, end_unix_ms,
                            int(max_rows), int(max_bytes))


#: The native format's header fields, as the core's reader expects them.
NATIVE_HEADER = ("time_ms", "op", "key", "bytes")


def sniff_format(path: str | os.PathLike) -> str:
    """The format of the trace file at `path` by its header: ``"native"`` when its first
    line that is neither blank nor a ``#`` comment is the native header (fields trimmed,
    any case, as the reader compares them), else ``"azure"``. Only a regular file is
    looked into (reading a pipe would consume its header); anything else, or a file that
    cannot be read, is ``"azure"``, and reading it then says what is wrong."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return "azure"
        with open(path, "rb") as fh:
            for n in range(1000):
                line = fh.readline(4096)
                if not line:
                    break
                if n == 0 and line.startswith(b"\xef\xbb\xbf"):
                    line = line[3:]
                text = line.decode("utf-8", "replace").strip()
                if text and not text.startswith("#"):
                    fields = tuple(f.strip().lower() for f in text.split(","))
                    return "native" if fields == NATIVE_HEADER else "azure"
    except (OSError, ValueError):
        pass
    return "azure"


def synth(kind: str, rows: int = 10_000, seed: int = 1, **options: Any) -> "_core.Trace":
    """A synthetic trace: ``"azure"`` (AzureSynthOptions fields as keywords) or ``"svd"``
    (SvdSynthOptions fields). Same seed, same trace. `rows` is an integer in [1,
    SYNTH_ROWS_MAX]."""
    opts = dict(options, rows=count_in("rows", rows, 1, SYNTH_ROWS_MAX), seed=int(seed))
    if kind == "azure":
        _check_span(kind, (opts["rows"] - 1) / _number(opts, "accesses_per_s", 36.6),
                    f"{opts['rows']} rows at {_number(opts, 'accesses_per_s', 36.6):g} accesses/s")
        return _core.synth_azure(opts)
    if kind == "svd":
        # At most one task time and one gap between jobs per record: a bound, not the span.
        per_row_ms = _number(opts, "task_ms", 50.0) + _number(opts, "gap_between_jobs_ms", 200.0)
        _check_span(kind, opts["rows"] * per_row_ms / 1e3,
                    f"{opts['rows']} rows of up to {per_row_ms:g} ms (task_ms + gap_between_jobs_ms)")
        return _core.synth_svd(opts)
    raise ValueError(f"synthetic trace kind must be one of {SYNTH_KINDS}, not {kind!r}")


def _number(opts: dict, key: str, default: float) -> float:
    """opts[key] as a float for the span check (NaN when it is not a number, which the
    core then refuses by name)."""
    v = opts.get(key)
    if v is None:
        return default
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _check_span(kind: str, span_s: float, what: str) -> None:
    if span_s > MAX_SCHEDULE_S:
        raise ValueError(f"{kind} synth: {what} would span more than {MAX_SCHEDULE_S:g} s: too long to schedule")


def trace_stats(trace: "_core.Trace") -> dict:
    """rows, reads, writes, skipped_rows, bytes_p50, bytes_p99 (nearest rank, per access),
    duration_s, plus distinct_keys, bytes_mean, bytes_max, accesses_per_s."""
    return dict(trace.summary())


def shape(trace: "_core.Trace", *, start_s: Optional[float] = None, end_s: Optional[float] = None,
          min_bytes: Optional[int] = None, max_bytes: Optional[int] = None,
          max_records: Optional[int] = None, fixed_bytes: Optional[int] = None,
          write_ratio: Optional[float] = None, key_space: Optional[int] = None,
          key_prefix: Optional[str] = None, seed: int = 0) -> "_core.Trace":
    """Filter (time window in seconds of trace time, size range, record cap; the kept part
    is re-based to start at 0) then transform (fixed size, exact write ratio, bounded key
    space, key prefix). Options left None are not applied."""
    filt = {k: v for k, v in dict(start_s=start_s, end_s=end_s, min_bytes=min_bytes,
                                  max_bytes=max_bytes, max_records=max_records).items()
            if v is not None}
    if filt:
        trace = trace.filter(filt)
    xform = {k: v for k, v in dict(fixed_bytes=fixed_bytes, write_ratio=write_ratio,
                                   key_space=key_space, key_prefix=key_prefix).items()
             if v is not None}
    if xform:
        trace = trace.transform(dict(xform, seed=int(seed)))
    return trace


def check_pace(trace: "_core.Trace", accel: float, what: str = "accel") -> float:
    """`accel` as a float; ValueError (naming `what`) unless it is finite and > 0 and the
    replay of `trace` it paces fits MAX_SCHEDULE_S: the trace's span plus one mean gap
    (a second for a one-record trace), the loop period the replay schedules, divided by
    `accel`."""
    accel = float(accel)
    if not (accel > 0 and math.isfinite(accel)):
        raise ValueError(f"{what} must be a finite number > 0, got {accel!r}")
    n = len(trace)
    span_s = float(trace.summary()["duration_s"]) if n else 0.0
    gap_s = span_s / (n - 1) if n > 1 and span_s > 0 else 1.0
    if (span_s + gap_s) / accel > MAX_SCHEDULE_S:
        raise ValueError(f"{what} {accel:g} stretches the trace's {span_s:g} s (plus one {gap_s:g} s gap) past "
                         f"{MAX_SCHEDULE_S:g} s: too slow to schedule")
    return accel


def replay_options(*, threads: int = 16, cls: str = "interactive", accel: float = 1.0,
                   loop: bool = False, duration_s: float = 0.0, preload: bool = True,
                   seed: int = 0, max_value_bytes: int = 0) -> dict:
    """The option dict `_core.Replay` takes (ReplayOptions field names), checked early.
    `max_value_bytes` > 0 caps the request size below the middleware's own cap; start()
    refuses a trace with a larger record (InvalidArgumentError naming it) before any
    value buffer is allocated."""
    if cls not in CLASSES:
        raise ValueError(f"cls must be one of {CLASSES}, not {cls!r}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if not accel > 0:
        raise ValueError(f"accel must be > 0, got {accel}")
    if not 0 <= duration_s <= MAX_SCHEDULE_S:
        raise ValueError(f"duration_s must be in [0, {MAX_SCHEDULE_S:g}] s, got {duration_s}")
    if loop and duration_s == 0:
        raise ValueError("loop needs a duration_s (or use _core.Replay.stop() yourself)")
    if max_value_bytes < 0:
        raise ValueError(f"max_value_bytes must be >= 0, got {max_value_bytes}")
    return dict(threads=int(threads), cls=cls, accel=float(accel), loop=bool(loop),
                duration_s=float(duration_s), preload=bool(preload), seed=int(seed),
                max_value_bytes=int(max_value_bytes))


def replay(trace: "_core.Trace", core_middleware: "_core.Middleware", **options: Any) -> dict:
    """Replay `trace` through a running `_core.Middleware` (``nvmw.Middleware(...).core``)
    and wait for the result dict (latency from the scheduled time; see `replay_options`).
    ValueError when the trace at that `accel` is too slow to schedule (`check_pace`)."""
    opts = replay_options(**options)
    check_pace(trace, opts["accel"])
    return _core.Replay(trace, opts).run(core_middleware)
