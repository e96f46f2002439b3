"""The interference experiment behind `nvmw demo`: an interactive client pool
(small values, 50/50 get/put) co-located with a batch client pool (large values),
run with no concurrency control and through the middleware, plus the interactive
pool alone as the reference."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from nvmw import jsonfiles
from nvmw.workloads.ycsb import YcsbConfig, YcsbWorkload
from nvmw.middleware import Middleware
from nvmw.scratch import scratch_dir


@dataclass
class InterferenceConfig:
    """Parameters of the interference table (defaults: the `nvmw demo` run: 100 + 100 clients,
    128 B interactive and 800 KB batch values)."""

    duration_s: float = 4.0
    """Timed run per scenario."""
    interactive_clients: int = 100
    """Closed-loop interactive client threads."""
    batch_clients: int = 100
    """Closed-loop batch client threads."""
    interactive_bytes: int = 128
    """Interactive value size."""
    batch_bytes: int = 800 * 1024
    """Batch value size."""
    interactive_records: int = 10_000
    batch_records: int = 256
    configs: list = field(default_factory=lambda: [(2, 1, 0), (4, 2, 0), (2, 1, 19)])
    """(interactive, batch[, batch_nice]) worker pools to show through the middleware."""
    engine: str = "pmem"
    """pmem (pool on tmpfs) or memory."""
    device: str = "none"
    """Emulated device profile."""
    pool_dir: Optional[str] = None
    """Where the temporary pool lives (default /dev/shm)."""
    seed: int = 1


def _run_scenario(cfg: InterferenceConfig, *, control: bool, threads=(1, 1),
                  with_batch: bool, batch_nice: int = 0) -> dict:
    with scratch_dir("nvmw-demo-", cfg.pool_dir) as d:
        path = os.path.join(d, "demo.pool") if cfg.engine == "pmem" else None
        pool_size = max(1 << 30, 4 * cfg.batch_records * cfg.batch_bytes)
        with Middleware(path, engine=cfg.engine, control=control, device=cfg.device,
                        interactive_threads=threads[0], batch_threads=threads[1],
                        pool_size=pool_size, window_s=1.0, batch_nice=batch_nice) as mw:
            inter = YcsbWorkload(mw, YcsbConfig(
                record_count=cfg.interactive_records, duration_s=cfg.duration_s,
                read_proportion=0.5, update_proportion=0.5, distribution="zipfian",
                value_bytes=cfg.interactive_bytes, threads=cfg.interactive_clients,
                load_threads=4, request_class="interactive", seed=cfg.seed))
            batch = None
            if with_batch:
                batch = YcsbWorkload(mw, YcsbConfig(
                    record_count=cfg.batch_records, duration_s=cfg.duration_s,
                    read_proportion=0.5, update_proportion=0.5, distribution="uniform",
                    value_bytes=cfg.batch_bytes, threads=cfg.batch_clients, load_threads=2,
                    request_class="batch", seed=cfg.seed + 1))
            inter.load()
            if batch is not None:
                batch.load()
                batch.start()
            t0 = time.perf_counter()
            r_inter = inter.run()
            r_batch = None
            if batch is not None:
                batch.stop()
                r_batch = batch.join()
            wall = time.perf_counter() - t0
    a = r_inter["all"]
    row = {"interactive_p50_us": a["p50_us"], "interactive_p99_us": a["p99_us"],
           "interactive_ops_per_s": a["ops_per_s"], "interactive_errors": a["errors"],
           "batch_ops_per_s": 0.0, "batch_mb_per_s": 0.0, "wall_s": wall}
    if r_batch is not None:
        b = r_batch["all"]
        row["batch_ops_per_s"] = b["ops_per_s"]
        row["batch_mb_per_s"] = b["ops_per_s"] * cfg.batch_bytes / 1e6
        row["batch_errors"] = b["errors"]
    return row


def run_interference(cfg: Optional[InterferenceConfig] = None,
                     progress: Optional[Callable[[str], None]] = None) -> dict:
    """Run every scenario; return ``{"config": ..., "rows": [{"scenario", ...}]}``."""
    cfg = cfg or InterferenceConfig()
    say = progress or (lambda _msg: None)
    scenarios = [("interactive alone", dict(control=False, with_batch=False)),
                 ("co-located, no control", dict(control=False, with_batch=True))]
    for c in cfg.configs:
        i, b, nice = (tuple(c) + (0,))[:3]
        name = f"co-located, nvmw I{i}/B{b}" + (f" nice{nice}" if nice else "")
        scenarios.append((name, dict(control=True, threads=(i, b), with_batch=True,
                                     batch_nice=nice)))
    rows = []
    for name, kw in scenarios:
        say(f"running: {name} ({cfg.duration_s:g} s)")
        row = _run_scenario(cfg, **kw)
        row["scenario"] = name
        rows.append(row)
    return {"config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
            "cores": os.cpu_count() or 1, "rows": rows}


def format_table(result: dict) -> str:
    """A plain-text table of the interference rows."""
    head = f"{'scenario':<33} {'int p50 µs':>11} {'int p99 µs':>11} {'int ops/s':>11} {'batch ops/s':>12} {'batch MB/s':>11}"
    lines = [head, "-" * len(head)]
    for r in result["rows"]:
        lines.append(f"{r['scenario']:<33} {r['interactive_p50_us']:>11.1f} {r['interactive_p99_us']:>11.1f} "
                     f"{r['interactive_ops_per_s']:>11.0f} {r['batch_ops_per_s']:>12.1f} {r['batch_mb_per_s']:>11.1f}")
    return "\n".join(lines)


def plot(result: dict, path: str) -> str:
    """Bar chart: interactive p99 (log scale) and batch throughput per scenario."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    names = [r["scenario"].replace(", ", ",\n") for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    colors = ["#888888", "#d62728"] + ["#1f77b4"] * (len(rows) - 2)
    heights = [max(r["interactive_p99_us"], 0.1) for r in rows]
    ax1.bar(names, heights, color=colors)
    ax1.set_yscale("log")
    # A full log axis (bars are not exaggerated by a high floor), with room above the
    # tallest bar for its label.
    ax1.set_ylim(bottom=1, top=max(heights + [1.0]) * 4)
    ax1.set_ylabel("interactive p99 latency (µs, log)")
    for x, r in enumerate(rows):
        ax1.annotate(f"{r['interactive_p99_us'] / 1000:.1f} ms", (x, max(r["interactive_p99_us"], 0.1)),
                     ha="center", va="bottom", fontsize=8)
    ax1.set_title("Tail latency of the interactive pool")
    ax2.bar(names, [r["batch_mb_per_s"] for r in rows], color=colors)
    ax2.set_ylabel("batch throughput (MB/s)")
    ax2.set_title("Throughput of the batch pool")
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", labelsize=8)
    c = result["config"]
    fig.suptitle(f"{c['interactive_clients']} interactive ({c['interactive_bytes']} B, 50/50) + "
                 f"{c['batch_clients']} batch clients ({c['batch_bytes'] // 1024} KB); "
                 f"engine {c['engine']}, device {c['device']}, {result['cores']} cores", fontsize=9)
    fig.tight_layout()
    try:
        jsonfiles.save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path
