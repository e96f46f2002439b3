"""One phase under one controller, one row per window: `run_phase` on a fresh middleware
(one of the thesis's RL phases, Appendix C, or a phase file of one's own; the experiment
behind `nvmw run-phase`) and `simulate_phase` on the simulator (`nvmw sim run`)."""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

from nvmw.control.loop import drive
from nvmw.control.sla import SLASpec, load_spec
from nvmw.lab.lineup import ControllerContext, make_controller
from nvmw.rl.envs import RealEnv
from nvmw.rl.sim import SimEnv
from nvmw.rl.simrun import check_windows, run_static, run_windows, static_config
from nvmw.workloads.phases import Phase, load_phase

#: Where a run starts when its controller states no starting threads of its own.
DEFAULT_START = (15, 15)


def run_phase(phase: Union[Phase, int, str], *, duration_s: float = 30.0, controller: Any = "fixed:10,10",
              window_s: float = 1.0, engine: str = "memory", path: Optional[str] = None,
              device: Optional[str] = None, seed: int = 0, rate_scale: float = 1.0,
              sla: Union[SLASpec, str, None] = None,
              on_window: Optional[Callable[[dict], None]] = None) -> dict:
    """Run a phase on a fresh middleware for `duration_s` under `controller` (a name such as
    "none" or "fixed:I,B", or a controller object), driven by the control loop: the run
    starts at the controller's `initial_threads` (else 15/15), and the controller decides
    after every window. The SLA spec (`sla`; default: the calibrated one for `device`)
    judges each window for the controller. Returns {"windows": [...], "replay": {...},
    ...}; each window row has threads, ops/s, interactive p99 and batch throughput, queue
    lengths and the offered load. `seed` seeds the env (and so the workload traces).
    ValueError for a duration outside (0, 86400] s or of more than 1,000,000 windows
    (`nvmw.rl.simrun.run_windows`)."""
    n_windows = run_windows(duration_s, window_s)
    ph = phase if isinstance(phase, Phase) else load_phase(phase)
    device_name = device or "none"
    spec = sla if isinstance(sla, SLASpec) else load_spec(sla, device=device_name)
    ctl = make_controller(controller, ControllerContext(sla=spec, device=device_name, phases=(ph.number,)))
    ctl.reset()
    env = RealEnv(ph, window_s=window_s, max_episode_steps=n_windows, sla=spec, engine=engine, path=path,
                  device=device_name, control=bool(getattr(ctl, "requires_control", True)),
                  initial_threads=getattr(ctl, "initial_threads", None) or DEFAULT_START, warmup_windows=0,
                  rate_scale=rate_scale)
    rows: list[dict] = []

    def record(_obs, _action, _reward, _next_obs, _term, _trunc, info) -> None:
        stats = info["stats"]
        i, b = stats["interactive"], stats["batch"]
        row = {
            "seq": stats["seq"],
            "interactive_threads": i["threads"], "batch_threads": b["threads"],
            "ops_per_s": stats["all"]["ops_per_s"],
            "interactive_ops_per_s": i["ops_per_s"], "interactive_p99_us": i["p99_us"],
            "batch_ops_per_s": b["ops_per_s"], "batch_bytes_per_s": b["bytes_per_s"],
            "batch_p99_us": b["p99_us"],
            "interactive_queue": i["queue_len_end"], "batch_queue": b["queue_len_end"],
            "offered_ops_per_s": info["offered_ops_per_s"],
        }
        rows.append(row)
        if on_window is not None:
            on_window(row)

    try:
        obs, info = env.reset(seed=seed)
        drive(env, ctl, n_windows, obs, info, on_step=record)
        results = env.pause()
    finally:
        env.close()
    return {"phase": ph.number, "controller": getattr(ctl, "name", str(controller)),
            "window_s": window_s, "engine": engine, "device": device_name,
            "windows": rows, "replay": results}


def simulate_phase(phase: int, *, windows: int = 10, controller: Any = "fixed:15,15", window_s: float = 0.1,
                   device: str = "optane-1dimm", params: Any = None, seed: int = 0,
                   sla: Union[SLASpec, str, None] = None,
                   on_window: Optional[Callable[[dict], None]] = None, exact: bool = False) -> list[dict]:
    """`windows` simulated windows of a shipped phase under `controller` (a name or an
    object), starting at the controller's `initial_threads` (else 15/15); `sla` as SimEnv
    takes it (default the shipped calibrated spec); `exact` as SimEnv's. One row per
    window: phase, threads, reward, interactive p99, ops/s, batch ops/s and both queue
    lengths. A static configuration named "none" or "fixed:I,B" runs without the
    Gymnasium env (`nvmw.rl.simrun.run_static`, same rows). ValueError for `windows`
    outside [0, RUN_WINDOWS_MAX] (`nvmw.rl.simrun.check_windows`)."""
    windows = check_windows(windows)
    static = static_config(controller)
    if static is not None:
        control, i, b = static
        return run_static(phase, windows=windows, control=control, threads=(i, b), window_s=window_s,
                          device=device, params=params, seed=seed, sla=sla, exact=exact, on_window=on_window)
    spec = sla if isinstance(sla, SLASpec) else load_spec(sla)
    ctl = make_controller(controller, ControllerContext(sla=spec, device=device, phases=(int(phase),)))
    ctl.reset()
    env = SimEnv(phase, window_s=window_s, device=device, params=params, sla=spec,
                 control=bool(getattr(ctl, "requires_control", True)), max_episode_steps=max(1, windows), exact=exact)
    start = getattr(ctl, "initial_threads", None) or DEFAULT_START
    rows: list[dict] = []

    def record(_obs, _action, reward, _next_obs, _term, _trunc, info) -> None:
        s = info["stats"]
        row = {"phase": phase, "threads": info["threads"], "reward": round(reward, 3),
               "interactive_p99_us": s["interactive"]["p99_us"], "ops_per_s": s["all"]["ops_per_s"],
               "batch_ops_per_s": s["batch"]["ops_per_s"], "interactive_queue": s["interactive"]["queue_len_end"],
               "batch_queue": s["batch"]["queue_len_end"]}
        rows.append(row)
        if on_window is not None:
            on_window(row)

    obs, info = env.reset(seed=seed, options={"threads": start})
    drive(env, ctl, windows, obs, info, on_step=record)
    return rows


__all__ = ["run_phase", "simulate_phase", "DEFAULT_START"]
