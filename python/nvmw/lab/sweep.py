"""The concurrency sweep of thesis 4.2 / Appendix B: a YCSB interactive workload
co-running with an SVD-like batch replay, first with no concurrency control (the
baseline), then through the middleware for every (interactive, batch) pool pair of a
grid. Interactive p99 comes from the YCSB clients, batch throughput from the replay.

`run_sweep(SweepConfig(...)) -> summary dict` is the one entry point (CLI, demo and
calibration all use it); with an output directory it also writes sweep.csv,
summary.json and sweep.png (a Figure B.1-style plot)."""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from nvmw import _core, jsonfiles
from nvmw.errors import Interrupted
from nvmw.middleware import DEFAULT_MAX_THREADS, Middleware
from nvmw.scratch import scratch_dir
from nvmw.workloads import traces
from nvmw.workloads.counts import count_in
from nvmw.workloads.ycsb import THREADS_MAX, YcsbConfig, YcsbWorkload

DEFAULT_GRID_I = (1, 2, 4, 8, 16, 32)
DEFAULT_GRID_B = (1, 2, 4, 8, 16, 24, 32)
QUICK_GRID_I = (1, 4, 32)
QUICK_GRID_B = (1, 4, 32)
#: The most repetitions per configuration (`reps`, `nvmw sweep --reps`): a repetition is
#: `duration_s` of YCSB beside the batch replay, so the default 43 configurations of 5 s
#: at the bound take 6 hours.
REPS_MAX = 100
DEVICES = ("none", "optane-1dimm", "optane-6dimm")

#: CSV columns, one row per configuration x repetition.
CSV_FIELDS = (
    "config", "control", "interactive_threads", "batch_threads", "rep", "duration_s",
    "ycsb_ops", "ycsb_ops_per_s", "ycsb_p50_us", "ycsb_p99_us", "ycsb_p999_us", "ycsb_mean_us",
    "ycsb_max_us", "ycsb_errors", "batch_ops", "batch_ops_per_s", "batch_mb_per_s",
    "batch_p99_us", "batch_lag_p99_us", "batch_errors",
)
#: Keys every summary holds (tests and `nvmw calibrate` rely on them).
SUMMARY_KEYS = (
    "baseline_p99_us", "best_p99_us", "best_p99_config", "p99_improvement_x",
    "baseline_throughput", "best_throughput", "best_throughput_config",
    "throughput_improvement_x", "device", "cores",
)

# The Wukong SVD job's object sizes (trace synthesiser defaults: 80 MB row/Q blocks,
# 8 MB R_i, 160 MB stacked R, 168 MB factorisation, 8 KB singular values), which
# `batch_scale` shrinks so that 100 clients fit this machine's memory.
_SVD_SIZES = {"block_bytes": 80_000_000, "r_bytes": 8_000_000,
              "stacked_r_bytes": 160_000_000, "factor_bytes": 168_000_000}


@dataclass
class SweepConfig:
    """Parameters of one sweep (defaults: the thesis's Figure B.1 zipfian 128 B 50/50 run)."""

    grid_i: tuple = DEFAULT_GRID_I
    """Interactive pool sizes to try."""
    grid_b: tuple = DEFAULT_GRID_B
    """Batch pool sizes to try (every pair with grid_i is one configuration)."""
    reps: int = 3
    """Repetitions per configuration (each a fresh store and middleware)."""
    duration_s: float = 5.0
    """Timed co-run per repetition."""
    ycsb_clients: int = 100
    """YCSB closed-loop client threads (thesis: 100)."""
    batch_clients: int = 100
    """Replay client threads (thesis: 100)."""
    value_bytes: int = 128
    """YCSB value size (thesis: 64 and 128 B)."""
    read_proportion: float = 0.5
    """YCSB reads; the rest are updates (thesis: 0.5 and 1.0)."""
    distribution: str = "zipfian"
    """YCSB key distribution (thesis: zipfian and uniform)."""
    record_count: int = 10_000
    """YCSB records loaded before each repetition."""
    batch_rows: int = 4000
    """Records of the synthetic SVD trace (looped for the whole run)."""
    batch_scale: float = 0.01
    """Factor on the SVD object sizes (0.01: 800 KB blocks, 80 KB R_i, 1.6 MB R)."""
    batch_key_space: int = 256
    """Distinct batch keys (bounds the store's memory)."""
    batch_accel: float = 1000.0
    """Pace acceleration of the SVD trace; large = batch clients always busy."""
    device: str = "none"
    """Emulated device profile: none | optane-1dimm | optane-6dimm."""
    engine: str = "memory"
    """memory, or pmem (a pool on /dev/shm; run with PMEM_IS_PMEM_FORCE=1)."""
    window_s: float = 1.0
    """Middleware monitor window."""
    interval_s: float = 0.5
    """YCSB p99 is also taken per interval of this length: the box-plot samples."""
    no_control_max_inflight: int = 200
    """Baseline: operations allowed at once (thesis: 200)."""
    seed: int = 1
    """Seed of the YCSB streams and the SVD trace."""
    out_dir: Optional[str] = None
    """Write sweep.csv, summary.json and sweep.png here (None: return the summary only)."""
    plot: bool = True
    """Draw sweep.png when out_dir is set."""
    quick: bool = False
    """Informational: the run used the --quick preset."""

    def ycsb_config(self, rep: int) -> YcsbConfig:
        """The YCSB side of repetition `rep` (the rest of the ops are updates)."""
        return YcsbConfig(record_count=self.record_count, operation_count=0,
                          duration_s=self.duration_s, read_proportion=self.read_proportion,
                          update_proportion=round(1.0 - self.read_proportion, 12),
                          distribution=self.distribution, value_bytes=self.value_bytes,
                          threads=self.ycsb_clients, request_class="interactive",
                          seed=self.seed * 1000 + rep, interval_s=self.interval_s)

    def validate(self) -> "SweepConfig":
        for name in ("grid_i", "grid_b"):
            grid = getattr(self, name)
            if not grid or any(int(v) < 1 or int(v) != v for v in grid):
                raise ValueError(f"{name} must be a non-empty list of integers >= 1, got {grid!r}")
            if any(int(v) > DEFAULT_MAX_THREADS for v in grid):
                # The middleware would clamp them: the sweep would measure another configuration
                # than the one it names.
                raise ValueError(f"{name} values must be in [1, {DEFAULT_MAX_THREADS}] (the middleware's "
                                 f"max_threads), got {grid!r}")
            if len(set(int(v) for v in grid)) != len(grid):
                # Each configuration would be swept twice and reported twice under one name.
                raise ValueError(f"{name} names a pool size more than once: {grid!r}")
        count_in("reps", self.reps, 1, REPS_MAX)
        if not self.duration_s > 0:
            raise ValueError(f"duration_s must be > 0, got {self.duration_s}")
        count_in("ycsb_clients", self.ycsb_clients, 1, THREADS_MAX)
        count_in("batch_clients", self.batch_clients, 1, THREADS_MAX)
        if not 0 <= self.read_proportion <= 1:
            raise ValueError(f"read_proportion must be in [0, 1], got {self.read_proportion}")
        if self.engine not in ("memory", "pmem"):
            raise ValueError(f"engine must be memory or pmem, not {self.engine!r}")
        if not self.batch_scale > 0:
            raise ValueError(f"batch_scale must be > 0, got {self.batch_scale}")
        if self.batch_key_space < 1 or self.batch_rows < 1:
            raise ValueError("batch_key_space and batch_rows must be >= 1")
        self.ycsb_config(0).validate()
        return self


def quick_config(**overrides: Any) -> SweepConfig:
    """The --quick preset: a 3x3 grid of the extremes and middle, 2 repetitions of 2.5 s
    (about a minute and a half on 2 cores). Clients stay at 100 + 100."""
    base = dict(grid_i=QUICK_GRID_I, grid_b=QUICK_GRID_B, reps=2, duration_s=2.5, quick=True)
    base.update(overrides)
    return SweepConfig(**base)


def batch_trace(cfg: SweepConfig) -> "_core.Trace":
    """The SVD-like batch trace of the sweep: Wukong's job shape with object sizes
    scaled by `batch_scale`, keys folded onto `batch_key_space` and prefixed "svd/"."""
    sizes = {k: max(4096, int(v * cfg.batch_scale)) for k, v in _SVD_SIZES.items()}
    trace = _core.synth_svd(dict(sizes, rows=cfg.batch_rows, seed=cfg.seed))
    return trace.transform({"key_space": cfg.batch_key_space, "key_prefix": "svd/",
                            "seed": cfg.seed})


def _open_middleware(cfg: SweepConfig, control: bool, i: int, b: int, pool_dir: Optional[str]):
    kwargs = dict(interactive_threads=i, batch_threads=b, window_s=cfg.window_s, control=control,
                  no_control_max_inflight=cfg.no_control_max_inflight)
    path = os.path.join(pool_dir, "sweep.pool") if cfg.engine == "pmem" else None
    if cfg.engine == "pmem":
        # Batch objects are replaced out of place: room for every key twice over.
        kwargs["pool_size"] = max(1 << 30, 4 * cfg.batch_key_space * _largest_batch_bytes(cfg))
    return Middleware(path, engine=cfg.engine, device=cfg.device, **kwargs)


def _largest_batch_bytes(cfg: SweepConfig) -> int:
    return max(4096, int(max(_SVD_SIZES.values()) * cfg.batch_scale))


def _run_once(cfg: SweepConfig, trace, control: bool, i: int, b: int, rep: int) -> tuple:
    """One co-run: fresh store + middleware, YCSB load, then YCSB and replay together."""
    with scratch_dir("nvmw-sweep-") as pool_dir:
        with _open_middleware(cfg, control, i, b, pool_dir) as mw:
            ycsb = YcsbWorkload(mw, cfg.ycsb_config(rep))
            ycsb.load()
            replay = _core.Replay(trace, {"threads": cfg.batch_clients, "cls": "batch",
                                          "accel": cfg.batch_accel, "loop": True,
                                          "duration_s": cfg.duration_s, "seed": cfg.seed + rep})
            replay.start(mw.core)  # preloads the keys the trace reads, then starts
            ycsb.start()
            y = ycsb.join()
            r = replay.join()
    a = y["all"]
    # Per-interval p99s (whole intervals only) are the spread of one repetition.
    samples = [iv["p99_us"] for iv in y["intervals"]
               if iv["ops"] > 0 and iv["start_s"] + cfg.interval_s <= y["elapsed_s"] + 1e-9]
    row = {
        "config": f"{i}/{b}" if control else "baseline", "control": control,
        "interactive_threads": i if control else 0, "batch_threads": b if control else 0,
        "rep": rep, "duration_s": round(y["elapsed_s"], 4),
        "ycsb_ops": a["ops"], "ycsb_ops_per_s": a["ops_per_s"], "ycsb_p50_us": a["p50_us"],
        "ycsb_p99_us": a["p99_us"], "ycsb_p999_us": a["p999_us"], "ycsb_mean_us": a["mean_us"],
        "ycsb_max_us": a["max_us"], "ycsb_errors": a["errors"],
        "batch_ops": r["all"]["ops"], "batch_ops_per_s": r["ops_per_s"],
        "batch_mb_per_s": r["bytes_per_s"] / 1e6, "batch_p99_us": r["all"]["p99_us"],
        "batch_lag_p99_us": r["lag_p99_us"], "batch_errors": r["errors"],
    }
    return row, samples or [a["p99_us"]]


def _configs(cfg: SweepConfig) -> list:
    out = [(False, 0, 0)]
    out += [(True, int(i), int(b)) for i in cfg.grid_i for b in cfg.grid_b]
    return out


def run_sweep(config: Optional[SweepConfig] = None,
              progress: Optional[Callable[[str], None]] = None) -> dict:
    """Run the baseline and every grid configuration `reps` times; return the summary.

    The summary holds SUMMARY_KEYS plus the run's settings and, under "configs", per
    configuration the median p99 / throughputs over repetitions and the p99 samples of
    the box plot. Improvement ratios compare medians: p99 baseline / best p99, best batch
    ops/s / baseline ops/s (each at its own best configuration, as the thesis reports)."""
    cfg = (config or SweepConfig()).validate()
    say = progress or (lambda line: None)
    trace = batch_trace(cfg)
    traces.check_pace(trace, cfg.batch_accel, "batch_accel")
    load_before = os.getloadavg()[0]  # the machine is shared: say how busy it was
    rows: list = []
    per_config: list = []
    plan = _configs(cfg)
    t_start = time.monotonic()
    for n, (control, i, b) in enumerate(plan, 1):
        name = f"{i}/{b}" if control else "baseline"
        reps, samples = [], []
        for rep in range(cfg.reps):
            try:
                row, s = _run_once(cfg, trace, control, i, b, rep)
            except KeyboardInterrupt:
                _interrupted(cfg, rows + reps, per_config, len(plan), t_start)
            reps.append(row)
            samples.extend(s)
        rows.extend(reps)
        entry = {
            "config": name, "control": control, "interactive_threads": i, "batch_threads": b,
            "p99_us": statistics.median(r["ycsb_p99_us"] for r in reps),
            "ycsb_ops_per_s": statistics.median(r["ycsb_ops_per_s"] for r in reps),
            "batch_ops_per_s": statistics.median(r["batch_ops_per_s"] for r in reps),
            "batch_mb_per_s": statistics.median(r["batch_mb_per_s"] for r in reps),
            "errors": sum(r["ycsb_errors"] + r["batch_errors"] for r in reps),
            "p99_samples_us": samples,
        }
        per_config.append(entry)
        say(f"[{n:>2}/{len(plan)}] {name:>9}: ycsb p99 {entry['p99_us']:>10.1f} us  "
            f"ycsb {entry['ycsb_ops_per_s']:>9.0f} ops/s  batch {entry['batch_ops_per_s']:>8.0f} ops/s "
            f"({entry['batch_mb_per_s']:.0f} MB/s)  [{time.monotonic() - t_start:.0f} s]")

    summary = summarize(cfg, per_config)
    summary["elapsed_s"] = round(time.monotonic() - t_start, 2)
    summary["loadavg_1min_start"] = load_before
    summary["loadavg_1min_end"] = os.getloadavg()[0]
    if cfg.out_dir:
        os.makedirs(cfg.out_dir, exist_ok=True)
        write_csv(os.path.join(cfg.out_dir, "sweep.csv"), rows)
        with jsonfiles.open_output(os.path.join(cfg.out_dir, "summary.json")) as f:
            json.dump(summary, f, indent=2, sort_keys=True)
        if cfg.plot:
            plot_sweep(summary, os.path.join(cfg.out_dir, "sweep.png"))
        summary["files"] = {k: os.path.join(cfg.out_dir, v) for k, v in
                            (("csv", "sweep.csv"), ("json", "summary.json"), ("png", "sweep.png"))
                            if k != "png" or cfg.plot}
        _remove_stale(cfg, [os.path.basename(p) for p in summary["files"].values()], say)
    return summary


#: The files a sweep writes in its output directory.
OUTPUT_FILES = ("sweep.csv", "summary.json", "sweep.png")


def _remove_stale(cfg: SweepConfig, written: list, say: Callable[[str], None]) -> list:
    """Remove the sweep files of an earlier run in cfg.out_dir that this run did not write
    (sweep.png without a plot, summary.json after an early Ctrl-C), saying so; they would
    read as this run's. Other files are left alone."""
    removed = jsonfiles.remove_stale(cfg.out_dir, OUTPUT_FILES, written)
    if removed:
        say(f"removed {', '.join(removed)} of an earlier run from {cfg.out_dir} (not written by this one)")
    return removed


def _interrupted(cfg: SweepConfig, rows: list, per_config: list, planned: int, t_start: float) -> None:
    """Ctrl-C: keep what was measured (the rows of finished repetitions in sweep.csv and,
    once the baseline and one configuration are done, their summary marked interrupted)
    and raise nvmw.errors.Interrupted saying so."""
    summary = None
    if any(not c["control"] for c in per_config) and any(c["control"] for c in per_config):
        summary = summarize(cfg, per_config)
        summary.update(interrupted=True, configs_done=len(per_config), configs_planned=planned,
                       elapsed_s=round(time.monotonic() - t_start, 2))
    if not cfg.out_dir or not rows:
        raise Interrupted(f"no repetition had finished ({len(per_config)} of {planned} configurations); "
                          "nothing written", partial=summary)
    os.makedirs(cfg.out_dir, exist_ok=True)
    write_csv(os.path.join(cfg.out_dir, "sweep.csv"), rows)
    written = ["sweep.csv"]
    if summary is not None:
        with jsonfiles.open_output(os.path.join(cfg.out_dir, "summary.json")) as f:
            json.dump(summary, f, indent=2, sort_keys=True)
        written.append("summary.json")
    removed = jsonfiles.remove_stale(cfg.out_dir, OUTPUT_FILES, written)
    raise Interrupted(f"wrote the {len(rows)} finished repetitions ({len(per_config)} of {planned} "
                      f"configurations complete) to {cfg.out_dir}: {', '.join(written)}"
                      + (f"; removed {', '.join(removed)} of an earlier run" if removed else ""), partial=summary)


def summarize(cfg: SweepConfig, per_config: list) -> dict:
    """Summary dict from per-configuration medians (baseline first)."""
    base = next(c for c in per_config if not c["control"])
    grid = [c for c in per_config if c["control"]]
    best_lat = min(grid, key=lambda c: c["p99_us"])
    best_thr = max(grid, key=lambda c: c["batch_ops_per_s"])
    # The configurations that beat the baseline on both axes at once, best p99 first.
    both = sorted((c for c in grid if c["p99_us"] < base["p99_us"]
                   and c["batch_ops_per_s"] >= base["batch_ops_per_s"]), key=lambda c: c["p99_us"])

    def ratio(a: float, b: float) -> Optional[float]:
        return a / b if b > 0 else None  # no ratio to a zero (JSON has no infinity)

    return {
        "baseline_p99_us": base["p99_us"],
        "best_p99_us": best_lat["p99_us"],
        "best_p99_config": best_lat["config"],
        "p99_improvement_x": ratio(base["p99_us"], best_lat["p99_us"]),
        "baseline_throughput": base["batch_ops_per_s"],
        "best_throughput": best_thr["batch_ops_per_s"],
        "best_throughput_config": best_thr["config"],
        "throughput_improvement_x": ratio(best_thr["batch_ops_per_s"], base["batch_ops_per_s"]),
        "throughput_unit": "batch replay ops/s",
        "baseline_batch_mb_per_s": base["batch_mb_per_s"],
        "best_p99_batch_ops_per_s": best_lat["batch_ops_per_s"],
        "best_throughput_p99_us": best_thr["p99_us"],
        "configs_beating_baseline_on_both": [c["config"] for c in both],
        "device": cfg.device,
        "engine": cfg.engine,
        "cores": os.cpu_count() or 1,
        "window_s": cfg.window_s,
        "ycsb_clients": cfg.ycsb_clients,
        "batch_clients": cfg.batch_clients,
        "duration_s": cfg.duration_s,
        "reps": cfg.reps,
        "quick": cfg.quick,
        "grid_i": list(cfg.grid_i),
        "grid_b": list(cfg.grid_b),
        "workload": {
            "ycsb": {"distribution": cfg.distribution, "value_bytes": cfg.value_bytes,
                     "read_proportion": cfg.read_proportion, "record_count": cfg.record_count},
            "batch": {"trace": "svd-synthetic", "rows": cfg.batch_rows,
                      "size_scale": cfg.batch_scale, "key_space": cfg.batch_key_space,
                      "accel": cfg.batch_accel, "loop": True},
        },
        "no_control_max_inflight": cfg.no_control_max_inflight,
        "configs": per_config,
    }


def write_csv(path: str, rows: list) -> None:
    with jsonfiles.open_output(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in CSV_FIELDS})


def plot_sweep(summary: dict, path: str) -> None:
    """Figure B.1 style: box plot of the YCSB p99 per configuration (log axis, whiskers
    min..max) and the batch throughput as a line on a twin axis; the baseline in blue."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = summary["configs"]
    labels = ["none" if not c["control"] else c["config"] for c in configs]
    xs = list(range(1, len(configs) + 1))
    fig, ax = plt.subplots(figsize=(max(8.0, 0.32 * len(configs) + 3), 4.8))
    box = ax.boxplot([c["p99_samples_us"] for c in configs], positions=xs, widths=0.6,
                     whis=(0, 100), patch_artist=True, showfliers=False,
                     medianprops={"color": "black"})
    for k, patch in enumerate(box["boxes"]):
        base = not configs[k]["control"]
        patch.set_facecolor("#4c72b0" if base else "#55a868")
        patch.set_alpha(0.8)
    ax.set_yscale("log")
    ax.set_ylabel("YCSB p99 latency (µs, log)")
    ax.set_xlabel("configuration I/B (interactive/batch threads); none = no concurrency control")
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    ax2 = ax.twinx()
    thr = [c["batch_ops_per_s"] for c in configs]
    ax2.plot(xs[1:], thr[1:], color="#dd8452", marker=".", label="batch throughput")
    ax2.axhline(thr[0], color="#4c72b0", linestyle="--", label="baseline throughput")
    ax2.set_ylabel("batch replay throughput (ops/s)")
    ax2.set_ylim(bottom=0)
    ax2.legend(loc="upper left", fontsize=8)
    wl = summary["workload"]["ycsb"]
    ax.set_title(f"YCSB {wl['distribution']} {wl['value_bytes']} B, "
                 f"{int(wl['read_proportion'] * 100)}% reads, + SVD-like batch; device "
                 f"{summary['device']}, {summary['cores']} cores, "
                 f"{summary['ycsb_clients']}+{summary['batch_clients']} clients", fontsize=9)
    fig.tight_layout()
    try:
        jsonfiles.save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)


def config_from_dict(d: dict) -> SweepConfig:
    """SweepConfig from a dict (unknown keys raise ValueError)."""
    names = {f.name for f in dataclasses.fields(SweepConfig)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"unknown sweep option(s): {sorted(unknown)}")
    return SweepConfig(**d)
