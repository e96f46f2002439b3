"""Static-configuration and greedy-agent episodes on the simulator without Gymnasium or NumPy.

`run_static` runs a phase on `_core.Simulator` under one fixed configuration (or the
no-control baseline) and returns the rows `nvmw.lab.phase_run.simulate_phase` returns for
the same arguments, bit for bit: it seeds as `SimEnv.reset(seed=...)` does (NumPy's
PCG64 behind a SeedSequence, reimplemented here for the two draws an episode makes: the
workload seed and the schedule offset) and judges each window with the same SLA spec.
Only the controller loop and the Gymnasium env are left out, which is what lets `nvmw
sim run --controller fixed:I,B` (or `none`) start and finish a 200-window episode within
a few hundred milliseconds of wall time. `run_greedy` does the same for a trained agent
acting greedily (`nvmw.rl.policy.GreedyPolicy`, the policy file saved beside the agent):
it rebuilds the env's observation of every window (clipped to the observation space,
rounded to float32) and applies each action through the core's action table, as the
env's control loop does."""
from __future__ import annotations

import math
import re
from array import array
from typing import Any, Callable, Optional

from nvmw import _core
from nvmw.control.sla import SLASpec, load_spec
from nvmw.devices import load_profile
from nvmw.rl.simparams import load_params
from nvmw.workloads.counts import count_in
from nvmw.workloads.phases import list_phases, phase_workloads

_MASK32 = 0xFFFFFFFF
_MASK64 = (1 << 64) - 1
_MASK128 = (1 << 128) - 1
# numpy/random/bit_generator.pyx (SeedSequence) and numpy/random/src/pcg64 constants.
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43b0d7e5, 0x931e8875, 0x8b51f9dd, 0x58f38ded
_MIX_L, _MIX_R, _XSHIFT = 0xca01f9dd, 0x4973f715, 16
_PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341


def _seed_words(seed: int) -> list:
    """numpy.random.SeedSequence(seed).generate_state(4, numpy.uint64) for an int >= 0."""
    entropy = []
    x = int(seed)
    while True:
        entropy.append(x & _MASK32)
        x >>= 32
        if x == 0:
            break
    h = _INIT_A

    def hashmix(v: int) -> int:
        nonlocal h
        v ^= h
        h = (h * _MULT_A) & _MASK32
        v = (v * h) & _MASK32
        return v ^ (v >> _XSHIFT)

    def mix(a: int, b: int) -> int:
        r = (_MIX_L * a - _MIX_R * b) & _MASK32
        return r ^ (r >> _XSHIFT)

    pool = [hashmix(entropy[i] if i < len(entropy) else 0) for i in range(4)]
    for src in range(4):
        for dst in range(4):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(4, len(entropy)):
        for dst in range(4):
            pool[dst] = mix(pool[dst], hashmix(entropy[src]))
    hb = _INIT_B
    words = []
    for i in range(8):
        v = pool[i % 4] ^ hb
        hb = (hb * _MULT_B) & _MASK32
        v = (v * hb) & _MASK32
        words.append(v ^ (v >> _XSHIFT))
    return [words[2 * i] | (words[2 * i + 1] << 32) for i in range(4)]


class Pcg64:
    """`numpy.random.default_rng(seed)` (what Gymnasium's reset(seed=...) builds) for the
    draws an episode makes: `integers(low, high)` below 2**32 values and `uniform(low,
    high)`, giving the same numbers."""

    def __init__(self, seed: int):
        if not (isinstance(seed, int) and seed >= 0):
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        w = _seed_words(seed)
        self._inc = ((((w[2] << 64) | w[3]) << 1) | 1) & _MASK128
        self._state = 0
        self._step()
        self._state = (self._state + ((w[0] << 64) | w[1])) & _MASK128
        self._step()
        self._half: Optional[int] = None  # the buffered upper 32 bits (pcg64_next32)

    def _step(self) -> None:
        self._state = (self._state * _PCG_MULT + self._inc) & _MASK128

    def next64(self) -> int:
        self._step()
        s = self._state
        x = ((s >> 64) ^ s) & _MASK64
        r = s >> 122
        return ((x >> r) | (x << ((64 - r) & 63))) & _MASK64

    def next32(self) -> int:
        if self._half is not None:
            out, self._half = self._half, None
            return out
        n = self.next64()
        self._half = n >> 32
        return n & _MASK32

    def integers(self, low: int, high: int) -> int:
        """An int in [low, high), high - low < 2**32 (Lemire's method, as NumPy)."""
        rng = high - 1 - low
        if not 0 <= rng < _MASK32:
            raise ValueError("integers: need 1 <= high - low < 2**32")
        excl = rng + 1
        m = self.next32() * excl
        left = m & _MASK32
        if left < excl:
            threshold = (_MASK32 - rng) % excl
            while left < threshold:
                m = self.next32() * excl
                left = m & _MASK32
        return low + (m >> 32)

    def uniform(self, low: float, high: float) -> float:
        return low + (high - low) * ((self.next64() >> 11) * (1.0 / 9007199254740992.0))


#: Which window-stats key of its class each state feature is, in the core's STATE_NAMES
#: order (as nvmw.rl.sim reads them), and the observation space's upper bound of each
#: feature other than threads (nvmw.rl.envs.ControlEnv; the lower bound is 0).
_STATE_STAT_KEYS = {"threads": "threads", "queue_size": "queue_len_end", "block_size": "mean_block_bytes",
                    "write_ratio": "write_ratio"}
_STATE_FEATURES = tuple((cls, feature) for cls, _, feature in (n.partition("_") for n in _core.STATE_NAMES))
_STATE_HIGH = {"queue_size": 1e9, "block_size": 2.0**32, "write_ratio": 1.0}

_FIXED = re.compile(r"fixed:([0-9]+),([0-9]+)")  # ASCII digits: \d also matches other scripts' ("١")

#: The monitor windows the environments take, s: the middleware's own range (it refuses
#: others). The simulator is held to it too: a window of a few microseconds of virtual
#: time completes no request and reads as p99 0 at 0 ops/s, not as an error.
WINDOW_S_RANGE = (0.001, 86400.0)


def check_window_s(window_s: Any) -> float:
    """`window_s` as a float; ValueError unless it is a number in WINDOW_S_RANGE."""
    lo, hi = WINDOW_S_RANGE
    try:
        w = float(window_s)
    except (TypeError, ValueError):
        w = math.nan
    if isinstance(window_s, (bool, str)) or not lo <= w <= hi:
        raise ValueError(f"window_s must be a number in [{lo:g}, {hi:g}] s, got {window_s!r}")
    return w


#: The longest run of a phase on the middleware (`nvmw.lab.phase_run.run_phase`, `nvmw
#: run-phase --duration`), s, and the most windows it may hold (one row each is kept for
#: the result: a day of 1 ms windows would be 86.4 million rows). A simulated run is held
#: to the same number of windows (`check_windows`), and an RL episode or long run to as
#: many steps, one window each (`check_steps`).
RUN_S_MAX = 86400.0
RUN_WINDOWS_MAX = 1_000_000


def run_windows(duration_s: Any, window_s: float) -> int:
    """The windows a run of `duration_s` seconds of `window_s`-second windows takes
    (rounded, at least one); ValueError unless `duration_s` is a number in (0, RUN_S_MAX]
    and the run holds at most RUN_WINDOWS_MAX windows."""
    try:
        d = float(duration_s)
    except (TypeError, ValueError):
        d = math.nan
    if isinstance(duration_s, (bool, str)) or not 0.0 < d <= RUN_S_MAX:
        raise ValueError(f"duration_s must be a number in (0, {RUN_S_MAX:g}] s, got {duration_s!r}")
    n = max(1, int(round(d / check_window_s(window_s))))
    if n > RUN_WINDOWS_MAX:
        raise ValueError(f"a run of {d:g} s in windows of {window_s:g} s would be {n:,} windows, "
                         f"more than {RUN_WINDOWS_MAX:,}: use longer windows or a shorter run")
    return n


def check_windows(windows: Any) -> int:
    """`windows` of a simulated run (`nvmw sim run --windows`) as an int; ValueError
    unless it is an integer in [0, RUN_WINDOWS_MAX] (0: no window). The run keeps a row per
    window, about 0.5 KB each (about 0.5 GB at the bound), and takes about 70 us of wall
    time per fast-forwarded 0.1 s window of phase 1, far more with `exact` or longer
    windows: over a minute at the bound, hours with `exact`."""
    return count_in("windows", windows, 0, RUN_WINDOWS_MAX)


def check_steps(steps: Any, name: str = "steps") -> int:
    """`steps` of an episode or a long run (`nvmw collect|train --steps`, `nvmw evaluate
    --steps|--switch-every`) as an int; ValueError naming `name` unless it is an integer in
    [1, RUN_WINDOWS_MAX]. A step is one monitor window: on the middleware a window of
    `window_s` of real time (at the bound about 28 hours of 0.1 s windows, 11.6 days of 1 s
    ones), on the simulator about 0.1-0.3 ms of wall time (fast-forward, 0.1-1 s windows).
    The episode's transitions, or each controller's trace of the long run, take about 0.5 KB
    of memory per step (about 0.5 GB at the bound)."""
    return count_in(name, steps, 1, RUN_WINDOWS_MAX)


def check_count(value: Any, name: str, hi: int, lo: int = 1) -> int:
    """`value` as an int; ValueError naming `name` unless it is an integer in [lo, hi]. The
    bound of a count option of the lab commands (episodes, rounds, workers, windows per
    configuration), checked again by the library function that takes it."""
    return count_in(name, value, lo, hi)


def static_config(controller: Any) -> Optional[tuple]:
    """(control, interactive, batch) when `controller` is the name of a static
    configuration in its canonical spelling ("none" -> (False, 15, 15), the threads
    simulate_phase starts it with; "fixed:I,B" -> (True, I, B)); None otherwise."""
    if not isinstance(controller, str):
        return None
    if controller == "none":
        return (False, 15, 15)
    m = _FIXED.fullmatch(controller)
    if m is None or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        return None
    return (True, int(m.group(1)), int(m.group(2)))


def _f32_state(stats: dict, max_threads: int) -> list:
    """The state `SimEnv.step` returns for a window (the core's STATE_NAMES order), as
    Python floats: each feature clipped to the observation space's bounds and rounded to
    float32, as the env's observation is."""
    x = []
    for cls, feature in _STATE_FEATURES:
        v = float(stats[cls][_STATE_STAT_KEYS[feature]])
        hi = float(max_threads) if feature == "threads" else _STATE_HIGH[feature]
        x.append(v if v != v else (0.0 if v < 0.0 else (hi if v > hi else v)))
    return array("f", x).tolist()


def _episode(phase: int, *, windows: int, control: bool, threads: tuple, window_s: float, device: str,
             params: Any, seed: int, sla: "SLASpec | str | None", max_threads: int, exact: bool,
             on_window: Optional[Callable[[dict], None]], decide: Optional[Callable[[list], int]]) -> list[dict]:
    phase = int(phase)
    if phase not in list_phases():
        raise ValueError(f"phase must be one of {tuple(list_phases())}, got {phase!r}")
    window_s = check_window_s(window_s)
    windows = check_windows(windows)
    i, b = int(threads[0]), int(threads[1])
    if not (1 <= i <= max_threads and 1 <= b <= max_threads):
        raise ValueError(f"threads must be in [1, {max_threads}], got {(i, b)}")
    spec = sla if isinstance(sla, SLASpec) else load_spec(sla)
    device = device or "none"
    profile = None if device == "none" else load_profile(device)
    rng = Pcg64(int(seed))
    workload_seed = rng.integers(0, 2**31 - 1)
    sim = _core.Simulator(load_params(params, device), profile, control=bool(control), interactive_threads=i,
                          batch_threads=b, max_threads=int(max_threads), no_control_max_inflight=200,
                          window_s=float(window_s), seed=workload_seed, fast_forward=not exact)
    wi, wb, _offered = phase_workloads(phase, workload_seed % 4)
    sim.set_workload(wi, wb, rng.uniform(0.0, wi["period_us"]))
    sim.run_window()  # SimEnv's warm-up window
    # The reset observation: the threads, zeros for the window features.
    obs = [float(i), float(b)] + [0.0] * (len(_STATE_FEATURES) - 2)
    cur = (i, b)
    rows: list[dict] = []
    for _ in range(windows):
        if decide is not None and control:
            action = decide(obs)
            if not 0 <= action < _core.N_ACTIONS:
                raise ValueError(f"action must be an int in [0, {_core.N_ACTIONS}), got {action!r}")
            new = tuple(_core.apply_action(cur, action, int(max_threads)))
            if new != cur:
                sim.set_threads(*new)
                cur = new
        s = sim.run_window()
        si, sb = s["interactive"], s["batch"]
        row = {"phase": phase, "threads": list(cur) if control else [0, 0],
               "reward": round(spec.evaluate(s).reward, 3),
               "interactive_p99_us": si["p99_us"], "ops_per_s": s["all"]["ops_per_s"],
               "batch_ops_per_s": sb["ops_per_s"], "interactive_queue": si["queue_len_end"],
               "batch_queue": sb["queue_len_end"]}
        rows.append(row)
        if on_window is not None:
            on_window(row)
        if decide is not None:
            obs = _f32_state(s, max_threads)
    return rows


def run_static(phase: int, *, windows: int = 10, control: bool = True, threads: tuple = (15, 15),
               window_s: float = 0.1, device: str = "optane-1dimm", params: Any = None, seed: int = 0,
               sla: "SLASpec | str | None" = None, max_threads: int = 32, exact: bool = False,
               on_window: Optional[Callable[[dict], None]] = None) -> list[dict]:
    """`windows` simulated windows of a shipped phase at fixed `threads` (`control`
    False: the no-control baseline), as `simulate_phase(phase, controller="fixed:I,B" or
    "none", ...)` runs them: same rows for the same arguments."""
    return _episode(phase, windows=windows, control=control, threads=threads, window_s=window_s, device=device,
                    params=params, seed=seed, sla=sla, max_threads=max_threads, exact=exact, on_window=on_window,
                    decide=None)


def run_greedy(phase: int, policy: Any, *, windows: int = 10, threads: tuple = (15, 15), window_s: float = 0.1,
               device: str = "optane-1dimm", params: Any = None, seed: int = 0,
               sla: "SLASpec | str | None" = None, max_threads: int = 32, exact: bool = False,
               on_window: Optional[Callable[[dict], None]] = None) -> list[dict]:
    """`windows` simulated windows of a shipped phase under a greedy agent: before every
    window `policy.greedy_action(state)` picks a Table 3.3 action, applied through the
    core's action table (`_core.apply_action`), the state being the env's observation of
    the previous window (the reset observation before the first). Same rows as
    `simulate_phase(phase, controller=AgentController(agent), ...)` starting at `threads`
    when the policy acts as the agent does; with `nvmw.rl.policy.GreedyPolicy` no NumPy
    is needed."""
    return _episode(phase, windows=windows, control=True, threads=threads, window_s=window_s, device=device,
                    params=params, seed=seed, sla=sla, max_threads=max_threads, exact=exact, on_window=on_window,
                    decide=lambda obs: int(policy.greedy_action(obs)))


__all__ = ["run_static", "run_greedy", "static_config", "check_windows", "check_steps", "check_count", "Pcg64"]
