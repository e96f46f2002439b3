"""`demo_comparison`: a short side-by-side run of the controllers (the last step of
`nvmw demo`). Uses the shipped agent, oracle table and calibrated SLA when present."""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from nvmw.lab.evaluation import evaluate_lineup, markdown_report, write_outputs
from nvmw.lab.lineup import DEFAULT_LINEUP, ControllerContext, canonical_name
from nvmw.lab.runs import shipped_agent_path, shipped_oracle_path


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


__all__ = ["demo_comparison"]
