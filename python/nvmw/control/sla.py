"""SLA specifications and the thesis reward (Algorithm 1).

An `SLASpec` holds the goals and the min/max scaling bounds of Algorithm 1; specs live in
TOML files (python/nvmw/data/sla/). `reward()` is Algorithm 1 as a pure function, and
`SLASpec.evaluate(stats)` is the one place a window's stats become metrics (p99,
throughput, met flags, reward)."""
from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from nvmw import jsonfiles

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on old interpreters
    import tomli as tomllib

_CLASSES = ("interactive", "batch", "all")


@dataclass
class SLASpec:
    """Goals and scaling bounds of thesis Algorithm 1 (names as in the algorithm)."""

    lat_goal: float = 250.0
    """Tail-latency goal in microseconds (the observed p99 must be <= this)."""
    tp_goal: float = 250_000.0
    """Throughput goal in operations per second (observed ops/s must be >= this)."""
    min_value: float = 0.0
    """Lower end of the min-max scaling, shared by latency and throughput (line 2-5)."""
    max_latency: float = 500_000.0
    """Latency (us) that maps to max_scale_lat."""
    max_throughput: float = 2_000_000.0
    """Throughput (ops/s) that maps to max_scale_tp."""
    max_scale_lat: float = 1000.0
    """Top of the scaled latency range."""
    max_scale_tp: float = 10.0
    """Top of the scaled throughput range."""
    min_scale: float = 1.0
    """Bottom of both scaled ranges."""
    lat_penalty: float = 500.0
    """Weight of the scaled latency error when the latency goal is missed."""
    tp_penalty: float = 5000.0
    """Weight of the scaled throughput error when the throughput goal is missed."""
    latency_class: str = "interactive"
    """Which class's p99 is held to lat_goal: interactive | batch | all."""
    throughput_class: str = "all"
    """Which class's ops/s is held to tp_goal: interactive | batch | all."""
    name: str = ""
    """Free-form label (e.g. 'thesis', 'calibrated-optane-1dimm')."""
    notes: str = ""
    """Where the numbers came from (machine, sweep, window length)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError for a spec Algorithm 1 cannot use."""
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in ("float", float):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ValueError(f"SLASpec.{f.name} must be a finite number, got {v!r}")
        if self.max_latency <= self.min_value:
            raise ValueError("SLASpec.max_latency must exceed min_value (division by zero in Algorithm 1)")
        if self.max_throughput <= self.min_value:
            raise ValueError("SLASpec.max_throughput must exceed min_value (division by zero in Algorithm 1)")
        if self.lat_goal <= 0 or self.tp_goal <= 0:
            raise ValueError("SLASpec goals must be positive")
        for attr in ("max_scale_lat", "max_scale_tp"):
            # Equal ends would scale every value to one point (every window meets the goal);
            # reversed ends would reverse the goal tests.
            if getattr(self, attr) <= self.min_scale:
                raise ValueError(f"SLASpec.{attr} must exceed min_scale "
                                 f"({getattr(self, attr)!r} <= {self.min_scale!r})")
        for attr, scale in (("lat_penalty", "max_scale_lat"), ("tp_penalty", "max_scale_tp")):
            penalty = getattr(self, attr)
            if penalty < 0:
                raise ValueError(f"SLASpec.{attr} must be >= 0 (a negative one rewards a missed goal), "
                                 f"got {penalty!r}")
            # A window a million times past the top of the scale must still get a finite
            # reward: an infinite one turns every mean and quantile of a run into NaN.
            if not math.isfinite(penalty * (getattr(self, scale) - self.min_scale) * 1e6):
                raise ValueError(f"SLASpec.{attr} is too large: a window far outside the scale would get an infinite "
                                 f"reward, got {penalty!r}")
        for attr, top, scale in (("lat_goal", "max_latency", "max_scale_lat"),
                                 ("tp_goal", "max_throughput", "max_scale_tp")):
            top_value, scale_value = getattr(self, top), getattr(self, scale)
            for x in (getattr(self, attr), top_value):
                if not math.isfinite(_scale(x, self, top_value, scale_value)):
                    raise ValueError(f"SLASpec.{attr} and {top} are too large: their scaled values overflow")
        for attr in ("name", "notes"):
            if not isinstance(getattr(self, attr), str):
                raise ValueError(f"SLASpec.{attr} must be a string, got {getattr(self, attr)!r}")
        for attr in ("latency_class", "throughput_class"):
            if getattr(self, attr) not in _CLASSES:
                raise ValueError(f"SLASpec.{attr} must be one of {_CLASSES}, got {getattr(self, attr)!r}")

    # --- TOML -----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SLASpec":
        """Build from a mapping with the field names; unknown keys are an error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown SLA spec keys: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return cls(**dict(data))

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> "SLASpec":
        """Read a spec from a TOML file whose top-level table (or [sla]) has the field names."""
        try:
            with jsonfiles.open_input(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise FileNotFoundError(f"SLA spec file not found: {path}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not valid TOML: {e}") from None
        except RecursionError:  # tomllib recurses once per nested array or table
            raise ValueError(f"{path}: not valid TOML: nested too deeply") from None
        if "sla" in data and isinstance(data["sla"], dict):
            beside = sorted(set(data) - {"sla"})
            if beside:
                # A misplaced key or table would otherwise be ignored, its value never used.
                raise ValueError(f"{path}: keys or tables beside [sla]: {', '.join(beside)} (an SLA spec "
                                 "is one [sla] table)")
            data = data["sla"]
        missing = [k for k in ("lat_goal", "tp_goal") if k not in data]
        if missing:
            # An empty or cut-short file would otherwise pass with the built-in goals.
            raise ValueError(f"{path}: an SLA spec states lat_goal and tp_goal; no {' and no '.join(missing)}")
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from None

    def to_toml(self) -> str:
        """The spec as TOML text (round-trips through from_toml)."""
        lines = ["# nvmw SLA spec: goals and scaling bounds of the reward (thesis Algorithm 1)", "[sla]"]
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, str):
                esc = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
                lines.append(f'{f.name} = "{esc}"')
            else:
                lines.append(f"{f.name} = {float(v)!r}")
        return "\n".join(lines) + "\n"

    def save(self, path: str | os.PathLike) -> None:
        with jsonfiles.open_output(path, encoding="utf-8") as fh:
            fh.write(self.to_toml())

    # --- helpers --------------------------------------------------------------------
    def latency_met(self, p99_us: float) -> bool:
        """Algorithm 1's latency test, on the scaled values (equivalent to p99 <= lat_goal)."""
        return _scale(p99_us, self, self.max_latency, self.max_scale_lat) <= _scale(
            self.lat_goal, self, self.max_latency, self.max_scale_lat)

    def throughput_met(self, throughput: float) -> bool:
        return _scale(throughput, self, self.max_throughput, self.max_scale_tp) >= _scale(
            self.tp_goal, self, self.max_throughput, self.max_scale_tp)

    def measure(self, stats: Mapping[str, Any]) -> tuple[float, float]:
        """(p99_us, ops_per_s) of the classes this spec judges, from a window-stats dict.

        The SLA counts requests served, not requests that failed (the monitor's `ops`
        include its `errors`): the throughput is the throughput class's ops/s times
        (ops - errors) / ops. A window in which the latency class had
        requests (completed, or waiting at the window's end) but served none (no
        completion, or every one an error) has no tail latency of served requests: its
        p99 is taken as the window's length (`duration_s`), since none was served within
        it. A window in which the class had no requests at all is idle: p99 0, goal met.
        A non-finite value is refused (ValueError naming it)."""
        lat, tp = stats[self.latency_class], stats[self.throughput_class]
        p99, throughput = float(lat["p99_us"]), float(tp["ops_per_s"])
        for cls, key, v in ((self.latency_class, "p99_us", p99), (self.throughput_class, "ops_per_s", throughput)):
            if not math.isfinite(v):
                raise ValueError(f"window stats: {cls} {key} is {v!r}, not a finite number")
        ops, errors = tp.get("ops"), tp.get("errors")
        if ops and errors:
            throughput *= max(0, int(ops) - int(errors)) / int(ops)
        ops, errors = lat.get("ops"), lat.get("errors") or 0
        if ops is not None and int(ops) <= int(errors) and (int(ops) > 0 or lat.get("queue_len_end", 0) > 0):
            duration_s = float(stats.get("duration_s", float("nan")))
            if not (math.isfinite(duration_s) and duration_s > 0):
                raise ValueError(f"window stats: duration_s is {duration_s!r}, not a positive number")
            p99 = max(p99, duration_s * 1e6)
        return p99, throughput

    def judge(self, p99_us: float, throughput: float) -> "Metrics":
        """The window's tail latency and throughput held against this spec: met flags and
        the Algorithm 1 reward."""
        return Metrics(p99_us=float(p99_us), throughput=float(throughput),
                       latency_met=bool(self.latency_met(p99_us)),
                       throughput_met=bool(self.throughput_met(throughput)),
                       reward=reward(p99_us, throughput, self))

    def evaluate(self, stats: Mapping[str, Any]) -> "Metrics":
        """`judge` of a window-stats dict (see `measure` for which classes count)."""
        return self.judge(*self.measure(stats))


@dataclass(frozen=True)
class Metrics:
    """One window as the SLA sees it: the values it judges, whether each goal was met,
    and the Algorithm 1 reward."""

    p99_us: float
    throughput: float
    latency_met: bool
    throughput_met: bool
    reward: float


def _scale(x: float, spec: SLASpec, max_x: float, max_scale: float) -> float:
    # Algorithm 1 lines 2-5: min-max scaling onto [min_scale, max_scale].
    return (max_scale - spec.min_scale) * (x - spec.min_value) / (max_x - spec.min_value) + spec.min_scale


def reward(p99_us: float, throughput: float, spec: SLASpec) -> float:
    """Thesis Algorithm 1: reward for one window given its tail latency (us) and throughput (ops/s).

    Followed line by line, including its quirk that the reward when both goals are met grows
    with the distance from the goals (line 9)."""
    if not (math.isfinite(p99_us) and math.isfinite(throughput)):
        raise ValueError(f"reward needs finite p99/throughput, got {p99_us!r}, {throughput!r}")
    lat = _scale(p99_us, spec, spec.max_latency, spec.max_scale_lat)            # line 2
    tp = _scale(throughput, spec, spec.max_throughput, spec.max_scale_tp)       # line 3
    lat_goal = _scale(spec.lat_goal, spec, spec.max_latency, spec.max_scale_lat)  # line 4
    tp_goal = _scale(spec.tp_goal, spec, spec.max_throughput, spec.max_scale_tp)  # line 5
    error_lat = abs(lat - lat_goal)                                             # line 6
    error_tp = abs(tp - tp_goal)                                                # line 7
    if lat <= lat_goal and tp >= tp_goal:                                       # line 8
        return float(10.0 * (error_lat + error_tp))                             # line 9
    if lat > lat_goal and tp < tp_goal:                                         # line 11
        return float(-1.0 * (spec.lat_penalty * error_lat + spec.tp_penalty * error_tp))
    if lat > lat_goal:                                                          # line 14
        return float(-1.0 * spec.lat_penalty * error_lat)
    return float(-1.0 * spec.tp_penalty * error_tp)                             # line 17


def sla_dir() -> str:
    from importlib import resources  # on first use: the import costs more than a simulator episode

    return str(resources.files("nvmw") / "data" / "sla")


def load_spec(name_or_path: str | os.PathLike | None = None, device: str | None = "optane-1dimm") -> SLASpec:
    """A spec from a path, or a shipped name ('thesis', 'calibrated-optane-1dimm').

    None means the default: the calibrated spec shipped for `device` (falls back to
    'calibrated-none' then 'thesis' if that device has no calibration)."""
    if name_or_path is not None:
        p = str(name_or_path)
        if os.path.exists(p):
            return SLASpec.from_toml(p)
        shipped = os.path.join(sla_dir(), p if p.endswith(".toml") else p + ".toml")
        if os.path.exists(shipped):
            return SLASpec.from_toml(shipped)
        avail = sorted(x[:-5] for x in os.listdir(sla_dir()) if x.endswith(".toml"))
        raise FileNotFoundError(f"SLA spec {p!r} is neither a file nor a shipped spec ({', '.join(avail)})")
    for cand in (f"calibrated-{device or 'none'}", "calibrated-none", "thesis"):
        path = os.path.join(sla_dir(), cand + ".toml")
        if os.path.exists(path):
            return SLASpec.from_toml(path)
    raise FileNotFoundError(f"no shipped SLA spec in {sla_dir()}")
