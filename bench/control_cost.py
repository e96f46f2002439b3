"""What control costs and what it wins, side by side in one run (interleaved rounds,
median over rounds), on the memory engine wrapped in the emulated optane-1dimm device:

(a) low load: each of the thesis's phases 1-4 as paced in its file, the best fixed
    configuration (the shipped oracle table) vs no-control. Goal: control costs nothing
    where there is nothing to control (interactive p99 <= 1.1x, throughput >= 0.95x).
(b) contention: the 100 + 100 client interference test (nvmw.lab.interference) and each
    contended phase (5, 6: batch writes flood the device), a small fixed configuration vs
    no-control. Goal: interactive p99 >= 10x lower with control; batch throughput stated.

Per run: the median over its windows (the first --warmup seconds dropped: the memory
engine's first overwrites of 800 KB values are slower) of the interactive p99 (the
middleware's window statistic: submit to completion), the mean ops/s (all, and batch
ops/s and MB/s), and the replay's own whole-run p99 counted from each request's
scheduled time. The machine's load average is recorded before and after.

    python bench/control_cost.py [--quick] [--rounds 3] [--duration 6] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from nvmw.lab.interference import InterferenceConfig, run_interference
from nvmw.lab.phase_run import run_phase
from nvmw.lab.runs import shipped_oracle_path
from nvmw.workloads.phases import load_phase

from _report import emit

DEVICE = "optane-1dimm"
HERE = os.path.dirname(os.path.abspath(__file__))


def oracle_table(device: str = DEVICE) -> dict[int, str]:
    with open(shipped_oracle_path(device), encoding="utf-8") as fh:
        table = json.load(fh)["table"]
    return {int(k): f"fixed:{v[0]},{v[1]}" for k, v in table.items()}


def phase_metrics(res: dict, drop: int) -> dict:
    rows = res["windows"][drop:] or res["windows"]
    med = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
    mean = lambda key: statistics.fmean(r[key] for r in rows)  # noqa: E731
    rep = res["replay"]
    return {"interactive_p99_us": med("interactive_p99_us"), "ops_per_s": mean("ops_per_s"),
            "interactive_ops_per_s": mean("interactive_ops_per_s"), "batch_ops_per_s": mean("batch_ops_per_s"),
            "batch_mb_per_s": mean("batch_bytes_per_s") / 1e6,
            "interactive_p99_from_schedule_us": rep["interactive"]["all"]["p99_us"],
            "offered_ops_per_s": {c: rep[c]["offered_ops_per_s"] for c in rep}}


def run_one_phase(phase: int, controller: str, duration: float, window: float, warmup: float, seed: int) -> dict:
    res = run_phase(phase, duration_s=duration, controller=controller, window_s=window, engine="memory",
                    device=DEVICE, seed=seed)
    return phase_metrics(res, drop=max(1, int(round(warmup / window))))


def run_one_interference(duration: float, configs: list, seed: int) -> dict:
    """The 100 + 100 test with several small fixed configurations; "fixed" is the one with
    the lowest interactive p99 in this round."""
    cfg = InterferenceConfig(duration_s=duration, engine="memory", device=DEVICE, configs=list(configs), seed=seed)
    rows = {r["scenario"]: r for r in run_interference(cfg)["rows"]}
    fixed = {config_name(c): rows["co-located, nvmw " + config_name(c)] for c in configs}
    return {"none": rows["co-located, no control"], "alone": rows["interactive alone"], "configs": fixed}


def config_name(c: tuple) -> str:
    """I2/B1, or I2/B1 nice19 with a batch nice level (as nvmw.lab.interference names them)."""
    return f"I{c[0]}/B{c[1]}" + (f" nice{c[2]}" if c[2] else "")


def median_of(runs: list[dict]) -> dict:
    keys = [k for k, v in runs[0].items() if isinstance(v, (int, float))]
    return {k: statistics.median(r[k] for r in runs) for k in keys}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 rounds of 2.5 s runs (about 2 minutes)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3; --quick 2)")
    p.add_argument("--duration", type=float, default=None, help="seconds per phase run (default 6; --quick 2.5)")
    p.add_argument("--warmup", type=float, default=None, help="seconds of each phase run not counted "
                   "(default 2; --quick 1)")
    p.add_argument("--window", type=float, default=0.5, help="monitor window, s (default %(default)s)")
    p.add_argument("--contended-fixed", default="fixed:2,1", help="small fixed configuration for the "
                   "contended phases (default %(default)s)")
    p.add_argument("--interference-configs", default="2,1 4,1 2,1,19", help="fixed I,B[,batch nice] "
                   "configurations of the interference test; the best (lowest interactive p99, median over "
                   "rounds) is reported (default %(default)s)")
    p.add_argument("--out", default=os.path.join(HERE, "results-control-cost.json"))
    args = p.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 3)
    duration = args.duration or (2.5 if args.quick else 6.0)
    warmup = args.warmup if args.warmup is not None else (1.0 if args.quick else 2.0)
    iconfigs = [(tuple(int(x) for x in c.split(",")) + (0,))[:3] for c in args.interference_configs.split()]
    if rounds < 2:
        p.error("--rounds must be >= 2 (the medians are over interleaved rounds)")
    oracle = oracle_table()
    low_phases, contended_phases = [1, 2, 3, 4], [5, 6]
    t0 = time.monotonic()
    load_before = os.getloadavg()
    raw: dict = {"low": {ph: {"none": [], "fixed": []} for ph in low_phases},
                 "contended": {ph: {"none": [], "fixed": []} for ph in contended_phases},
                 "interference": {"none": [], "alone": [], **{config_name(c): [] for c in iconfigs}}}
    loads = []
    for rnd in range(rounds):
        # Alternate which controller goes first, so drift in machine load hits both alike.
        order = ("none", "fixed") if rnd % 2 == 0 else ("fixed", "none")
        for ph in low_phases:
            for who in order:
                ctl = "none" if who == "none" else oracle[ph]
                raw["low"][ph][who].append(run_one_phase(ph, ctl, duration, args.window, warmup, seed=rnd))
                print(f"round {rnd} phase {ph} {ctl}: {raw['low'][ph][who][-1]['interactive_p99_us']:.0f} us",
                      file=sys.stderr, flush=True)
        for ph in contended_phases:
            for who in order:
                ctl = "none" if who == "none" else args.contended_fixed
                raw["contended"][ph][who].append(run_one_phase(ph, ctl, duration, args.window, warmup, seed=rnd))
                print(f"round {rnd} phase {ph} {ctl}: {raw['contended'][ph][who][-1]['interactive_p99_us']:.0f} us",
                      file=sys.stderr, flush=True)
        it = run_one_interference(min(duration, 3.0), iconfigs, seed=1 + rnd)
        for k in ("none", "alone"):
            raw["interference"][k].append(it[k])
        for k, row in it["configs"].items():
            raw["interference"][k].append(row)
        print(f"round {rnd} interference: none {it['none']['interactive_p99_us']:.0f} us, " + ", ".join(
            f"{k} {r['interactive_p99_us']:.0f} us" for k, r in it["configs"].items()), file=sys.stderr, flush=True)
        loads.append([round(x, 2) for x in os.getloadavg()])

    def ratio(a: float, b: float) -> float:
        return round(a / b, 3) if b else float("inf")

    low = {}
    for ph in low_phases:
        n, f = median_of(raw["low"][ph]["none"]), median_of(raw["low"][ph]["fixed"])
        low[str(ph)] = {"fixed": oracle[ph], "none": n, "best_fixed": f,
                        "p99_ratio_fixed_over_none": ratio(f["interactive_p99_us"], n["interactive_p99_us"]),
                        "throughput_ratio_fixed_over_none": ratio(f["ops_per_s"], n["ops_per_s"]),
                        "meets_goal": f["interactive_p99_us"] <= 1.1 * n["interactive_p99_us"]
                        and f["ops_per_s"] >= 0.95 * n["ops_per_s"]}
    contended = {}
    for ph in contended_phases:
        n, f = median_of(raw["contended"][ph]["none"]), median_of(raw["contended"][ph]["fixed"])
        contended[str(ph)] = {"fixed": args.contended_fixed, "scaling": load_phase(ph).scaling, "none": n,
                              "fixed_run": f,
                              "p99_ratio_none_over_fixed": ratio(n["interactive_p99_us"], f["interactive_p99_us"]),
                              "batch_throughput_ratio_fixed_over_none": ratio(f["batch_ops_per_s"], n["batch_ops_per_s"]),
                              "meets_goal": n["interactive_p99_us"] >= 10 * f["interactive_p99_us"]}
    n, a = (median_of(raw["interference"][k]) for k in ("none", "alone"))
    per_cfg = {config_name(c): median_of(raw["interference"][config_name(c)]) for c in iconfigs}
    best = min(per_cfg, key=lambda k: per_cfg[k]["interactive_p99_us"])
    f = per_cfg[best]
    interference = {"fixed": best, "clients": "100 interactive (128 B, 50/50) + 100 batch (800 KB, 50/50), closed loop",
                    "duration_s": min(duration, 3.0), "none": n, "fixed_run": f, "interactive_alone": a,
                    "all_configs": per_cfg,
                    "p99_ratio_none_over_fixed": ratio(n["interactive_p99_us"], f["interactive_p99_us"]),
                    "batch_throughput_ratio_fixed_over_none": ratio(f["batch_ops_per_s"], n["batch_ops_per_s"]),
                    "meets_goal": n["interactive_p99_us"] >= 10 * f["interactive_p99_us"]}
    out = {
        "command": "python bench/control_cost.py" + (" --quick" if args.quick else "")
                   + (f" --rounds {args.rounds}" if args.rounds else "") + (f" --duration {args.duration:g}" if args.duration else "")
                   + (f" --warmup {args.warmup:g}" if args.warmup is not None else ""),
        "cores": os.cpu_count() or 1, "engine": "memory", "device": DEVICE, "window_s": args.window,
        "rounds": rounds, "duration_s": duration, "warmup_s": warmup,
        "statistic": "median over rounds of per-run values",
        "load_average_before": [round(x, 2) for x in load_before], "load_average_after_each_round": loads,
        "wall_s": round(time.monotonic() - t0, 1),
        "low_load": low, "contention": {"interference": interference, "phases": contended},
        "raw": {"low": {str(k): v for k, v in raw["low"].items()},
                "contended": {str(k): v for k, v in raw["contended"].items()},
                "interference": raw["interference"]},
    }
    emit(out, args.out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
