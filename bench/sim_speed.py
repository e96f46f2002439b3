"""Simulator speed: simulated seconds per wall second for a 200 x 1 s episode of every
default phase, before and after, whole process and in process; and what the fast-forward
costs in fidelity against the exact mode at 1 s windows.

    python3 bench/sim_speed.py [--old-tree DIR --old-core DIR] [--rounds 3] [--controller NAME] [--out JSON]

- **Whole process**: `python -m nvmw sim run --phase N --controller fixed:32,8 --windows 200
  --window 1.0` in a subprocess (interpreter start, imports, trace loading, 201 windows,
  200 JSON lines), wall and CPU time (user + sys of the child); the trace cache
  (`nvmw.workloads.phases.workload_cache_dir`) warm, plus one cold run per phase for the
  current tree. With --old-tree/--old-core the same command runs against that source
  tree and core build (a worktree of the previous commit built with scripts/dev-core.sh),
  alternating with the current one, round by round.
- **In process**: the same episode through `nvmw.lab.phase_run.simulate_phase` after the
  imports, timed around the call (in a subprocess per tree, so each tree imports its own
  code); for the current tree also in the exact mode (`exact=True`).
- **Fast-forward vs exact** (current tree): per phase, a 4 x 4 grid of fixed
  configurations (1, 4, 16, 32 per class), 1 settle + 8 measured 1 s windows each, both
  modes from the same seed: Spearman rank correlation of the configurations' median
  interactive p99 between the modes, the median relative difference of median p99 and of
  median throughput, and the median window-to-window spread (90th minus 10th percentile
  over median) of p99 in each mode.

speedup = 200 simulated seconds / wall seconds; each phase reports the median over the
rounds and the slowest and fastest round. `--controller` measures another controller's
whole process the same way (the in-process and fidelity parts always use fixed:32,8). The
load average is recorded before and after; run it under the measurement lock on a quiet
machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _report import emit

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = (1, 2, 3, 4, 5, 6)
CONTROLLER = "fixed:32,8"
WINDOWS = 200
WINDOW_S = 1.0

_IN_PROCESS = r"""
import json, sys, time
t0 = time.perf_counter(); c0 = time.process_time()
from nvmw.lab.phase_run import simulate_phase
import inspect
exact_ok = "exact" in inspect.signature(simulate_phase).parameters
out = {"import_s": time.perf_counter() - t0}
simulate_phase(int(sys.argv[1]), controller=sys.argv[2], windows=1, window_s=float(sys.argv[4]))  # traces cached
for mode in (["fast", "exact"] if exact_ok else ["only"]):
    kw = {"exact": True} if mode == "exact" else {}
    t = time.perf_counter(); c = time.process_time()
    rows = simulate_phase(int(sys.argv[1]), controller=sys.argv[2], windows=int(sys.argv[3]),
                          window_s=float(sys.argv[4]), **kw)
    out[mode] = {"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c, "windows": len(rows),
                 "median_interactive_p99_us": sorted(r["interactive_p99_us"] for r in rows)[len(rows) // 2],
                 "median_ops_per_s": sorted(r["ops_per_s"] for r in rows)[len(rows) // 2]}
print(json.dumps(out))
"""


def loadavg() -> list:
    with open("/proc/loadavg") as fh:
        return [float(x) for x in fh.read().split()[:3]]


def tree_env(src: str, core: str | None) -> dict:
    env = dict(os.environ)
    # As an installed package runs: byte-compiled once (kept out of the tree), not per run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join("/tmp", "nvmw-sim-speed-pycache")
    env["PYTHONPATH"] = os.path.join(src, "python")
    if core:
        env["NVMW_DEV_CORE_DIR"] = core
    else:
        env.pop("NVMW_DEV_CORE_DIR", None)
    return env


def whole_process(env: dict, phase: int, controller: str = CONTROLLER) -> dict:
    argv = [sys.executable, "-m", "nvmw", "sim", "run", "--phase", str(phase), "--controller", controller,
            "--windows", str(WINDOWS), "--window", str(WINDOW_S)]
    r0 = os.times()
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    r1 = os.times()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv}: exit {proc.returncode}: {proc.stderr[-500:]}")
    lines = proc.stdout.splitlines()
    cpu = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    return {"wall_s": wall, "cpu_s": cpu, "windows": len(lines), "speedup_wall": WINDOWS * WINDOW_S / wall,
            "speedup_cpu": WINDOWS * WINDOW_S / cpu if cpu > 0 else None}


def in_process(env: dict, phase: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", _IN_PROCESS, str(phase), CONTROLLER, str(WINDOWS), str(WINDOW_S)],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"in-process phase {phase}: {proc.stderr[-500:]}")
    out = json.loads(proc.stdout)
    for k in ("fast", "exact", "only"):
        if k in out:
            out[k]["speedup_wall"] = WINDOWS * WINDOW_S / out[k]["wall_s"]
            out[k]["speedup_cpu"] = WINDOWS * WINDOW_S / out[k]["cpu_s"]
    return out


def median_of(runs: list, key: str) -> float:
    return statistics.median(r[key] for r in runs)


def fidelity_ff_vs_exact(seed: int = 5) -> dict:
    """Fast-forward against the exact mode at 1 s windows (current tree, this process)."""
    from scipy.stats import spearmanr

    from nvmw.lab.phase_run import simulate_phase

    grid = [(i, b) for i in (1, 4, 16, 32) for b in (1, 4, 16, 32)]
    out = {}
    for ph in PHASES:
        med = {True: [], False: []}
        tp = {True: [], False: []}
        spread = {True: [], False: []}
        for i, b in grid:
            for exact in (True, False):
                rows = simulate_phase(ph, controller=f"fixed:{i},{b}", windows=9, window_s=1.0, seed=seed,
                                      exact=exact)[1:]
                p = sorted(r["interactive_p99_us"] for r in rows)
                m = statistics.median(p)
                med[exact].append(m)
                tp[exact].append(statistics.median(r["ops_per_s"] for r in rows))
                spread[exact].append((p[int(0.9 * (len(p) - 1))] - p[int(0.1 * (len(p) - 1))]) / m if m > 0 else 0.0)
        rel = [abs(f - e) / e for f, e in zip(med[False], med[True]) if e > 0]
        rel_tp = [abs(f - e) / e for f, e in zip(tp[False], tp[True]) if e > 0]
        out[str(ph)] = {"configs": len(grid),
                        "spearman_median_p99": float(spearmanr(med[True], med[False]).statistic),
                        "median_rel_diff_p99": statistics.median(rel),
                        "median_rel_diff_throughput": statistics.median(rel_tp),
                        "p99_spread_exact": statistics.median(spread[True]),
                        "p99_spread_fast": statistics.median(spread[False])}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-tree", default=None, help="source tree of the previous simulator")
    ap.add_argument("--old-core", default=None, help="its _core build (scripts/dev-core.sh NAME -> build/NAME-py)")
    ap.add_argument("--new-core", default=os.environ.get("NVMW_DEV_CORE_DIR"), help="this tree's _core build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--phases", type=int, nargs="+", default=list(PHASES))
    ap.add_argument("--no-fidelity", action="store_true")
    ap.add_argument("--controller", default=CONTROLLER, help="controller of the whole-process runs (default %(default)s)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    trees = {"new": tree_env(HERE, args.new_core)}
    if args.old_tree:
        trees["old"] = tree_env(args.old_tree, args.old_core)
    report: dict = {"command": " ".join(["nvmw sim run --phase N --controller", args.controller, "--windows",
                                         str(WINDOWS), "--window", str(WINDOW_S)]),
                    "simulated_s": WINDOWS * WINDOW_S, "rounds": args.rounds, "loadavg_before": loadavg(),
                    "python": sys.version.split()[0], "cpus": os.cpu_count(), "trees": list(trees)}
    # The interpreter alone, for scale.
    bare = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, env=trees["new"])
        bare.append(time.perf_counter() - t)
    report["python_startup_wall_s"] = statistics.median(bare)
    cold_env = dict(trees["new"], NVMW_CACHE_DIR=os.path.join("/tmp", f"nvmw-sim-speed-cold-{os.getpid()}"))
    phases: dict = {}
    for ph in args.phases:
        runs = {name: [] for name in trees}
        for name, env in trees.items():
            whole_process(env, ph, args.controller)  # warms the trace cache (and the page cache) for this phase
        for _ in range(args.rounds):
            for name, env in trees.items():
                runs[name].append(whole_process(env, ph, args.controller))
        entry = {}
        for name in trees:
            wall = median_of(runs[name], "wall_s")
            cpu = median_of(runs[name], "cpu_s")
            speedups = [r["speedup_wall"] for r in runs[name]]
            entry[f"whole_process_{name}"] = {"wall_s": wall, "cpu_s": cpu, "speedup_wall": WINDOWS * WINDOW_S / wall,
                                              "speedup_cpu": WINDOWS * WINDOW_S / cpu,
                                              "speedup_wall_min": min(speedups), "speedup_wall_max": max(speedups),
                                              "runs": runs[name]}
        cold = whole_process(cold_env, ph, args.controller)
        entry["whole_process_new_cold_cache"] = cold
        for name, env in trees.items():
            entry[f"in_process_{name}"] = in_process(env, ph)
        if "old" in trees:
            entry["whole_process_ratio_old_over_new_wall"] = (entry["whole_process_old"]["wall_s"]
                                                              / entry["whole_process_new"]["wall_s"])
        phases[str(ph)] = entry
        print(f"phase {ph}: " + ", ".join(f"{n} {entry[f'whole_process_{n}']['speedup_wall']:.0f}x "
                                          f"({entry[f'whole_process_{n}']['speedup_wall_min']:.0f}-"
                                          f"{entry[f'whole_process_{n}']['speedup_wall_max']:.0f}x)"
                                          for n in trees), file=sys.stderr, flush=True)
    report["phases"] = phases
    report["loadavg_after_speed"] = loadavg()
    if not args.no_fidelity:
        report["fast_forward_vs_exact_1s_windows"] = fidelity_ff_vs_exact()
    report["loadavg_after"] = loadavg()
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
