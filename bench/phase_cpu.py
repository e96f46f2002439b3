"""What a paced phase costs the machine and what its interactive tail is: each phase run
by `nvmw run-phase` in a fresh process, with the process's CPU time (user, system),
voluntary context switches per request and the median window p99. With --cores, several
builds of the extension module are compared in one run, interleaved round by round
(each NAME=DIR is a directory holding a built `_core*.so`, used as NVMW_DEV_CORE_DIR).
Prints JSON.

    python bench/phase_cpu.py [--phases 1,2,3,4] [--device optane-1dimm] [--rounds 3]
        [--duration 6] [--cores before=DIR,after=DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(os.path.dirname(HERE), "python")


def run_once(phase: int, device: str, duration: float, window: float, controller: str,
             core_dir: str | None) -> dict:
    env = dict(os.environ)
    if core_dir:
        env["NVMW_DEV_CORE_DIR"] = os.path.abspath(core_dir)
        env["PYTHONPATH"] = PYTHON_DIR
    cmd = [sys.executable, "-m", "nvmw", "run-phase", str(phase), "--duration", str(duration),
           "--window", str(window), "--device", device, "--controller", controller, "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    d = json.loads(out)
    windows = d["windows"][1:]  # the first window holds the start-up
    requests = sum(v["all"]["ops"] for v in d["replay"].values())
    p99 = [w["interactive_p99_us"] for w in windows if w["interactive_ops_per_s"] > 0]
    return {
        "user_s": after.ru_utime - before.ru_utime,
        "sys_s": after.ru_stime - before.ru_stime,
        "wall_s": wall,
        "voluntary_switches": after.ru_nvcsw - before.ru_nvcsw,
        "requests": requests,
        "interactive_p99_us_median": statistics.median(p99) if p99 else None,
        "interactive_p99_us_max": max(p99) if p99 else None,
        "ops_per_s_median": statistics.median(w["ops_per_s"] for w in windows),
        "windows": len(windows),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phases", default="1,2,3,4")
    p.add_argument("--device", default="optane-1dimm")
    p.add_argument("--controller", default="none")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=6.0)
    p.add_argument("--window", type=float, default=0.5)
    p.add_argument("--cores", default="", help="NAME=DIR,... builds to compare (default: the "
                   "installed one)")
    a = p.parse_args()
    cores = [tuple(c.split("=", 1)) for c in a.cores.split(",") if c] or [("installed", None)]
    phases = [int(v) for v in a.phases.split(",")]
    runs = []
    for r in range(a.rounds):
        for ph in phases:
            order = cores if r % 2 == 0 else cores[::-1]
            for name, core_dir in order:
                res = run_once(ph, a.device, a.duration, a.window, a.controller, core_dir)
                res.update(round=r, phase=ph, core=name)
                runs.append(res)
                print(json.dumps(res), file=sys.stderr)
    summary = {}
    for name, _ in cores:
        for ph in phases:
            mine = [x for x in runs if x["core"] == name and x["phase"] == ph]
            cpu = [(x["user_s"] + x["sys_s"]) / x["wall_s"] for x in mine]
            summary[f"{name}/phase{ph}"] = {
                "cpu_s_per_wall_s": [round(min(cpu), 2), round(statistics.median(cpu), 2),
                                     round(max(cpu), 2)],
                "sys_s_per_wall_s_median": round(statistics.median(
                    x["sys_s"] / x["wall_s"] for x in mine), 2),
                "voluntary_switches_per_request_median": round(statistics.median(
                    x["voluntary_switches"] / max(1, x["requests"]) for x in mine), 2),
                "interactive_p99_us_median_of_rounds": [
                    x["interactive_p99_us_median"] for x in mine],
            }
    print(json.dumps({
        "what": "nvmw run-phase per phase in a fresh process: CPU time, voluntary context "
                "switches, median window interactive p99 (first window dropped)",
        "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "device": a.device, "controller": a.controller, "duration_s": a.duration,
        "window_s": a.window, "rounds": a.rounds,
        "summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
