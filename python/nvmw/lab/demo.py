"""`demo_comparison`: a short side-by-side run of the controllers (called at the end of
`nvmw demo`). Uses the shipped agent, oracle table and calibrated SLA when present."""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence


def demo_comparison(*, env: str = "real", steps: int = 200, switch_every: int = 50, window_s: float = 0.1,
                    device: str = "optane-1dimm", sla: str | None = None, seed: int = 0,
                    controllers: Sequence[str] | None = None, out_dir: str | None = None,
                    progress: bool = False, print_fn: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Run each controller for `steps` windows over a seeded phase schedule and return
    {"run": header, "summary": {controller: summary}}. Controllers whose files are missing
    (agent, oracle) are skipped with a note. With out_dir, also writes JSON/MD/PNG there."""
    from nvmw.commands.evaluate import CONTROLLERS, build_controllers
    from nvmw.rl.evaluation import evaluate_controllers, markdown_report, write_outputs
    from nvmw.rl.runs import make_env, run_header, shipped_agent_path, shipped_oracle_path

    names = list(controllers or CONTROLLERS)
    key = device if env == "real" else env
    skipped = []
    if "q-learning" in names and not os.path.exists(shipped_agent_path(key)):
        names.remove("q-learning")
        skipped.append("q-learning (no shipped agent)")
    if "oracle" in names and not os.path.exists(shipped_oracle_path(key)):
        names.remove("oracle")
        skipped.append("oracle (no shipped calibration)")
    probe = make_env(env, window_s=window_s, sla=sla, device=device)
    spec = probe.sla
    header = run_header(env, probe, steps=steps, switch_every=switch_every, seed=seed)
    probe.close()
    ctrls = build_controllers(names, spec=spec, device=device, env_kind=env)

    def factory(control: bool):
        return make_env(env, window_s=window_s, sla=spec, device=device, control=control,
                        max_episode_steps=steps)

    summaries, traces = evaluate_controllers(factory, ctrls, total_steps=steps, switch_every=switch_every,
                                             seed=seed, progress=progress)
    if out_dir:
        write_outputs(summaries, traces, header, out_dir, switch_every)
    if print_fn is not None:
        print_fn(markdown_report(summaries, header))
        if skipped:
            print_fn("skipped: " + ", ".join(skipped))
    return {"run": header, "summary": summaries, "skipped": skipped}
