"""Calibration: derive SLA goals, scaling bounds and the per-phase best fixed configuration
(the oracle) for THIS machine from a sweep of fixed thread configurations."""
from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import numpy as np

from nvmw.rl.controllers import OracleFixed
from nvmw.rl.envs import ControlEnv
from nvmw.rl.sla import SLASpec

DEFAULT_GRID = (1, 2, 4, 8, 16, 32)


def sweep_env(env: ControlEnv, *, phases: Sequence[int] = (1, 2, 3, 4), grid: Sequence[int] = DEFAULT_GRID,
              windows: int = 5, settle_windows: int = 1, seed: int = 0, progress: bool = False) -> list[dict]:
    """Every (interactive, batch) pair of `grid` in every phase, `windows` windows each
    (after `settle_windows` discarded). One row per window: phase, interactive_threads,
    batch_threads, p99_us (interactive), p99_all_us, throughput (all), offered_ops_per_s."""
    rows: list[dict] = []
    configs = list(itertools.product(grid, grid))
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(configs) * len(phases), desc="sweep", unit="cfg")
    for ph in phases:
        env.reset(seed=seed + ph, options={"phase": int(ph), "threads": configs[0]})
        for (i, b) in configs:
            env.unwrapped.set_threads(i, b)
            for k in range(settle_windows + windows):
                _obs, _r, _term, _trunc, info = env.step(0)
                if k < settle_windows:
                    continue
                stats = info.get("stats") or {}
                rows.append({"phase": int(ph), "interactive_threads": i, "batch_threads": b,
                             "p99_us": info["p99_us"], "throughput": info["throughput"],
                             "p99_all_us": float(stats["all"]["p99_us"]) if stats else float("nan"),
                             "offered_ops_per_s": info["offered_ops_per_s"]})
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return rows


def _per_config(rows: Sequence[Mapping[str, Any]]) -> dict[int, dict[tuple[int, int], tuple[float, float]]]:
    acc: dict[int, dict[tuple[int, int], tuple[list, list]]] = {}
    for r in rows:
        d = acc.setdefault(int(r["phase"]), {})
        lat, tp = d.setdefault((int(r["interactive_threads"]), int(r["batch_threads"])), ([], []))
        lat.append(float(r["p99_us"]))
        tp.append(float(r["throughput"]))
    return {ph: {c: (float(np.median(l)), float(np.median(t))) for c, (l, t) in d.items()} for ph, d in acc.items()}


def derive_spec(rows: Sequence[Mapping[str, Any]], *, quantile: float = 0.25, name: str = "calibrated",
                notes: str = "", base: SLASpec | None = None) -> tuple[SLASpec, dict[str, Any]]:
    """Goals from the sweep: per phase, the `quantile` of the configurations' median
    interactive p99 and the `quantile` of their median throughput; lat_goal is the largest
    of those over phases (so in every phase the best quarter of configurations meets it)
    and tp_goal the smallest. The workloads are open-loop, so throughput tracks the offered
    load and only falls when a configuration falls behind: the lower-quartile goal flags
    exactly that. If in some phase no configuration meets both, tp_goal drops to the best
    throughput among that phase's latency-meeting configurations.
    Scaling bounds: min_value 0, max_latency / max_throughput twice the largest window
    seen. Penalties and scale ranges are the thesis's (from `base`)."""
    if not 0 < quantile < 1:
        raise ValueError("quantile must be in (0, 1)")
    per = _per_config(rows)
    if not per:
        raise ValueError("empty sweep")
    lat_goal = max(float(np.quantile([v[0] for v in d.values()], quantile)) for d in per.values())
    tp_goal = min(float(np.quantile([v[1] for v in d.values()], quantile)) for d in per.values())
    for d in per.values():
        ok_lat = [tp for (lat, tp) in d.values() if lat <= lat_goal]
        if ok_lat and max(ok_lat) < tp_goal:
            tp_goal = max(ok_lat)
    feasible = {ph: sum(1 for (lat, tp) in d.values() if lat <= lat_goal and tp >= tp_goal) / len(d)
                for ph, d in per.items()}
    max_lat = max(float(r["p99_us"]) for r in rows)
    max_tp = max(float(r["throughput"]) for r in rows)
    b = base or SLASpec()
    spec = SLASpec(lat_goal=round(lat_goal, 1), tp_goal=round(tp_goal, 0), min_value=0.0,
                   max_latency=float(np.ceil(2 * max(max_lat, lat_goal))),
                   max_throughput=float(np.ceil(2 * max(max_tp, tp_goal))),
                   max_scale_lat=b.max_scale_lat, max_scale_tp=b.max_scale_tp, min_scale=b.min_scale,
                   lat_penalty=b.lat_penalty, tp_penalty=b.tp_penalty, latency_class=b.latency_class,
                   throughput_class=b.throughput_class, name=name, notes=notes)
    report = {"feasible_fraction_per_phase": feasible, "quantile": quantile,
              "per_config": {str(ph): {f"I{c[0]}B{c[1]}": {"p99_us": v[0], "throughput": v[1]}
                                       for c, v in d.items()} for ph, d in per.items()}}
    return spec, report


def calibrate(rows: Sequence[Mapping[str, Any]], **kw) -> tuple[SLASpec, dict[int, tuple[int, int]], dict]:
    """(spec, oracle table {phase: (i, b)}, report) from sweep rows."""
    spec, report = derive_spec(rows, **kw)
    table = OracleFixed.best_configs(rows, spec)
    report["oracle"] = {str(k): list(v) for k, v in table.items()}
    return spec, table, report
