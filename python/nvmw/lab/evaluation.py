"""The evaluation's long run (thesis 4.3 / Appendix E): every controller on the same seeded
phase schedule, per-step traces, quartile tables, SLA-met fractions and a Figure E.1-like plot."""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from nvmw import jsonfiles
from nvmw.control.controllers import Controller
from nvmw.control.loop import drive
from nvmw.control.sla import SLASpec
from nvmw.errors import Interrupted
from nvmw.lab.lineup import ControllerContext, build_controllers, make_controller
from nvmw.lab.runs import run_header
from nvmw.rl.envs import ControlEnv, SeqPhaseEnv
from nvmw.rl.registry import make_env
from nvmw.rl.simrun import check_steps
from nvmw.workloads.phases import DEFAULT_PHASES

TRACE_KEYS = ("step", "phase", "interactive_threads", "batch_threads", "reward", "p99_us", "throughput",
              "offered_ops_per_s", "sla_latency_met", "sla_throughput_met")


class _Run:
    """One controller's long run, advanced a segment at a time (so that controllers can
    take turns on the machine). The env is reset on the first call, at the controller's
    own starting threads (`controller.initial_threads`) or else `initial_threads`."""

    def __init__(self, env: ControlEnv, controller: Controller, *, total_steps: int, switch_every: int, seed: int,
                 initial_threads: tuple[int, int], phases: Sequence[int]):
        self.env = env
        self.controller = controller
        start = getattr(controller, "initial_threads", None) or initial_threads
        self.long_env = SeqPhaseEnv(env, total_steps=total_steps, switch_every=switch_every, phases=tuple(phases),
                                    initial_threads=start)
        self.total_steps = int(total_steps)
        self.seed = seed
        self.trace: dict[str, list] = {k: [] for k in TRACE_KEYS}
        self.step = 0
        self.wall_s = 0.0
        self.done = False
        self._obs = self._info = None

    def _record(self, _obs, _action, r, _next_obs, _term, _trunc, info, bar=None) -> None:
        i, b = info["threads"]
        for k, v in (("step", self.step), ("phase", info["phase"]), ("interactive_threads", i),
                     ("batch_threads", b), ("reward", r), ("p99_us", info["p99_us"]),
                     ("throughput", info["throughput"]), ("offered_ops_per_s", info["offered_ops_per_s"]),
                     ("sla_latency_met", info["sla_latency_met"]),
                     ("sla_throughput_met", info["sla_throughput_met"])):
            self.trace[k].append(v)
        self.step += 1
        observe = getattr(self.controller, "observe", None)
        if observe is not None:  # a controller that learns online (q-learning --online)
            observe(_obs, _action, r, _next_obs, _term, _trunc, info)
        if bar is not None:
            bar.update(1)

    def advance(self, n: int, bar=None) -> None:
        t0 = time.monotonic()
        if self._obs is None:
            self.controller.reset()
            self._obs, self._info = self.long_env.reset(seed=self.seed)
        steps = min(int(n), self.total_steps - self.step)
        if self.done or steps <= 0:
            self.done = True
        else:
            self._obs, self._info, _n, ended = drive(
                self.long_env, self.controller, steps, self._obs, self._info,
                on_step=lambda *t: self._record(*t, bar=bar))
            self.done = ended or self.step >= self.total_steps
        # Let the next controller have the machine (RealEnv stops its workload; the next
        # phase switch restarts it). A run that has ended stops its workload too: left
        # running until the envs are closed, the finished runs' workloads would load the
        # machine under every later controller's last segment (phase 4 ends seeds 1 and 4,
        # 400 client threads per env: docs/rl-history.md, "Six seeds together").
        pause = getattr(self.env.unwrapped, "pause", None)
        if pause is not None:
            pause()
        self.wall_s += time.monotonic() - t0

    def result(self) -> dict[str, list]:
        out = dict(self.trace)
        out["schedule"] = list(self.long_env.schedule_)
        out["wall_s"] = self.wall_s
        return out


def run_controller(env: ControlEnv, controller: Controller, *, total_steps: int = 4000, switch_every: int = 200,
                   seed: int = 0, initial_threads: tuple[int, int] = (15, 15), progress: bool = False,
                   phases: Sequence[int] = DEFAULT_PHASES) -> dict[str, list]:
    """Run one controller through the long run on `env` (not closed here). Returns the
    per-step trace as column lists (TRACE_KEYS) plus "schedule" and "wall_s"."""
    run = _Run(env, controller, total_steps=total_steps, switch_every=switch_every, seed=seed,
               initial_threads=initial_threads, phases=phases)
    bar = None
    if progress:
        bar = tqdm(total=total_steps, desc=controller.name, unit="step")
    run.advance(total_steps, bar)
    if bar is not None:
        bar.close()
    return run.result()


def quartiles(x: Sequence[float]) -> dict[str, float]:
    a = np.asarray(x, dtype=np.float64)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return {k: float("nan") for k in ("min", "q1", "median", "q3", "max")}
    q = np.percentile(a, [0, 25, 50, 75, 100])
    return {"min": float(q[0]), "q1": float(q[1]), "median": float(q[2]), "q3": float(q[3]), "max": float(q[4])}


#: Consecutive steps meeting both SLAs that count as settled after a phase switch.
SETTLE_RUN = 5


def settle_steps(trace: Mapping[str, list], switch_every: int, run: int = SETTLE_RUN) -> list[int | None]:
    """Per phase segment: steps from the switch until the first `run` consecutive steps that
    meet both SLAs (None if that never happens within the segment, and for a segment
    shorter than `run`, which cannot show it)."""
    both = np.logical_and(trace["sla_latency_met"], trace["sla_throughput_met"])
    out: list[int | None] = []
    for start in range(0, len(both), switch_every):
        seg = both[start:start + switch_every]
        found = None
        for k in range(0, max(0, len(seg) - run + 1)):
            if seg[k:k + run].all():
                found = k
                break
        out.append(found)
    return out


def segment_spread(both: np.ndarray, switch_every: int, *, resamples: int = 2000, seed: int = 0
                   ) -> tuple[list[float], list[float]]:
    """Per phase segment, the fraction of steps meeting both SLAs, and a 95 % bootstrap
    interval of the whole run's fraction obtained by resampling segments (a segment is the
    unit that varies: its phase, and the machine's load while it ran). One segment gives a
    zero-width interval: there is nothing to resample."""
    per = [float(both[i:i + switch_every].mean()) for i in range(0, len(both), switch_every)
           if both[i:i + switch_every].size]
    if not per:
        return [], [float("nan"), float("nan")]
    sizes = np.asarray([min(switch_every, len(both) - i) for i in range(0, len(both), switch_every)], float)
    fr = np.asarray(per)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(per), size=(resamples, len(per)))
    boot = (fr[idx] * sizes[idx]).sum(axis=1) / sizes[idx].sum(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return per, [float(lo), float(hi)]


def summarize(trace: Mapping[str, list], switch_every: int) -> dict[str, Any]:
    lat = np.asarray(trace["sla_latency_met"], bool)
    tp = np.asarray(trace["sla_throughput_met"], bool)
    settle = settle_steps(trace, switch_every)
    settled = [s for s in settle if s is not None]
    # A segment shorter than SETTLE_RUN steps (the last one, when the steps are not a
    # multiple of the segment length) cannot settle: it is left out of the count.
    judged = sum(1 for start in range(0, lat.size, switch_every)
                 if min(switch_every, lat.size - start) >= SETTLE_RUN)
    by_segment, ci95 = segment_spread(lat & tp, switch_every)
    return {
        "reward": quartiles(trace["reward"]),
        "throughput": quartiles(trace["throughput"]),
        "p99_us": quartiles(trace["p99_us"]),
        "sla_latency_met": float(lat.mean()) if lat.size else float("nan"),
        "sla_throughput_met": float(tp.mean()) if tp.size else float("nan"),
        "sla_both_met": float((lat & tp).mean()) if lat.size else float("nan"),
        "sla_both_by_segment": by_segment,
        "sla_both_ci95": ci95,
        "steps": int(lat.size),
        "settle_steps_median": float(np.median(settled)) if settled else None,
        "segments_settled": f"{len(settled)}/{judged}",
        "wall_s": float(trace.get("wall_s", float("nan"))),
    }


@dataclasses.dataclass(frozen=True)
class EnvFactory:
    """A picklable `make_env(control)` for `evaluate_controllers`: nvmw.rl.make_env(kind,
    control=control, **kwargs). Needed with isolate=True, where each controller's process
    builds its own env."""

    kind: str
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __call__(self, control: bool) -> ControlEnv:
        return make_env(self.kind, control=control, **dict(self.kwargs))


class ControllerProcessError(RuntimeError):
    """The process running one controller's run (isolate=True) failed or died."""

    def __init__(self, controller: str, message: str, built_name: str | None = None):
        label = repr(controller) if built_name in (None, controller) else f"{controller!r} ({built_name})"
        super().__init__(f"controller {label}: {message}")
        self.controller = controller


class _Stopped(Exception):
    """The parent asked a child's run to stop (Ctrl-C in the parent)."""


class _ChildProgress:
    """The tqdm-like bar a child's run updates: steps go to the parent at most every
    0.5 s; the stop event ends the run after the current window."""

    def __init__(self, conn, stop):
        self.conn, self.stop = conn, stop
        self.pending, self.sent_at = 0, time.monotonic()

    def update(self, n: int = 1) -> None:
        self.pending += n
        if time.monotonic() - self.sent_at >= 0.5:
            self.flush()
        if self.stop.is_set():
            raise _Stopped

    def flush(self) -> None:
        if self.pending:
            self.conn.send(("progress", self.pending))
        self.pending, self.sent_at = 0, time.monotonic()


def _child_main(conn, stop, env_factory, name: str, context, run_kwargs: dict) -> None:
    """One controller's run in a process of its own: builds the controller and its env,
    then obeys the parent ("advance", n) / ("finish",) and sends its trace back at the end
    (plus the controller itself if it learned online)."""
    import signal
    import traceback

    # Ctrl-C is the parent's to handle: it stops the children through `stop`.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    run = None
    try:
        controller = make_controller(name, context)
        run = _Run(env_factory(controller.requires_control), controller, **run_kwargs)
        conn.send(("ready", controller.name))
        while True:
            msg = conn.recv()
            if msg[0] == "advance":
                bar = _ChildProgress(conn, stop)
                try:
                    run.advance(msg[1], bar)
                except _Stopped:
                    pass
                bar.flush()
                conn.send(("done", run.step, run.done))
            else:  # "finish"
                learned = controller if getattr(controller, "observe", None) is not None else None
                conn.send(("result", run.result(), learned))
                break
    except BaseException as e:  # noqa: BLE001 (reported to the parent, which raises)
        try:
            conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))
        except Exception:  # noqa: BLE001 (the parent sees the process die instead)
            pass
    finally:
        if run is not None:
            run.env.close()
        conn.close()


class _Child:
    """The parent's handle on one controller's process."""

    def __init__(self, mp, env_factory, name: str, context, run_kwargs: dict):
        self.spec_name = self.name = name
        self.conn, child_conn = mp.Pipe()
        self.stop = mp.Event()
        self.proc = mp.Process(target=_child_main, name=f"nvmw-eval {name}", daemon=True,
                               args=(child_conn, self.stop, env_factory, name, context, run_kwargs))
        self.proc.start()
        child_conn.close()
        self.step = 0
        self.done = False
        self.trace: dict | None = None
        self.learned = None

    def recv(self, timeout: float | None = None):
        """The child's next message; ControllerProcessError if it reported an error or
        died (None on timeout)."""
        from multiprocessing.connection import wait

        ready = wait([self.conn, self.proc.sentinel], timeout)
        if not ready:
            return None
        try:
            if self.conn in ready or self.conn.poll():
                msg = self.conn.recv()
            else:
                raise EOFError
        except (EOFError, OSError):
            self.proc.join(5)
            raise ControllerProcessError(self.spec_name, f"its process died (exit code {self.proc.exitcode}) "
                                         "without reporting", self.name) from None
        if msg[0] == "error":
            raise ControllerProcessError(self.spec_name, f"failed in its process: {msg[1]}\n{msg[2]}", self.name)
        return msg

    def wait_ready(self) -> None:
        msg = self.recv()
        self.name = msg[1]

    def advance(self, n: int, bar) -> None:
        self.conn.send(("advance", int(n)))
        while True:
            msg = self.recv()
            if msg[0] == "progress":
                if bar is not None:
                    bar.update(msg[1])
            elif msg[0] == "done":
                self.step, self.done = msg[1], msg[2]
                return

    def finish(self, timeout: float | None = None) -> None:
        """Ask for the trace (the child then exits); with a timeout, give up quietly."""
        if self.trace is not None:
            return
        self.conn.send(("finish",))
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            msg = self.recv(left)
            if msg is None:
                return
            if msg[0] == "done":
                self.step = msg[1]
            elif msg[0] == "result":
                self.trace, self.learned = msg[1], msg[2]
                self.step = len(self.trace["step"])
                return

    def close(self) -> None:
        """End the child: a run in progress stops after its window; one waiting for the
        next command sees the pipe close, closes its env and exits."""
        self.stop.set()
        self.conn.close()
        self.proc.join(60)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(10)


def _check_unique(names: Sequence[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"two controllers of the line-up are named {n!r}: the report keys runs by name, "
                             "so one would replace the other")
        seen.add(n)


def _evaluate_isolated(env_factory, names: Sequence[str], context, *, run_kwargs: dict, total_steps: int,
                       switch_every: int, interleave: bool, bar, children: list) -> None:
    import multiprocessing

    mp = multiprocessing.get_context("spawn")
    if interleave:
        children.extend(_Child(mp, env_factory, n, context, run_kwargs) for n in names)
        for ch in children:
            ch.wait_ready()
        _check_unique([ch.name for ch in children])
        for _seg in range(-(-total_steps // switch_every)):
            for ch in children:
                if bar is not None:
                    bar.set_postfix(controller=ch.name, refresh=False)
                ch.advance(switch_every, bar)
        for ch in children:
            ch.finish()
    else:
        for n in names:
            ch = _Child(mp, env_factory, n, context, run_kwargs)
            children.append(ch)
            ch.wait_ready()
            _check_unique([c.name for c in children])
            if bar is not None:
                bar.set_postfix(controller=ch.name, refresh=False)
            ch.advance(total_steps, bar)
            ch.finish()
            ch.close()


def evaluate_controllers(make_env: Callable[[bool], ControlEnv], controllers: Sequence[Controller | str], *,
                         total_steps: int = 4000, switch_every: int = 200, seed: int = 0,
                         initial_threads: tuple[int, int] = (15, 15), progress: bool = False,
                         phases: Sequence[int] = DEFAULT_PHASES, interleave: bool = True, isolate: bool = False,
                         context: ControllerContext | None = None, built: list | None = None) -> tuple[dict, dict]:
    """Every controller on the same seeded schedule. make_env(control) builds a fresh env
    (control=False for the no-control baseline); it is closed at the end. `controllers`
    are controllers or names (nvmw.lab.lineup, built with `context`); either is refused
    (ValueError) if it cannot serve one of `phases` (an oracle table lacking one).

    interleave=True (default): the controllers take turns, one phase segment each
    (segment 1 of every controller, then segment 2, ...), each on its own env, so a change
    in machine load during the run hits every controller alike instead of whichever ran
    then; envs with a `pause()` (RealEnv) stop their workload while waiting. False runs
    each controller's whole run before the next one's.

    isolate=True: each controller and its env live in a process of their own (started
    with "spawn"), which builds them from the name, `context` and `make_env` (so
    `controllers` must be names and `make_env` picklable, e.g. an EnvFactory); the turns
    are the same, the parent telling one process at a time to advance a segment. A
    process that fails or dies raises ControllerProcessError naming its controller.
    `built`, if given, receives the controllers as they ended the run (isolate=True: only
    those that learn online, sent back from their processes). `total_steps` and
    `switch_every` are integers in [1, RUN_WINDOWS_MAX] (`nvmw.rl.simrun.check_steps`:
    each controller's trace keeps a row per step).
    Returns (summary per controller, trace per controller)."""
    total_steps = check_steps(total_steps, "total_steps")
    switch_every = check_steps(switch_every, "switch_every")
    if isolate:
        if not all(isinstance(c, str) for c in controllers):
            raise TypeError("isolate=True builds each controller in its own process: pass controller names "
                            "(and context), not controller objects")
        import pickle

        try:
            pickle.dumps(make_env)
        except Exception as e:  # noqa: BLE001 (any pickling failure means the same)
            raise TypeError("isolate=True builds each env in its controller's process: make_env must be "
                            f"picklable, e.g. an EnvFactory ({e})") from None
    # Every controller, built here or in its process, is checked against the run's phases.
    context = dataclasses.replace(context or ControllerContext(), phases=tuple(phases))
    if not isolate:
        controllers = [make_controller(c, context) for c in controllers]
    # Summaries and traces are keyed by name: a second run of one name would replace the first.
    _check_unique([c if isinstance(c, str) else c.name for c in controllers])
    summaries, traces = {}, {}
    bar = None
    if progress:
        bar = tqdm(total=total_steps * len(controllers), desc="evaluate", unit="step")
    run_kwargs = dict(total_steps=total_steps, switch_every=switch_every, seed=seed,
                      initial_threads=initial_threads, phases=tuple(phases))
    runs: list[_Run] = []
    children: list[_Child] = []
    try:
        if isolate:
            try:
                _evaluate_isolated(make_env, controllers, context, run_kwargs=run_kwargs, total_steps=total_steps,
                                   switch_every=switch_every, interleave=interleave, bar=bar, children=children)
            except KeyboardInterrupt:
                # Stop every child after its current window and collect what it ran.
                for ch in children:
                    ch.stop.set()
                for ch in children:
                    try:
                        ch.finish(timeout=60.0)
                    except (ControllerProcessError, OSError):
                        pass
                raise
            finally:
                for ch in children:
                    ch.close()
        elif not interleave:
            for c in controllers:
                env = make_env(c.requires_control)
                try:
                    run = _Run(env, c, total_steps=total_steps, switch_every=switch_every, seed=seed,
                               initial_threads=initial_threads, phases=phases)
                    runs.append(run)
                    run.advance(total_steps, bar)
                finally:
                    env.close()
        else:
            try:
                for c in controllers:
                    runs.append(_Run(make_env(c.requires_control), c, **run_kwargs))
                for _seg in range(-(-total_steps // switch_every)):
                    for run in runs:
                        if bar is not None:
                            bar.set_postfix(controller=run.controller.name, refresh=False)
                        run.advance(switch_every, bar)
            finally:
                for run in runs:
                    run.env.close()
    except KeyboardInterrupt:
        # Ctrl-C: the steps every controller has taken so far, summarised as usual.
        if bar is not None:
            bar.close()
        traces = {run.controller.name: run.result() for run in runs if run.step > 0}
        traces.update({ch.name: ch.trace for ch in children if ch.trace is not None and ch.trace["step"]})
        summaries = {name: summarize(tr, switch_every) for name, tr in traces.items()}
        done = {name: len(tr["step"]) for name, tr in traces.items()}
        raise Interrupted(f"steps done per controller: {done} of {total_steps}",
                          partial=(summaries, traces)) from None
    except BaseException:
        if bar is not None:
            bar.close()
        raise
    if isolate:
        traces = {ch.name: ch.trace for ch in children}
        if built is not None:
            built.extend(ch.learned for ch in children if ch.learned is not None)
    else:
        traces = {run.controller.name: run.result() for run in runs}
        if built is not None:
            built.extend(controllers)
    if bar is not None:
        bar.close()
    for name, tr in traces.items():
        summaries[name] = summarize(tr, switch_every)
    return summaries, traces


def evaluate_lineup(env_kind: str, controllers: Sequence[str], *, window_s: float, steps: int, switch_every: int,
                    seed: int = 0, sla: SLASpec | str | None = None, device: str = "optane-1dimm",
                    engine: str = "memory", path: str | None = None, sim_params: Any = None,
                    context: ControllerContext | None = None, interleave: bool = True, progress: bool = False,
                    built: list | None = None, isolate: bool = False, phases: Sequence[int] = DEFAULT_PHASES,
                    **header_extra: Any
                    ) -> tuple[dict, dict, dict]:
    """The long run of a line-up of controller names (nvmw.lab.lineup) on fresh envs of
    one kind (nvmw.rl.make_env): the SLA spec is resolved once (`sla`, default the
    calibrated one for `device`) and shared by every env and by the controllers aiming at
    its latency goal. Returns (summaries, traces, run header); `built`, if given, receives
    the controllers (e.g. to save an agent that learned online; isolate=True: only those
    that learned online, as their processes ended the run). isolate=True runs each
    controller and its env in a process of its own (see evaluate_controllers). `phases`
    are the phases the schedule draws; an oracle table lacking one is refused before the
    run starts, as `steps` or `switch_every` outside [1, RUN_WINDOWS_MAX] is
    (`nvmw.rl.simrun.check_steps`)."""
    steps = check_steps(steps, "steps")
    switch_every = check_steps(switch_every, "switch_every")
    probe = make_env(env_kind, window_s=window_s, sla=sla, device=device, engine=engine)
    spec = probe.sla
    header = run_header(env_kind, probe, phases=phases, steps=steps, switch_every=switch_every, seed=seed,
                        **header_extra)
    probe.close()
    ctx = dataclasses.replace(context or ControllerContext(), sla=spec, phases=tuple(phases))
    # Built here also with isolate=True, where each process builds its own: a wrong name or
    # a missing agent file fails before any process starts.
    ctrls = build_controllers(controllers, ctx)
    _check_unique([c.name for c in ctrls])
    fresh_env = EnvFactory(env_kind, dict(window_s=window_s, sla=spec, device=device, engine=engine, path=path,
                                          max_episode_steps=steps, sim_params=sim_params))
    try:
        summaries, traces = evaluate_controllers(fresh_env, list(controllers) if isolate else ctrls,
                                                 total_steps=steps, switch_every=switch_every, seed=seed,
                                                 progress=progress, interleave=interleave, isolate=isolate,
                                                 context=ctx, built=built, phases=phases)
    except Interrupted as e:
        summaries, traces = e.partial
        header = dict(header, interrupted=e.note)
        raise Interrupted(e.note, partial=(summaries, traces, header)) from None
    return summaries, traces, header


def markdown_report(summaries: Mapping[str, Mapping[str, Any]], header: Mapping[str, Any]) -> str:
    """Tables like thesis E.1-E.3 (one column per controller) plus SLA fractions."""
    names = list(summaries)
    lines = ["# nvmw long-run evaluation", ""]
    for k, v in header.items():
        lines.append(f"- **{k}**: {v}")
    lines.append("")

    def table(title: str, key: str, fmt: str) -> None:
        lines.append(f"## {title}")
        lines.append("")
        lines.append("| | " + " | ".join(names) + " |")
        lines.append("|---|" + "---|" * len(names))
        for stat in ("min", "q1", "median", "q3", "max"):
            lines.append(f"| {stat} | " + " | ".join(format(summaries[n][key][stat], fmt) for n in names) + " |")
        lines.append("")

    table("Reward (cf. Table E.1)", "reward", ",.2f")
    table("Throughput, ops/s (cf. Table E.2)", "throughput", ",.0f")
    table("p99 latency, us (cf. Table E.3)", "p99_us", ",.1f")
    lines.append("## Fraction of steps meeting the SLA")
    lines.append("")
    lines.append("| | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for key, label in (("sla_latency_met", "latency"), ("sla_throughput_met", "throughput"), ("sla_both_met", "both")):
        lines.append(f"| {label} | " + " | ".join(f"{summaries[n][key]:.3f}" for n in names) + " |")
    lines.append("| both, 95 % interval over segments | " + " | ".join(
        "{:.2f}-{:.2f}".format(*summaries[n]["sla_both_ci95"]) for n in names) + " |")
    lines.append("| median steps to settle after a switch | " + " | ".join(
        "-" if summaries[n]["settle_steps_median"] is None else f"{summaries[n]['settle_steps_median']:.0f}"
        for n in names) + " |")
    lines.append("| segments settled | " + " | ".join(str(summaries[n]["segments_settled"]) for n in names) + " |")
    lines.append("")
    return "\n".join(lines)


def plot_traces(traces: Mapping[str, Mapping[str, list]], path: str | os.PathLike, switch_every: int,
                title: str = "") -> None:
    """Figure E.1-like: per controller a column of threads / throughput / p99 / offered load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(traces)
    fig, axes = plt.subplots(4, len(names), figsize=(4.2 * len(names), 9), sharex=True, squeeze=False)
    for c, n in enumerate(names):
        tr = traces[n]
        x = np.asarray(tr["step"])
        ax = axes[0][c]
        ax.set_title(n)
        ax.set_ylabel("threads")
        if len(x) and not (any(tr["interactive_threads"]) or any(tr["batch_threads"])):
            # No control has no pools (the env reports 0 threads for both): no limit to draw.
            ax.text(0.5, 0.5, "no limits (no control)", ha="center", va="center", transform=ax.transAxes,
                    fontsize=8)
            ax.set_yticks([])
        else:
            ax.plot(x, tr["interactive_threads"], label="interactive", lw=0.8)
            ax.plot(x, tr["batch_threads"], label="batch", lw=0.8)
            ax.legend(fontsize=7)
        axes[1][c].plot(x, tr["throughput"], lw=0.6, color="tab:green")
        axes[1][c].set_ylabel("throughput (ops/s)")
        axes[2][c].plot(x, tr["p99_us"], lw=0.6, color="tab:red")
        axes[2][c].set_yscale("log")
        axes[2][c].set_ylabel("p99 (us)")
        axes[3][c].plot(x, tr["offered_ops_per_s"], lw=0.6, color="tab:gray")
        axes[3][c].set_ylabel("offered (ops/s)")
        axes[3][c].set_xlabel("step")
        for r in range(4):
            for s in range(switch_every, len(x), switch_every):
                axes[r][c].axvline(s, color="k", lw=0.4, alpha=0.4)
        schedule = tr.get("schedule", [])
        for s_idx, ph in enumerate(schedule):
            # More than 10 segments leave a label less room than its width: alternate two rows.
            y = 0.12 if len(schedule) > 10 and s_idx % 2 else 0.02
            axes[3][c].text(s_idx * switch_every + 2, y, f"P{ph}", transform=axes[3][c].get_xaxis_transform(),
                            fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    try:
        jsonfiles.save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)


#: The files `write_outputs` writes in its directory, by key of the paths it returns.
OUTPUT_FILES = {"json": "eval.json", "run": "run.json", "markdown": "eval.md", "png": "eval.png",
                "traces": "traces.json"}


def write_outputs(summaries: Mapping, traces: Mapping, header: Mapping[str, Any], out_dir: str | os.PathLike,
                  switch_every: int, *, plot: bool = True,
                  progress: Callable[[str], None] | None = None) -> dict[str, str]:
    """Writes eval.json ({controller: summary}), run.json (machine, device, window, SLA...),
    eval.md, eval.png (unless `plot` is False) and traces.json (per-step columns) in out_dir,
    replacing those of an earlier run; one of them this run does not write (eval.png
    without `plot`) is removed, saying so through `progress`. Other files are left alone."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, f) for k, f in OUTPUT_FILES.items() if k != "png" or plot}
    with jsonfiles.open_output(paths["json"], encoding="utf-8") as fh:
        json.dump(summaries, fh, indent=2)
    with jsonfiles.open_output(paths["run"], encoding="utf-8") as fh:
        json.dump(dict(header), fh, indent=2)
    with jsonfiles.open_output(paths["markdown"], encoding="utf-8") as fh:
        fh.write(markdown_report(summaries, header))
    with jsonfiles.open_output(paths["traces"], encoding="utf-8") as fh:
        json.dump(traces, fh)
    if plot:
        plot_traces(traces, paths["png"], switch_every,
                    title=", ".join(f"{k}: {v}" for k, v in header.items() if k in ("device", "window_s", "sla", "cores")))
    removed = jsonfiles.remove_stale(out_dir, tuple(OUTPUT_FILES.values()),
                                     tuple(os.path.basename(p) for p in paths.values()))
    if removed and progress is not None:
        progress(f"removed {', '.join(removed)} of an earlier run from {os.fspath(out_dir)} (not written by this one)")
    return paths
