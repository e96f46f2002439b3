"""`demo_comparison`: a short side-by-side run of the controllers (the last step of
`nvmw demo`). Uses the shipped agent, oracle table and calibrated SLA when present."""
from __future__ import annotations

import json
import math
import os
from typing import Any, Callable, Mapping, Sequence

from nvmw.lab.evaluation import evaluate_lineup, markdown_report, write_outputs
from nvmw.lab.lineup import DEFAULT_LINEUP, ControllerContext, canonical_name
from nvmw.control.sla import load_spec
from nvmw.lab.runs import cpu_model, shipped_agent_path, shipped_oracle_path


def demo_comparison(*, env: str = "real", steps: int = 200, switch_every: int = 50, window_s: float = 0.1,
                    device: str = "optane-1dimm", sla: str | None = None, seed: int = 0,
                    controllers: Sequence[str] | None = None, out_dir: str | None = None,
                    progress: bool = False, print_fn: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Run each controller (names as in nvmw.lab.lineup) for `steps` windows over a seeded
    phase schedule and return {"run": header, "summary": {controller: summary},
    "skipped": [...]}. Controllers whose files are missing (agent, oracle) are skipped with
    a note. With out_dir, also writes JSON/MD/PNG there."""
    names = [canonical_name(n) for n in (controllers or DEFAULT_LINEUP)]
    key = device if env == "real" else env
    skipped = []
    if "q-learning" in names and not os.path.exists(shipped_agent_path(key)):
        names.remove("q-learning")
        skipped.append("q-learning (no shipped agent)")
    if "oracle" in names and not os.path.exists(shipped_oracle_path(key)):
        names.remove("oracle")
        skipped.append("oracle (no shipped calibration)")
    context = ControllerContext(device=device if env in ("real", "sim") else env)
    summaries, traces, header = evaluate_lineup(env, names, window_s=window_s, steps=steps, switch_every=switch_every,
                                                seed=seed, sla=sla, device=device, context=context,
                                                progress=progress)
    if out_dir:
        write_outputs(summaries, traces, header, out_dir, switch_every)
    if print_fn is not None:
        print_fn(markdown_report(summaries, header))
        if skipped:
            print_fn("skipped: " + ", ".join(skipped))
    return {"run": header, "summary": summaries, "skipped": skipped}


def _descending(x: float) -> tuple[bool, float]:
    """Sort key: larger first, NaN (a run with no steps) last, not wherever the sort leaves it."""
    return (math.isnan(x), -x if not math.isnan(x) else 0.0)


def ranking_table(summaries: Mapping[str, Mapping[str, Any]], header: Mapping[str, Any]) -> str:
    """One screen: controllers ranked by the fraction of windows meeting both SLAs, with the
    95 % interval over phase segments (the run's noise), latency/throughput fractions,
    median reward and median interactive p99, and what the run was."""
    rows = sorted(summaries.items(), key=lambda kv: (_descending(kv[1]["sla_both_met"]),
                                                     _descending(kv[1]["reward"]["median"])))
    steps = next(iter(summaries.values()))["steps"] if summaries else 0
    out = [f"{'rank':>4}  {'controller':<14} {'both SLAs':>9} {'95 % interval':>13} {'latency':>8} "
           f"{'throughput':>10} {'median reward':>13} {'median p99':>11}"]
    for k, (name, s) in enumerate(rows, 1):
        lo, hi = s["sla_both_ci95"]
        out.append(f"{k:>4}  {name:<14} {s['sla_both_met']:>9.2f} {lo:>6.2f}-{hi:<6.2f} "
                   f"{s['sla_latency_met']:>8.2f} {s['sla_throughput_met']:>10.2f} "
                   f"{s['reward']['median']:>13.1f} {s['p99_us']['median']:>8.0f} us")
    out.append(f"{steps} windows of {header.get('window_s', '?')} s per controller, phases "
               f"{header.get('phases', '?')} switching every {header.get('switch_every', '?')} windows, "
               f"controllers interleaved per segment; SLA {header.get('sla', '?')}. Intervals that overlap "
               f"are not a ranking: `nvmw evaluate` runs longer.")
    return "\n".join(out)




def calibration_note(summaries: Mapping[str, Mapping[str, Any]], *, device: str = "optane-1dimm",
                     sla: str | None = None, at_least: float = 0.5) -> str | None:
    """None when some controller met the latency goal on `at_least` of its windows; else
    what the user should know: the shipped SLA, oracle table and agent were calibrated on
    another machine (the oracle file records which) and this one serves the phases more
    slowly, so the ranking says little until they are remade here."""
    if not summaries:
        return None
    # NaN (a run with no steps) has no say: max/min would keep or drop it by its position.
    fractions = [s["sla_latency_met"] for s in summaries.values() if not math.isnan(s["sla_latency_met"])]
    if not fractions:
        return None
    best = max(fractions)
    if best >= at_least:
        return None
    goal = load_spec(sla, device=device).lat_goal
    lowest = min((s["p99_us"]["median"] for s in summaries.values() if not math.isnan(s["p99_us"]["median"])),
                 default=float("nan"))
    try:
        with open(shipped_oracle_path(device), encoding="utf-8") as fh:
            where = json.load(fh).get("run", {}).get("cpu")
    except (OSError, ValueError, AttributeError):
        where = None
    here = cpu_model()
    origin = f"calibrated on {where or 'another machine'}; this run is on {here}"
    return (f"Note: no controller kept the interactive p99 within the SLA's {goal:,.0f} us on half of its "
            f"windows (best {best:.2f}; lowest median p99 {lowest:,.0f} us). The shipped SLA, oracle table "
            f"and agent were {origin}. This machine serves the phases more slowly (the emulated device's "
            f"waits sleep and are woken, which costs far more on some virtual machines), so this ranking "
            f"says little. scripts/recalibrate.sh remakes all three for this machine from a sweep (about "
            f"17 min on 2 cores; then ./scripts/setup.sh installs them); where the simulator cannot follow "
            f"the machine, the agent it retrains may not lead (docs/rl-history.md, \"On a slower machine\").")


__all__ = ["calibration_note", "demo_comparison", "ranking_table"]
