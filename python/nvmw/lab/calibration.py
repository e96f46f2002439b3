"""Calibration: derive SLA goals, scaling bounds and the per-phase best fixed configuration
(the oracle) for THIS machine from a sweep of fixed thread configurations."""
from __future__ import annotations

import itertools
import json
import math
import os
from typing import Any, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from nvmw import jsonfiles
from nvmw.control.controllers import Fixed, NoControl, OracleFixed
from nvmw.control.loop import drive
from nvmw.control.sla import SLASpec
from nvmw.rl.envs import ControlEnv
from nvmw.rl.simrun import WINDOW_S_RANGE, check_count
from nvmw.workloads.phases import DEFAULT_PHASES

DEFAULT_GRID = (1, 2, 4, 8, 16, 32)

#: The most measured windows per configuration of a sweep (`sweep_env`, `nvmw calibrate
#: --windows`, and `nvmw sim fit|check --windows` on the simulator), per phase and round of
#: a confirmation (`confirm_env`, `--confirm-windows`) and per phase of the no-control
#: baseline (`no_control_windows`, `--no-control-windows`); and the most rounds of a
#: confirmation (`--confirm-runs`). A window is one --window of real time on the
#: middleware and keeps a row of about 0.5 KB: the default sweep (216 configurations, 6x6
#: threads in 6 phases) at the bound is 216,000 windows, 6 hours of 0.1 s windows (2.5
#: days of 1 s ones) and about 0.1 GB of rows; a confirmation at both bounds is 600,000
#: windows of six phases (17 hours of 0.1 s windows). Far past any calibration made on
#: purpose (the defaults are 5 windows, 30 confirmation windows in 4 rounds).
SWEEP_WINDOWS_MAX = 1_000
CONFIRM_RUNS_MAX = 100


def _drive_windows(env: ControlEnv, make_controller, settle_windows: int, windows: int, obs, info,
                   rows: list[dict], ph: int, i: int, b: int):
    """Drives a controller from `make_controller` (a fresh one for each `drive` call) for
    `settle_windows + windows` windows, stepping past the env's own truncation, and appends
    one row per window after the first `settle_windows`, labelled phase `ph` and threads
    (`i`, `b`). Returns the last (obs, info)."""
    seen = [0]

    def record(_o, _a, _r, _no, _term, _trunc, info):
        seen[0] += 1
        if seen[0] <= settle_windows:
            return
        stats = info.get("stats") or {}
        rows.append({"phase": int(ph), "interactive_threads": i, "batch_threads": b,
                     "p99_us": info["p99_us"], "throughput": info["throughput"],
                     "p99_all_us": float(stats["all"]["p99_us"]) if stats else float("nan"),
                     "offered_ops_per_s": info["offered_ops_per_s"]})

    remaining = settle_windows + windows
    while remaining > 0:
        obs, info, n, _ended = drive(env, make_controller(), remaining, obs, info, on_step=record)
        remaining -= n
    return obs, info


def sweep_env(env: ControlEnv, *, phases: Sequence[int] = DEFAULT_PHASES, grid: Sequence[int] = DEFAULT_GRID,
              windows: int = 5, settle_windows: int = 1, seed: int = 0, progress: bool = False,
              configs: Sequence[tuple[int, int]] | None = None) -> list[dict]:
    """Every (interactive, batch) pair of `grid` (or the given `configs`, in order) in every
    phase, `windows` windows each (after `settle_windows` discarded), each configuration a
    fixed controller on the control loop. One row per window:
    phase, interactive_threads, batch_threads, p99_us (interactive), p99_all_us,
    throughput (all), offered_ops_per_s. `windows` is an integer in [1, SWEEP_WINDOWS_MAX]."""
    windows = check_count(windows, "windows", SWEEP_WINDOWS_MAX)
    rows: list[dict] = []
    configs = list(configs) if configs is not None else list(itertools.product(grid, grid))
    bar = None
    if progress:
        bar = tqdm(total=len(configs) * len(phases), desc="sweep", unit="cfg")
    for ph in phases:
        obs, info = env.reset(seed=seed + ph, options={"phase": int(ph), "threads": configs[0]})
        for (i, b) in configs:
            # One long episode per phase: keep stepping past the env's own truncation.
            obs, info = _drive_windows(env, lambda i=i, b=b: Fixed(i, b), settle_windows, windows,
                                       obs, info, rows, ph, i, b)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return rows


def no_control_windows(env: ControlEnv, *, phases: Sequence[int] = DEFAULT_PHASES, windows: int = 40,
                       settle_windows: int = 1, seed: int = 0, progress: bool = False) -> list[dict]:
    """The no-control baseline of every phase: `windows` windows (after `settle_windows`
    discarded) of an env built with control=False, reset with seed `seed + phase` as
    `sweep_env` does. Rows as `sweep_env`'s, with 0 interactive and 0 batch threads: what
    `nvmw sim fit` and `nvmw sim check` read as a no-control run. `windows` is an integer
    in [1, SWEEP_WINDOWS_MAX]."""
    windows = check_count(windows, "windows", SWEEP_WINDOWS_MAX)
    if env.control:
        raise ValueError("no_control_windows needs an env built with control=False")
    rows: list[dict] = []
    bar = tqdm(total=len(phases), desc="no-control", unit="phase") if progress else None
    for ph in phases:
        obs, info = env.reset(seed=seed + ph, options={"phase": int(ph)})
        _drive_windows(env, NoControl, settle_windows, windows, obs, info, rows, ph, 0, 0)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return rows


def windows_by_config(rows: Sequence[Mapping[str, Any]]) -> dict[int, dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]]:
    """{phase: {(i, b): (window p99s, window throughputs)}} of sweep rows."""
    acc: dict[int, dict[tuple[int, int], tuple[list, list]]] = {}
    for r in rows:
        d = acc.setdefault(int(r["phase"]), {})
        lat, tp = d.setdefault((int(r["interactive_threads"]), int(r["batch_threads"])), ([], []))
        lat.append(float(r["p99_us"]))
        tp.append(float(r["throughput"]))
    return {ph: {c: (np.asarray(l), np.asarray(t)) for c, (l, t) in d.items()} for ph, d in acc.items()}


RULES = ("attain", "quantile")


def promise_configs(rows: Sequence[Mapping[str, Any]], attain: float = 0.9) -> dict[int, tuple[int, int]]:
    """Per phase, the configuration with the smallest `attain`-quantile of its window p99s
    in the sweep: the one whose promise the rule "attain" takes (and a confirmation run
    re-measures)."""
    return {ph: _best_config(d, attain) for ph, d in windows_by_config(rows).items()}


def _best_config(d: Mapping[tuple[int, int], tuple[np.ndarray, np.ndarray]], attain: float) -> tuple[int, int]:
    return min(d, key=lambda c: float(np.quantile(d[c][0], attain)))


def confirm_env(env: ControlEnv, configs: Mapping[int, tuple[int, int]], *, runs: int = 4, windows: int = 30,
                settle_windows: int = 1, seed: int = 0, progress: bool = False) -> list[dict]:
    """Re-measures each phase's configuration (`configs`, {phase: (i, b)}) on fresh windows:
    `runs` rounds over the phases, each phase reset with its own seed per round (another
    stretch of its workload) and run for `windows` windows after `settle_windows`. Rows
    as `sweep_env`'s.

    A sweep measures each configuration on consecutive windows of one workload stretch, and
    a phase's window p99 has bursts that last longer than that: the configuration with the
    smallest quantile is partly the one that ran in the calmest stretch, so its sweep
    windows promise too little. Windows measured after the choice, at other times and on
    other stretches, do not share that luck. `runs` is an integer in [1, CONFIRM_RUNS_MAX]
    and `windows` in [1, SWEEP_WINDOWS_MAX]."""
    runs = check_count(runs, "runs", CONFIRM_RUNS_MAX)
    windows = check_count(windows, "windows", SWEEP_WINDOWS_MAX)
    rows: list[dict] = []
    bar = tqdm(total=runs * len(configs), desc="confirm", unit="phase") if progress else None
    for r in range(runs):
        for ph, (i, b) in configs.items():
            obs, info = env.reset(seed=seed + 1000 * (r + 1) + int(ph),
                                  options={"phase": int(ph), "threads": (int(i), int(b))})
            _drive_windows(env, lambda i=i, b=b: Fixed(int(i), int(b)), settle_windows, windows, obs, info,
                           rows, ph, int(i), int(b))
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return rows


def derive_spec(rows: Sequence[Mapping[str, Any]], *, rule: str = "attain", attain: float = 0.9,
                quantile: float = 0.25, name: str = "calibrated", notes: str = "",
                base: SLASpec | None = None, tp_peer: float = 0.02,
                confirm_rows: Sequence[Mapping[str, Any]] | None = None) -> tuple[SLASpec, dict[str, Any]]:
    """SLA goals from a sweep of fixed configurations (one row per window).

    rule "attain" (default): the tightest goals the best fixed configuration of EVERY phase
    meets on a fraction `attain` of its windows. Per phase and configuration, the
    `attain`-quantile of its window p99s is the latency it can promise; the phase's best
    promise is the smallest over configurations; lat_goal is the largest over phases.
    With `confirm_rows` (windows of each phase's chosen configuration measured after the
    sweep, `confirm_env`) the promise is the `attain`-quantile of those windows instead:
    on a 2-vCPU VM a sweep of 12 consecutive windows per configuration promised a goal
    that the oracle then met on 57-71 % of evaluation steps instead of 90 %, and splitting
    each configuration's own windows in halves did not correct it (the halves share the
    stretch of workload that made the configuration look best).
    tp_goal: per phase, the (1 - attain)-quantile of the throughput windows of the
    configuration that made the latency promise, pooled with the windows of every
    configuration of that phase whose median throughput is within `tp_peer` (2 %) of its
    median; the smallest over phases. Throughput tracks the offered load in open-loop
    workloads, so configurations that keep up deliver the same window-to-window
    fluctuation; a low quantile of one configuration's dozen windows is set by one or two
    windows and, on the 2-core sweep of 2026-11-27, put the goal where 20 % of the
    windows of the promise's peers fell short instead of the intended 10 %. Pooling
    estimates the same distribution from hundreds of windows.
    rule "quantile" (the first calibration): per phase the `quantile` of the
    configurations' median p99 and median throughput; lat_goal the largest over phases,
    tp_goal the smallest (lowered to the best throughput among a phase's latency-meeting
    configurations if needed). It describes the configuration space, not what a
    controller can promise: even the best configuration misses such a goal on many windows.
    Scaling bounds: min_value 0, max_latency / max_throughput twice the largest window
    seen. Penalties and scale ranges are the thesis's (from `base`)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if not 0 < quantile < 1:
        raise ValueError("quantile must be in (0, 1)")
    if not 0 < attain < 1:
        raise ValueError("attain must be in (0, 1)")
    if not 0 <= tp_peer < 1:
        raise ValueError("tp_peer must be in [0, 1)")
    win = windows_by_config(rows)
    if not win:
        raise ValueError("empty sweep")
    per = {ph: {c: (float(np.median(l)), float(np.median(t))) for c, (l, t) in d.items()} for ph, d in win.items()}
    promise: dict[int, Any] = {}
    if rule == "attain":
        lat_goal, tp_goal = 0.0, float("inf")
        confirmed = windows_by_config(confirm_rows) if confirm_rows else None
        for ph, d in win.items():
            cfg = _best_config(d, attain)
            lat = float(np.quantile(d[cfg][0], attain))
            detail: dict[str, Any] = {"p99_us_in_sample": lat}
            if confirmed is not None:
                again = confirmed.get(ph, {}).get(cfg)
                if again is None:
                    raise ValueError(f"the confirmation windows have none of phase {ph}'s configuration "
                                     f"I{cfg[0]}B{cfg[1]} (measured on another sweep?)")
                lat = float(np.quantile(again[0], attain))
                detail["confirm_windows"] = int(again[0].size)
            own = float(np.median(d[cfg][1]))
            peers = [c for c in d if abs(float(np.median(d[c][1])) - own) <= tp_peer * own]
            pooled = np.concatenate([d[c][1] for c in peers])
            tp = float(np.quantile(pooled, 1.0 - attain))
            promise[ph] = {"config": f"I{cfg[0]}B{cfg[1]}", "p99_us": lat, "throughput": tp,
                           "throughput_own_windows": float(np.quantile(d[cfg][1], 1.0 - attain)),
                           "throughput_peer_configs": len(peers), "throughput_windows": int(pooled.size),
                           **detail}
            lat_goal = max(lat_goal, lat)
            tp_goal = min(tp_goal, tp)
    else:
        lat_goal = max(float(np.quantile([v[0] for v in d.values()], quantile)) for d in per.values())
        tp_goal = min(float(np.quantile([v[1] for v in d.values()], quantile)) for d in per.values())
        for d in per.values():
            ok_lat = [tp for (lat, tp) in d.values() if lat <= lat_goal]
            if ok_lat and max(ok_lat) < tp_goal:
                tp_goal = max(ok_lat)
    feasible = {ph: sum(1 for (lat, tp) in d.values() if lat <= lat_goal and tp >= tp_goal) / len(d)
                for ph, d in per.items()}
    both_met = {ph: {f"I{c[0]}B{c[1]}": float(np.mean((l <= lat_goal) & (t >= tp_goal))) for c, (l, t) in d.items()}
                for ph, d in win.items()}
    max_lat = max(float(r["p99_us"]) for r in rows)
    max_tp = max(float(r["throughput"]) for r in rows)
    b = base or SLASpec()
    spec = SLASpec(lat_goal=round(lat_goal, 1), tp_goal=round(tp_goal, 0), min_value=0.0,
                   max_latency=float(np.ceil(2 * max(max_lat, lat_goal))),
                   max_throughput=float(np.ceil(2 * max(max_tp, tp_goal))),
                   max_scale_lat=b.max_scale_lat, max_scale_tp=b.max_scale_tp, min_scale=b.min_scale,
                   lat_penalty=b.lat_penalty, tp_penalty=b.tp_penalty, latency_class=b.latency_class,
                   throughput_class=b.throughput_class, name=name, notes=notes)
    report = {"rule": rule, "attain": attain, "quantile": quantile,
              "confirmed": bool(confirm_rows) and rule == "attain", "feasible_fraction_per_phase": feasible,
              "best_both_met_fraction_per_phase": {str(ph): max(v.values()) for ph, v in both_met.items()},
              "promise_per_phase": {str(ph): v for ph, v in promise.items()},
              "per_config": {str(ph): {f"I{c[0]}B{c[1]}": {"p99_us": v[0], "throughput": v[1],
                                                            "both_met": both_met[ph][f"I{c[0]}B{c[1]}"]}
                                       for c, v in d.items()} for ph, d in per.items()}}
    return spec, report


def calibrate(rows: Sequence[Mapping[str, Any]], **kw) -> tuple[SLASpec, dict[int, tuple[int, int]], dict]:
    """(spec, oracle table {phase: (i, b)}, report) from sweep rows."""
    spec, report = derive_spec(rows, **kw)
    table = OracleFixed.best_configs(rows, spec)
    report["oracle"] = {str(k): list(v) for k, v in table.items()}
    return spec, table, report


def load_sweep(paths: "str | os.PathLike | Sequence[str | os.PathLike]") -> tuple[list, dict | None]:
    """Rows of one or more sweep files written by `save_sweep` (`nvmw calibrate --sweep-out`;
    a bare list of rows is accepted too) and the first file's run header (None if no file
    has one). ValueError naming the file for a file that is not a sweep or a row or header
    value that is not what a sweep writes."""
    rows: list = []
    header = None
    for saved in _read_sweeps(paths):
        if isinstance(saved, dict):
            rows.extend(saved["rows"])
            header = header if header is not None else saved.get("run")
        else:
            rows.extend(saved)
    return rows, header


def load_confirmation(paths: "str | os.PathLike | Sequence[str | os.PathLike]") -> list:
    """The confirmation windows (`confirm_env`) saved with the sweep(s), [] if none."""
    return [r for saved in _read_sweeps(paths) if isinstance(saved, dict) for r in saved.get("confirm_rows", [])]


#: Row keys a sweep row must have: whole numbers (phase and pool sizes; 0, 0 is a
#: no-control run) and the window's measurements (finite, >= 0).
_ROW_INTS = ("phase", "interactive_threads", "batch_threads")
_ROW_VALUES = ("p99_us", "throughput")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_rows(rows: Any, path: Any, what: str) -> None:
    if not isinstance(rows, list):
        raise ValueError(f"{path}: {what} must be a list of rows, got {type(rows).__name__}")
    for k, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ValueError(f"{path}: {what}[{k}] is not an object: {r!r}")
        for key in _ROW_INTS + _ROW_VALUES:
            if key not in r:
                raise ValueError(f"{path}: {what}[{k}] has no {key}")
        for key in _ROW_INTS:
            if not (_is_int(r[key]) and r[key] >= 0):
                raise ValueError(f"{path}: {what}[{k}].{key} must be an integer >= 0, got {r[key]!r}")
        for key in _ROW_VALUES:
            v = r[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{path}: {what}[{k}].{key} must be a finite number >= 0, got {v!r}")


def _check_header(run: Any, path: Any) -> None:
    if not isinstance(run, dict):
        raise ValueError(f"{path}: run must be an object (the sweep's run header), got {type(run).__name__}")
    for key in ("window_s", "cores"):
        v = run.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or v <= 0):
            raise ValueError(f"{path}: run.{key} must be a finite number > 0, got {v!r}")
    lo, hi = WINDOW_S_RANGE
    if run.get("window_s") is not None and not lo <= run["window_s"] <= hi:
        raise ValueError(f"{path}: run.window_s must be in [{lo:g}, {hi:g}] s (the middleware's windows), "
                         f"got {run['window_s']!r}")
    if "device" in run and not isinstance(run["device"], str):
        raise ValueError(f"{path}: run.device must be a device profile name, got {run['device']!r}")


def _read_sweeps(paths) -> list:
    out = []
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        saved = jsonfiles.load(path, "a sweep file")
        if not (isinstance(saved, list) or (isinstance(saved, dict) and "rows" in saved)):
            raise ValueError(f"{path}: not a sweep file (nvmw calibrate --sweep-out)")
        if isinstance(saved, dict):
            _check_rows(saved["rows"], path, "rows")
            if "run" in saved:
                _check_header(saved["run"], path)
            if "confirm_rows" in saved:
                _check_rows(saved["confirm_rows"], path, "confirm_rows")
        else:
            _check_rows(saved, path, "rows")
        out.append(saved)
    return out


def save_sweep(path: "str | os.PathLike", rows: Sequence[Mapping[str, Any]], header: Mapping[str, Any],
               confirm_rows: Sequence[Mapping[str, Any]] = ()) -> None:
    """The sweep's rows, run header and confirmation windows, as `load_sweep` and
    `load_confirmation` read them."""
    out: dict[str, Any] = {"rows": list(rows), "run": dict(header)}
    if confirm_rows:
        out["confirm_rows"] = list(confirm_rows)
    with jsonfiles.open_output(path, encoding="utf-8") as fh:
        json.dump(out, fh)


def save_oracle(path: "str | os.PathLike", report: Mapping[str, Any], spec_name: str,
                header: Mapping[str, Any]) -> None:
    """The oracle table of a `calibrate` report as `OracleFixed.from_json` reads it."""
    with jsonfiles.open_output(path, encoding="utf-8") as fh:
        json.dump({"table": report["oracle"], "spec": spec_name, "run": dict(header)}, fh, indent=2)
