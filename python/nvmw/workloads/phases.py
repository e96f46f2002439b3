"""The thesis's four RL phases (Appendix C) and their contended variants as data:
`load_phase(n_or_path)` reads a TOML phase file (shipped ones in nvmw/data/phases/),
`PhaseWorkload` co-runs its interactive and batch trace replays in the background on a
`_core.Middleware`, and `phase_workloads` gives the same traces in the form the simulator
takes.

Phases 1-4 are the thesis's, paced for a small machine; phases 5 and 6 are phases 1 and 2
with their offered load stated relative to this machine's measured capacity
(`nvmw.workloads.capacity`), so that the batch side floods the device.
`DEFAULT_PHASES` is the set every experiment runs by default."""
from __future__ import annotations

import functools
import hashlib
import marshal
import math
import numbers
import operator
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from nvmw import _core, jsonfiles
from nvmw.workloads import traces
from nvmw.workloads.capacity import FACTOR_KEYS, CapacityLike, load_capacity, rate_for

PHASE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "phases")
SOURCES = ("azure", "svd", "file")
#: The phases experiments run by default (evaluation, calibration, collection, training,
#: demo): the thesis's four (gentle on a small machine) and the two contended variants.
DEFAULT_PHASES: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
#: Ways to pace a class: one of these keys per class table.
PACE_KEYS = ("target_ops_per_s", "accel", *FACTOR_KEYS)

_CLASS_KEYS = {
    "source", "requests", "clients", "write_ratio", "min_bytes", "max_bytes", "fixed_bytes",
    "key_space", "target_ops_per_s", "accel", "loop", "synth_rows", "synth", "path", "format",
    "start_unix_ms", "end_unix_ms", *FACTOR_KEYS,
}


@dataclass(frozen=True)
class ClassWorkload:
    """One side (interactive or batch) of a phase: where its trace comes from, how it is
    cut and transformed, and how it is replayed."""

    source: str
    """"azure" (synthetic Azure-like), "svd" (synthetic Wukong SVD) or "file"."""
    requests: int
    """Records kept (the first ones after the size filter): the phase's request count."""
    clients: int
    """Client threads of the replay (concurrent serverless functions)."""
    write_ratio: Optional[float] = None
    """Exact fraction of writes after the transform (None keeps the trace's ops)."""
    min_bytes: Optional[int] = None
    """Size filter applied before the request cut (inclusive)."""
    max_bytes: Optional[int] = None
    fixed_bytes: Optional[int] = None
    """Every request gets this size (None keeps sizes)."""
    key_space: Optional[int] = None
    """Map keys onto at most this many (bounds the store's memory)."""
    target_ops_per_s: Optional[float] = None
    """Pace: the trace is accelerated so that it offers this rate (exclusive with accel)."""
    accel: Optional[float] = None
    """Pace: fixed acceleration factor of the trace's own timing."""
    loop: bool = True
    """Start the trace over when it ends (the phase runs until stopped)."""
    synth_rows: int = 100_000
    """Rows synthesised before filtering; doubled (up to 64x) until `requests` fit."""
    synth: tuple = ()
    """Extra synthesis options (AzureSynthOptions / SvdSynthOptions fields) as pairs."""
    path: Optional[str] = None
    """source = "file": trace path (relative to the phase file)."""
    format: str = "azure"
    start_unix_ms: Optional[int] = None
    end_unix_ms: Optional[int] = None
    scaled_by: tuple = ()
    """(factor key, factor) when the pace was stated relative to capacity
    (offered_write_bw, offered_read_bw or capacity_rate); target_ops_per_s is then the
    resolved rate."""


@dataclass(frozen=True)
class Phase:
    number: int
    name: str
    description: str
    interactive: ClassWorkload
    batch: ClassWorkload
    path: str = ""
    scaling: str = ""
    """How the offered load was scaled to capacity ("" for a phase paced in the file)."""

    @property
    def contended(self) -> bool:
        """True when a class's offered load is stated relative to measured capacity."""
        return bool(self.interactive.scaled_by or self.batch.scaled_by)


#: Top-level keys of a phase file.
_PHASE_KEYS = {"number", "name", "description", "interactive", "batch"}
#: Class-table keys that hold whole numbers, and the least value each may take.
_INT_KEYS = {"requests": 1, "clients": 1, "min_bytes": 0, "max_bytes": 0, "fixed_bytes": 1, "key_space": 1,
             "synth_rows": 1, "start_unix_ms": 0, "end_unix_ms": 0}
TRACE_FORMATS = ("azure", "native")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_class_values(d: dict, where: str) -> None:
    """ValueError naming the key for a value of the wrong type or out of range (TOML
    gives strings, booleans, arrays and tables where a number belongs otherwise)."""
    for key, lo in _INT_KEYS.items():
        if key in d and not (_is_int(d[key]) and d[key] >= lo):
            raise ValueError(f"{where}: {key} must be an integer >= {lo}, got {d[key]!r}")
    for key in ("target_ops_per_s", "accel"):
        if key in d and not (_is_number(d[key]) and math.isfinite(d[key]) and d[key] > 0):
            raise ValueError(f"{where}: {key} must be a finite number > 0, got {d[key]!r}")
    wr = d.get("write_ratio")
    if wr is not None and not (_is_number(wr) and 0 <= wr <= 1):
        raise ValueError(f"{where}: write_ratio must be a number in [0, 1], got {wr!r}")
    if "loop" in d and not isinstance(d["loop"], bool):
        raise ValueError(f"{where}: loop must be true or false, got {d['loop']!r}")
    if "synth" in d and not isinstance(d["synth"], dict):
        raise ValueError(f"{where}: synth must be a table of synthesis options, got {d['synth']!r}")
    fixed = sorted(set(d.get("synth", {})) & {"rows", "seed"})
    if fixed:
        # The phase sets them itself (synth_rows or requests, and the run's seed).
        raise ValueError(f"{where}: synth cannot set {', '.join(fixed)}: the phase sets "
                         "rows (synth_rows, or requests for svd) and seed (the run's --seed)")
    if "path" in d and not isinstance(d["path"], str):
        raise ValueError(f"{where}: path must be a string, got {d['path']!r}")
    if "format" in d and d["format"] not in TRACE_FORMATS:
        raise ValueError(f"{where}: format must be one of {TRACE_FORMATS}, not {d['format']!r}")
    if "min_bytes" in d and "max_bytes" in d and d["min_bytes"] > d["max_bytes"]:
        raise ValueError(f"{where}: min_bytes {d['min_bytes']} > max_bytes {d['max_bytes']}")


def _class_from_dict(d: Any, where: str, base_dir: str, capacity: CapacityLike = None) -> ClassWorkload:
    if not isinstance(d, dict):
        raise ValueError(f"{where}: must be a table of keys, got {d!r}")
    unknown = set(d) - _CLASS_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    for key in ("source", "requests", "clients"):
        if key not in d:
            raise ValueError(f"{where}: missing '{key}'")
    d = dict(d)
    if d["source"] not in SOURCES:
        raise ValueError(f"{where}: source must be one of {SOURCES}, not {d['source']!r}")
    paces = [k for k in PACE_KEYS if k in d]
    if len(paces) != 1:
        raise ValueError(f"{where}: give exactly one of {', '.join(PACE_KEYS)}"
                         + (f" (got {', '.join(paces)})" if paces else ""))
    _check_class_values(d, where)
    wr = d.get("write_ratio")
    if paces[0] in FACTOR_KEYS:
        key = paces[0]
        factor = d.pop(key)
        cap = load_capacity(capacity)
        d["target_ops_per_s"] = rate_for(key, factor, cap, request_bytes=d.get("fixed_bytes"), write_ratio=wr,
                                         where=where)
        d["scaled_by"] = (key, float(factor))
        if not (math.isfinite(d["target_ops_per_s"]) and d["target_ops_per_s"] > 0):
            raise ValueError(f"{where}: {key} = {factor!r} comes to {d['target_ops_per_s']!r} requests/s "
                             f"with {cap.describe()}")
    if d["source"] == "file":
        if "path" not in d:
            raise ValueError(f"{where}: source = 'file' needs a path")
        d["path"] = os.path.join(base_dir, os.path.expanduser(d["path"]))
    d["synth"] = tuple(sorted(d.get("synth", {}).items()))
    return ClassWorkload(**d)


def load_phase(n_or_path: Union[int, str, os.PathLike], capacity: CapacityLike = None) -> Phase:
    """A shipped phase by number (1-4 the thesis's, 5-6 contended) or a phase TOML file of
    the same layout. A class paced relative to capacity (offered_write_bw, offered_read_bw,
    capacity_rate) is resolved to target_ops_per_s with `capacity` (a capacity file path,
    a shipped device name, a dict or a `Capacity`; default $NVMW_CAPACITY, else the
    shipped optane-1dimm file; see nvmw.workloads.capacity). ValueError for a bad file,
    a bad factor or a missing capacity file. A number given as a string is ASCII digits 0-9:
    a word of other digits ("١", "²"; str.isdigit() is true for them) is a ValueError.
    Any integer type is a number (numpy's included); a bool (an int to isinstance, so True
    would be phase 1), a float or anything else that is not a path is a TypeError."""
    if isinstance(n_or_path, bool):
        raise TypeError(f"n_or_path must be a phase number or a phase file, not bool ({n_or_path!r})")
    if isinstance(n_or_path, str) and n_or_path.isdigit() and not n_or_path.isascii():
        raise ValueError(f"{n_or_path!r} is not a phase number (decimal digits 0-9) or a phase file")
    if isinstance(n_or_path, numbers.Integral) or (isinstance(n_or_path, str) and n_or_path.isascii()
                                                   and n_or_path.isdigit()):
        path = os.path.join(PHASE_DIR, f"phase{int(n_or_path)}.toml")
        if not os.path.exists(path):
            raise ValueError(f"no shipped phase {n_or_path}: choose one of {list_phases()}")
    elif isinstance(n_or_path, (str, os.PathLike)):
        path = os.fspath(n_or_path)
    else:
        raise TypeError(f"n_or_path must be a phase number (an integer) or a phase file path, "
                        f"not {type(n_or_path).__name__} ({n_or_path!r})")
    try:
        with jsonfiles.open_input(path, "rb") as fh:
            data = tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a phase file (not valid TOML: {e})") from None
    except RecursionError:  # tomllib recurses once per nested array or table
        raise ValueError(f"{path}: not a phase file (TOML nested too deeply)") from None
    unknown = set(data) - _PHASE_KEYS
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)} (a phase file has {sorted(_PHASE_KEYS)})")
    for key in ("number", "interactive", "batch"):
        if key not in data:
            raise ValueError(f"{path}: missing '{key}'")
    if not (_is_int(data["number"]) and data["number"] >= 0):
        raise ValueError(f"{path}: number must be an integer >= 0, got {data['number']!r}")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise ValueError(f"{path}: {key} must be a string, got {data[key]!r}")
    base = os.path.dirname(os.path.abspath(path))
    needs_capacity = any(k in data[c] for c in ("interactive", "batch") for k in FACTOR_KEYS
                         if isinstance(data[c], dict))
    cap = load_capacity(capacity) if needs_capacity else None
    inter = _class_from_dict(data["interactive"], f"{path} [interactive]", base, cap)
    batch = _class_from_dict(data["batch"], f"{path} [batch]", base, cap)
    scaling = ""
    if cap is not None:
        parts = [f"{cls} {spec.scaled_by[1]:g} x {FACTOR_KEYS[spec.scaled_by[0]]} = {spec.target_ops_per_s:,.0f} ops/s"
                 for cls, spec in (("interactive", inter), ("batch", batch)) if spec.scaled_by]
        scaling = "; ".join(parts) + f" [{cap.describe()}]"
    return Phase(number=int(data["number"]), name=str(data.get("name", f"phase{data['number']}")),
                 description=str(data.get("description", "")), interactive=inter, batch=batch, path=path,
                 scaling=scaling)


def describe_phase_set(phases: Sequence[int] = DEFAULT_PHASES, capacity: CapacityLike = None) -> str:
    """One line naming a set of shipped phases and how the contended ones were scaled
    (what every report's run header states)."""
    gentle, contended, scaling = [], [], ""
    for n in phases:
        ph = load_phase(int(n), capacity)
        (contended if ph.contended else gentle).append(str(ph.number))
        if ph.contended and not scaling:
            scaling = ph.scaling.rpartition(" [")[2].rstrip("]")
    out = []
    if gentle:
        out.append(f"{','.join(gentle)} (paced in the phase files)")
    if contended:
        out.append(f"{','.join(contended)} (contended, scaled to {scaling})")
    return " + ".join(out)


def list_phases() -> list[int]:
    """Numbers of the shipped phases."""
    out = []
    for name in os.listdir(PHASE_DIR):
        if name.startswith("phase") and name.endswith(".toml") and name[5:-5].isascii() and name[5:-5].isdigit():
            out.append(int(name[5:-5]))
    return sorted(out)


@functools.lru_cache(maxsize=32)
def build_trace(spec: ClassWorkload, seed: int, key_prefix: str = "") -> "_core.Trace":
    """The phase side's trace: source, size filter, request cut, transforms. Cached:
    the same (spec, seed) always gives the same trace, and RL episodes rebuild often."""
    if spec.source == "file":
        base = traces.read_trace(spec.path, spec.format, skip_malformed=True,
                                 start_unix_ms=spec.start_unix_ms, end_unix_ms=spec.end_unix_ms)
        cut = traces.shape(base, min_bytes=spec.min_bytes, max_bytes=spec.max_bytes,
                           max_records=spec.requests)
    else:
        rows = spec.synth_rows if spec.source == "azure" else spec.requests
        for _ in range(7):
            base = traces.synth(spec.source, rows=rows, seed=seed, **dict(spec.synth))
            cut = traces.shape(base, min_bytes=spec.min_bytes, max_bytes=spec.max_bytes,
                               max_records=spec.requests)
            if len(cut) >= spec.requests:
                break
            rows *= 2
    if len(cut) == 0:
        raise ValueError(f"phase trace is empty after filtering ({spec})")
    return traces.shape(cut, fixed_bytes=spec.fixed_bytes, write_ratio=spec.write_ratio,
                        key_space=spec.key_space, key_prefix=key_prefix or None, seed=seed)


def _accel(spec: ClassWorkload, trace: "_core.Trace", rate_scale: float) -> float:
    if spec.accel is not None:
        accel = float(spec.accel) * rate_scale
        what = f"accel {spec.accel:g} x rate scale {rate_scale:g}: the pace"
    else:
        # Native rate of the trace as the replay schedules it (span plus one mean gap).
        native = _core.Replay(trace, {"threads": 1, "preload": False}).offered_ops_per_s
        accel = float(spec.target_ops_per_s) * rate_scale / native
        what = f"target {spec.target_ops_per_s:g} ops/s x rate scale {rate_scale:g}: the pace"
    return traces.check_pace(trace, accel, what)


class PhaseWorkload:
    """Co-runs a phase's interactive and batch replays in the background on a running
    `_core.Middleware` (``nvmw.Middleware(...).core``).

    start() preloads the keys the replays read (first start only) and returns at once;
    stop() stops both replays, waits for requests in flight and returns their results.
    Restartable (start again after stop); the traces are a function of (phase, seed), so
    a seed reproduces the offered workload. `rate_scale` multiplies both target rates.
    """

    def __init__(self, phase: Union[Phase, int, str], core_middleware: "_core.Middleware",
                 seed: int = 0, *, rate_scale: float = 1.0):
        self.phase = phase if isinstance(phase, Phase) else load_phase(phase)
        if not rate_scale > 0:
            raise ValueError(f"rate_scale must be > 0, got {rate_scale}")
        self.core_middleware = core_middleware
        self.seed = int(seed)
        self.rate_scale = float(rate_scale)
        self.results_: Optional[dict] = None
        self._replays: dict[str, Any] = {}
        for cls, spec, prefix, salt in (("interactive", self.phase.interactive, "i/", 0),
                                        ("batch", self.phase.batch, "b/", 7919)):
            trace = build_trace(spec, self.seed * 2 + 1 + salt, prefix)
            opts = dict(threads=spec.clients, cls=cls, accel=_accel(spec, trace, self.rate_scale),
                        loop=spec.loop, duration_s=0.0, preload=True, seed=self.seed)
            self._replays[cls] = _core.Replay(trace, opts)

    @property
    def running(self) -> bool:
        return any(r.running for r in self._replays.values())

    def start(self) -> "PhaseWorkload":
        if self.running:
            raise RuntimeError("phase workload already running")
        started = []
        try:
            for r in self._replays.values():
                r.start(self.core_middleware)
                started.append(r)
        except BaseException:
            for r in started:
                r.stop()
                r.join()
            raise
        return self

    def stop(self) -> dict:
        """Stop both replays; returns {"interactive": result, "batch": result}."""
        for r in self._replays.values():
            r.stop()
        self.results_ = {cls: r.join() for cls, r in self._replays.items()}
        return self.results_

    def offered_ops_per_s(self) -> float:
        """Requests per second the two schedules offer together (for plots)."""
        return sum(self.offered_by_class().values())

    def offered_by_class(self) -> dict:
        return {cls: float(r.offered_ops_per_s) for cls, r in self._replays.items()}

    def issued(self) -> dict:
        return {cls: int(r.issued) for cls, r in self._replays.items()}

    def __enter__(self) -> "PhaseWorkload":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _sim_class_workload(spec, trace, accel: float) -> dict:
    recs = trace.records()
    t0 = float(recs[0][0]) if recs else 0.0
    t = [(float(r[0]) - t0) / accel for r in recs]
    span = float(t[-1]) if t else 0.0
    # As the replay loops: one mean gap closes the loop (nvmw/src/workload/replay.cc).
    gap = span / (len(t) - 1) if len(t) > 1 and span > 0 else 1e6 / accel
    return {"times_us": t, "writes": [1 if r[1] == "write" else 0 for r in recs],
            "bytes": [int(r[3]) for r in recs], "period_us": span + max(gap, 1e-3),
            "clients": int(spec.clients)}


#: Bumped when the cached form of phase_workloads changes. Version 2 stores it with
#: `marshal` (plain lists, numbers and dicts), read back about ten times faster than JSON.
_WORKLOAD_CACHE_VERSION = 2


def workload_cache_dir() -> Optional[str]:
    """Where phase_workloads keeps its results between processes: $NVMW_CACHE_DIR, else
    $XDG_CACHE_HOME/nvmw, else ~/.cache/nvmw (each + /sim-workloads); NVMW_CACHE_DIR=""
    turns the cache off."""
    root = os.environ.get("NVMW_CACHE_DIR")
    if root is None:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                            "nvmw")
    return os.path.join(root, "sim-workloads") if root else None


def _workload_cache_path(ph: "Phase", seed: int, rate_scale: float) -> Optional[str]:
    root = workload_cache_dir()
    if root is None:
        return None
    try:
        core = os.stat(_core.__file__)  # the trace synthesis is the core's: a rebuilt core misses
        stamp = f"{core.st_size}:{core.st_mtime_ns}"
    except (OSError, AttributeError):
        stamp = "?"
    key = repr((_WORKLOAD_CACHE_VERSION, ph, int(seed), float(rate_scale), stamp))
    return os.path.join(root, f"phase{ph.number}-{hashlib.sha256(key.encode()).hexdigest()[:24]}.marshal")


@functools.lru_cache(maxsize=64, typed=True)  # typed: True is not served phase 1's entry
def phase_workloads(phase: int, seed: int, rate_scale: float = 1.0) -> tuple[dict, dict, float]:
    """(interactive, batch, offered ops/s) of a shipped phase as the simulator takes them
    (arrival times, write flags, sizes, loop period, clients per class), built from the
    very traces `PhaseWorkload(phase, seed=seed)` replays. Kept in memory and on disk
    (`workload_cache_dir`, keyed by the phase definition, seed, rate scale and the core
    build), since synthesising the traces takes longer than simulating an episode.
    `phase` is an integer (a bool, a float or a string is a TypeError)."""
    if isinstance(phase, bool):
        raise TypeError(f"phase must be a phase number, not bool ({phase!r})")
    try:
        phase = operator.index(phase)
    except TypeError:
        raise TypeError(f"phase must be a phase number, not {type(phase).__name__}") from None
    ph = load_phase(phase)
    path = _workload_cache_path(ph, seed, rate_scale)
    if path is not None:
        try:
            with open(path, "rb") as fh:
                wi, wb, offered = marshal.loads(fh.read())  # load(fh) reads in small pieces: slower
            return wi, wb, float(offered)
        except (OSError, ValueError, TypeError, EOFError):
            pass
    out = []
    offered = 0.0
    for spec, prefix, salt in ((ph.interactive, "i/", 0), (ph.batch, "b/", 7919)):
        trace = build_trace(spec, seed * 2 + 1 + salt, prefix)
        w = _sim_class_workload(spec, trace, _accel(spec, trace, rate_scale))
        offered += len(w["times_us"]) / (w["period_us"] / 1e6)
        out.append(w)
    if path is not None:
        try:  # written whole, then renamed: a reader never sees half a file
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as fh:
                marshal.dump([out[0], out[1], offered], fh)
            os.replace(tmp, path)
        except (OSError, ValueError):
            pass
    return out[0], out[1], offered


__all__ = ["ClassWorkload", "Phase", "PhaseWorkload", "load_phase", "list_phases", "build_trace",
           "phase_workloads", "workload_cache_dir", "describe_phase_set", "PHASE_DIR", "DEFAULT_PHASES", "PACE_KEYS"]
