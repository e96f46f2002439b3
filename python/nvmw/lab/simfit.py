"""Fitting the simulator to the real system and checking the fit (`nvmw sim fit|check`).

The free parameters of `nvmw.rl.sim.SimEnv` are fitted by Nelder-Mead to a real
calibration sweep (`nvmw calibrate --sweep-out`): every configuration of the sweep is run
through the simulator exactly as the calibration sweep runs it, and the fit reports how
well the model ranks configurations (Spearman) and its p99/throughput errors."""
from __future__ import annotations

import math
import time
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.stats import spearmanr
from tqdm.auto import tqdm

from nvmw import jsonfiles
from nvmw.lab.calibration import SWEEP_WINDOWS_MAX, sweep_env, windows_by_config
from nvmw.rl.sim import FIT_NAMES, SimEnv, load_params
from nvmw.rl.simrun import check_count


#: The most simulated windows per configuration `simulate_sweep` (`nvmw sim fit|check
#: --windows`) takes, SWEEP_WINDOWS_MAX as a calibration sweep's (`nvmw.lab.calibration`),
#: and the most evaluations `fit` (`--max-evals`) makes. The default
#: calibration sweep has 216 configurations (6x6 threads in 6 phases), so a sweep at the
#: windows bound is 216,000 windows (about 0.1 GB of rows, minutes per pass), and a fit at
#: both bounds would take weeks: far past any fit made on purpose (the defaults are 8 and
#: 150), near enough that a mistyped number is an error, not a run without end.
FIT_EVALS_MAX = 10_000


def per_config(rows: Sequence[Mapping[str, Any]]) -> dict:
    """{(phase, i, b): (median p99_us, median throughput, 90th-percentile p99_us)} of sweep
    rows (one row per window). (i, b) = (0, 0) is the no-control baseline."""
    return {(ph, i, b): (float(np.median(l)), float(np.median(t)), float(np.quantile(l, 0.9)))
            for ph, d in windows_by_config(rows).items() for (i, b), (l, t) in d.items()}


def simulate_sweep(rows_or_configs, params: Mapping, *, window_s: float, windows: int = 4, settle_windows: int = 1,
                   device: str = "optane-1dimm", seed: int = 0, sla: Any = None, exact: bool = False) -> dict:
    """Run the sweep's configurations through the simulator as the calibration sweep runs
    them (`nvmw.lab.calibration.sweep_env`: one simulator per phase, set_threads, settle,
    measure; (0, 0) = a no-control run of the phase); returns per_config() of the
    simulated windows. `exact` as SimEnv's (False: fast-forward). `windows` is at most
    SWEEP_WINDOWS_MAX."""
    windows = check_count(windows, "windows", SWEEP_WINDOWS_MAX)
    if isinstance(rows_or_configs, Mapping):
        keys = sorted(rows_or_configs)
    else:
        keys = sorted({(int(r["phase"]), int(r["interactive_threads"]), int(r["batch_threads"]))
                       for r in rows_or_configs})
    by_phase: dict = {}
    for (ph, i, b) in keys:
        by_phase.setdefault(ph, []).append((i, b))
    out_rows: list[dict] = []
    for ph, configs in sorted(by_phase.items()):
        if (0, 0) in configs:
            env = SimEnv(ph, window_s=window_s, device=device, params=dict(params), sla=sla, control=False,
                         max_episode_steps=10**9, exact=exact)
            env.reset(seed=seed + ph)
            for k in range(settle_windows + windows):
                info = env.step(0)[4]
                if k >= settle_windows:
                    out_rows.append({"phase": ph, "interactive_threads": 0, "batch_threads": 0,
                                     "p99_us": info["p99_us"], "throughput": info["throughput"]})
        controlled = [c for c in configs if c != (0, 0)]
        if controlled:
            env = SimEnv(ph, window_s=window_s, device=device, params=dict(params), sla=sla, max_episode_steps=10**9,
                         exact=exact)
            out_rows += sweep_env(env, phases=(ph,), configs=controlled, windows=windows,
                                  settle_windows=settle_windows, seed=seed)
    return per_config(out_rows)


def compare(real: Mapping, sim: Mapping) -> dict:
    """How well `sim` reproduces `real` ({(phase,i,b): (p99, tp)}): per phase and overall,
    Spearman rank correlation of p99 across configurations, median absolute relative
    error of p99 and throughput, and whether the best configuration (lowest p99) agrees."""
    def summary(keys):
        rp = np.array([real[k][0] for k in keys])
        sp = np.array([sim[k][0] for k in keys])
        rt = np.array([real[k][1] for k in keys])
        st = np.array([sim[k][1] for k in keys])
        if not keys:
            return {"configs": 0}
        rho = float(spearmanr(rp, sp).statistic) if len(keys) > 2 else float("nan")
        rho_tp = float(spearmanr(rt, st).statistic) if len(keys) > 2 and np.ptp(rt) > 0 and np.ptp(st) > 0 else float("nan")
        return {"configs": len(keys), "spearman_p99": rho, "spearman_throughput": rho_tp,
                "p99_median_abs_rel_error": float(np.median(np.abs(sp - rp) / np.maximum(rp, 1e-9))),
                "throughput_median_abs_rel_error": float(np.median(np.abs(st - rt) / np.maximum(rt, 1e-9))),
                "p99_q90_median_abs_rel_error": float(np.median(
                    np.abs(np.array([sim[k][2] for k in keys]) - np.array([real[k][2] for k in keys]))
                    / np.maximum(np.array([real[k][2] for k in keys]), 1e-9))),
                "real_best": "I{}B{}".format(*keys[int(np.argmin(rp))][1:]),
                "sim_best": "I{}B{}".format(*keys[int(np.argmin(sp))][1:])}

    keys = sorted(k for k in set(real) & set(sim) if k[1:] != (0, 0))
    phases = sorted({k[0] for k in keys})
    per_phase = {str(ph): summary([k for k in keys if k[0] == ph]) for ph in phases}
    overall = summary(keys)
    nc = sorted(k for k in set(real) & set(sim) if k[1:] == (0, 0))
    if nc:
        overall["no_control"] = {str(k[0]): {"real_p99_median": real[k][0], "sim_p99_median": sim[k][0],
                                             "real_p99_q90": real[k][2], "sim_p99_q90": sim[k][2]} for k in nc}
    overall["spearman_p99_mean_over_phases"] = float(np.mean([v["spearman_p99"] for v in per_phase.values()]))
    return {"overall": overall, "per_phase": per_phase}


def _loss(real: Mapping, sim: Mapping) -> float:
    """Mean over configurations of squared log errors of median p99, 90th-percentile p99
    and median throughput. No-control runs count as one configuration each: the model's
    purpose is ranking thread configurations (the agent only acts in controlled mode), and
    its no-control tail is not captured (see docs/sim.md), so they are reported, not chased."""
    keys = sorted(set(real) & set(sim))
    e = [sum(math.log(max(sim[k][j], 1.0) / max(real[k][j], 1.0)) ** 2 for j in (0, 1, 2)) for k in keys]
    return float(np.mean(e))


#: Where the fit starts unless told otherwise: the C++ defaults with the CPU-cost jitter
#: a shared VM shows (p99 of 0.1 s windows is dominated by scheduling noise).
FIT_START = {"background": 0.05, "client_cpu_us": 10.0, "wake_cpu_us": 20.0, "op_cpu_us": 2.0,
             "copy_bytes_per_ns": 5.0, "jitter": 1.0, "quantum_us": 100.0}

_BOUNDS = {"background": (0.0, 0.9), "client_cpu_us": (0.1, 500.0), "wake_cpu_us": (0.1, 500.0),
           "op_cpu_us": (0.05, 200.0), "copy_bytes_per_ns": (0.2, 50.0), "jitter": (0.0, 2.0), "quantum_us": (1.0, 20000.0),
           "spin_us": (0.1, 1000.0)}
#: Parameters `fit` may move: FIT_NAMES and spin_us (the middleware's spin setting, fitted
#: only on request: its effective value on a loaded VM need not be the configured one).
FITTABLE = (*FIT_NAMES, "spin_us")


def fit(rows: Sequence[Mapping[str, Any]], *, window_s: float, device: str = "optane-1dimm", cores: float = 2.0,
        start: Optional[Mapping] = None, windows: int = 4, max_evals: int = 120, seed: int = 0,
        progress: bool = False, names: Sequence[str] = FIT_NAMES) -> dict:
    """Fit the simulator's free parameters to a real sweep (rows as written by
    `nvmw calibrate --sweep-out`): Nelder-Mead on the mean squared log error of each
    configuration's median p99 and throughput. `names`: the parameters moved (default
    FIT_NAMES; any of FITTABLE), the others stay at `start`'s values.
    `windows` is at most SWEEP_WINDOWS_MAX and `max_evals` at most FIT_EVALS_MAX.
    Returns {"params", "fit", "run"}."""
    windows = check_count(windows, "windows", SWEEP_WINDOWS_MAX)
    max_evals = check_count(max_evals, "max_evals", FIT_EVALS_MAX)
    names = tuple(names)
    bad = sorted(set(names) - set(FITTABLE))
    if bad or not names:
        raise ValueError(f"cannot fit {bad or 'nothing'}; fittable: {list(FITTABLE)}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        # A second coordinate of the simplex would move nothing (the last one sets the value).
        raise ValueError(f"parameters to fit named more than once: {twice}")
    real = per_config(rows)
    if not real:
        raise ValueError("empty sweep")
    base = load_params(start if start is not None else FIT_START)
    base["cores"] = float(cores)
    # Search in a transformed space: logs of positive costs, raw fractions.
    def to_x(p):
        # Start inside the bounds (a quantum of 0, processor sharing, starts at 1 us).
        v = {n: min(_BOUNDS[n][1], max(_BOUNDS[n][0], float(p[n]))) for n in names}
        return np.array([v[n] if n in ("background", "jitter") else math.log(v[n]) for n in names])

    def to_p(x):
        p = dict(base)
        for n, v in zip(names, x):
            lo, hi = _BOUNDS[n]
            v = float(v) if n in ("background", "jitter") else math.exp(float(v))
            p[n] = min(hi, max(lo, v))
        return p

    bar = None
    if progress:
        bar = tqdm(total=max_evals, desc="sim fit", unit="eval")
    best = {"loss": float("inf"), "params": base}
    t0 = time.perf_counter()

    def objective(x):
        p = to_p(x)
        sim = simulate_sweep(real, p, window_s=window_s, windows=windows, device=device, seed=seed)
        loss = _loss(real, sim)
        if loss < best["loss"]:
            best.update(loss=loss, params=p)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{best['loss']:.3f}")
        return loss

    x0 = to_x(base)
    simplex = [x0] + [x0 + np.eye(len(x0))[j] * (0.5 if names[j] == "jitter" else 0.2 if names[j] == "background" else 0.7)
                      for j in range(len(x0))]
    minimize(objective, x0, method="Nelder-Mead",
             options={"maxfev": max_evals, "initial_simplex": np.array(simplex), "xatol": 1e-2, "fatol": 1e-3})
    if bar is not None:
        bar.close()
    params = best["params"]
    sim = simulate_sweep(real, params, window_s=window_s, windows=windows, device=device, seed=seed + 1)
    report = compare(real, sim)
    report["loss"] = _loss(real, sim)
    report["evaluations"] = max_evals
    report["fit_seconds"] = round(time.perf_counter() - t0, 1)
    return {"params": {k: round(float(v), 6) for k, v in params.items()}, "fit": report,
            "run": {"device": device, "window_s": window_s, "windows_per_config": windows, "cores": cores,
                    "real_configs": len(real), "fitted": list(names)}}


def plot_check(real: Mapping, sim: Mapping, path: str, title: str = "") -> None:
    """Real vs simulated median p99 per configuration, one panel per phase (log-log)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rep = compare(real, sim)
    phases = sorted({k[0] for k in real if k in sim})
    fig, axes = plt.subplots(1, len(phases), figsize=(3.6 * len(phases), 3.6), squeeze=False)
    for ax, ph in zip(axes[0], phases):
        keys = [k for k in real if k[0] == ph and k in sim and k[1:] != (0, 0)]
        x = [real[k][0] for k in keys]
        y = [sim[k][0] for k in keys]
        c = [np.log2(k[2]) for k in keys]
        sc = ax.scatter(x, y, c=c, s=14, cmap="viridis")
        nc = (ph, 0, 0)
        if nc in real and nc in sim:
            ax.scatter([real[nc][0]], [sim[nc][0]], marker="x", color="tab:red", s=40, label="no control")
            x, y = x + [real[nc][0]], y + [sim[nc][0]]
        lo, hi = min(x + y) * 0.8, max(x + y) * 1.2
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.7, label="simulated = real")
        ax.legend(fontsize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("real p99, median window (us)")
        ax.set_ylabel("simulated p99, median window (us)")
        r = rep["per_phase"][str(ph)]
        ax.set_title(f"phase {ph}: Spearman {r['spearman_p99']:.2f}", fontsize=9)
    fig.colorbar(sc, ax=axes[0][-1], label="log2 batch threads")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    try:
        jsonfiles.save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)


__all__ = ["fit", "compare", "simulate_sweep", "per_config", "plot_check", "FIT_START", "FITTABLE",
           "SWEEP_WINDOWS_MAX", "FIT_EVALS_MAX"]
