"""Episodes as independent tasks, run in this process, in local worker processes or as
Ray tasks, with the same results wherever they run.

An episode is a pure function of (environment description, phase, episode seed, policy):
the seed is derived from the run seed and the episode's index (`episode_seed`), and the
results come back ordered by index, so a dataset or an agent depends on the run seed only,
not on the backend or the number of workers. The environment description is the keyword
arguments of `nvmw.rl.make_env`; each worker builds its environment once and reuses it
(the simulator caches its traces per seed).

Backends (`EpisodeRunner`):

* ``local`` with one worker: in this process, on the environment object given (the only
  choice for the real middleware: its episodes share one machine and its clock);
* ``local`` with n workers: n processes on this machine (joblib's loky executor);
* ``ray``: Ray tasks on whatever cluster ``ray.init(address=...)`` reaches, or a local
  Ray instance (``num_cpus`` = workers) when no address is given. Every node needs nvmw
  importable (installed, or a Ray ``runtime_env``)."""
from __future__ import annotations

import copy
import os
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from nvmw.control.loop import drive
from nvmw.rl.agent import N_ACTIONS, N_FEATURES
from nvmw.rl.registry import make_env
from nvmw.rl.simrun import check_count

BACKENDS = ("local", "ray")

#: The most episodes per phase of a run (`nvmw collect --episodes`, `nvmw train --episodes
#: | --collect-episodes | --batch`): 66 times the thesis's 150 random episodes per phase, 10
#: times its 700-1000 Q-learning ones. An episode of the default 200 steps takes 20 s of
#: real time on the middleware in 0.1 s windows (at the bound 2.3 days per phase) or about
#: 0.04 s on the simulator (0.2 s with Q-learning's per-step update); collecting keeps about
#: 1 KB per step (episodes x phases x steps: 12 million transitions, about 12 GB, for six
#: phases at the bound and the default steps).
EPISODES_MAX = 10_000

#: The most workers of a runner (`--workers`): local processes, started all at once, each
#: with its own environment (about 130 MB with the simulator, so about 33 GB at the bound),
#: or the CPUs of a local Ray instance.
WORKERS_MAX = 256

#: The per-step columns an episode returns (transitions plus what the SLA judged).
EPISODE_KEYS = ("states", "actions", "rewards", "next_states", "terminated", "truncated", "p99_us", "throughput",
                "both")


#: Seed streams: random-agent collection and Q-learning episodes of the same run seed
#: get unrelated seeds.
COLLECT, TRAIN = 0, 1


def episode_seed(run_seed: int, index: int, stream: int = COLLECT) -> int:
    """The seed of episode `index` of a run: a function of the run seed, the stream and
    the index only (numpy's SeedSequence), so episodes can run anywhere, in any order."""
    entropy = [int(run_seed) % (1 << 64), int(stream), int(index)]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint32)[0])


class _Random:
    """The thesis's random agent: uniform actions from a seeded generator."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def act(self, obs, info) -> int:
        return int(self.rng.integers(N_ACTIONS))


class _EpsilonGreedy:
    """An agent snapshot acting epsilon-greedily with its own seeded generator."""

    def __init__(self, agent, epsilon: float, seed: int):
        self.agent = agent
        self.epsilon = float(epsilon)
        self.rng = np.random.default_rng(seed)

    def act(self, obs, info) -> int:
        if self.epsilon > 0 and self.rng.random() < self.epsilon:
            return int(self.rng.integers(N_ACTIONS))
        return self.agent.greedy_action(obs)


def run_episode(env, phase: int, seed: int, agent=None, epsilon: float = 1.0,
                sink: Optional[dict] = None) -> dict[str, np.ndarray]:
    """One episode of `phase` on `env` until it truncates: random actions when `agent` is
    None, else `agent` epsilon-greedy (it is not changed). Returns the EPISODE_KEYS columns.
    `sink` (dict of lists) also receives every whole transition as it happens, so a
    caller that is interrupted keeps the part of the episode that ran."""
    obs, info = env.reset(seed=int(seed), options={"phase": int(phase)})
    policy = _Random(seed) if agent is None else _EpsilonGreedy(agent, epsilon, seed)
    cols: dict[str, list] = {k: [] for k in EPISODE_KEYS}
    targets = [cols] if sink is None else [cols, sink]

    def record(o, a, r, no, term, trunc, step_info):
        row = (("states", o), ("actions", a), ("rewards", r), ("next_states", no), ("terminated", term),
               ("truncated", trunc), ("p99_us", step_info["p99_us"]), ("throughput", step_info["throughput"]),
               ("both", bool(step_info["sla_latency_met"] and step_info["sla_throughput_met"])))
        for t in targets:
            for k, v in row:
                t[k].append(v)

    drive(env, policy, 1 << 62, obs, info, on_step=record)
    return episode_arrays(cols)


def episode_arrays(cols: Mapping[str, Sequence]) -> dict[str, np.ndarray]:
    """The columns of some transitions as arrays (whole rows only; "both": the window met
    both SLAs)."""
    n = min(len(cols[k]) for k in EPISODE_KEYS)
    return {
        "states": np.asarray(cols["states"][:n], np.float64).reshape(-1, N_FEATURES),
        "actions": np.asarray(cols["actions"][:n], np.int64),
        "rewards": np.asarray(cols["rewards"][:n], np.float64),
        "next_states": np.asarray(cols["next_states"][:n], np.float64).reshape(-1, N_FEATURES),
        "terminated": np.asarray(cols["terminated"][:n], bool),
        "truncated": np.asarray(cols["truncated"][:n], bool),
        "p99_us": np.asarray(cols["p99_us"][:n], np.float64),
        "throughput": np.asarray(cols["throughput"][:n], np.float64),
        "both": np.asarray(cols["both"][:n], bool),
    }


# --- workers --------------------------------------------------------------------------

#: A worker's environments, built once per description (module state of the worker process).
_ENVS: dict[str, Any] = {}


def _worker_env(env_kwargs: Mapping[str, Any]):
    key = repr(sorted(env_kwargs.items()))
    if key not in _ENVS:
        _ENVS[key] = make_env(**env_kwargs)
    return _ENVS[key]


def _worker_episodes(env_kwargs: Mapping[str, Any], tasks: Sequence[tuple], agent=None) -> list[dict]:
    """Run (phase, seed, epsilon) tasks in a worker with its cached environment."""
    env = _worker_env(env_kwargs)
    return [run_episode(env, ph, seed, agent, eps) for ph, seed, eps in tasks]


class _Done:
    """A finished result, for the in-process backend."""

    def __init__(self, value):
        self.value = value


class EpisodeRunner:
    """Runs episode tasks on a backend and hands results back ordered by submission.

    `env` is the environment object for the in-process backend; `env_kwargs` (the
    arguments of `make_env`) describe it to worker processes and Ray tasks. Use as a
    context manager (or call `close`): a Ray instance it started is shut down, worker
    processes are released."""

    def __init__(self, backend: str = "local", *, workers: int = 1, env=None,
                 env_kwargs: Optional[Mapping[str, Any]] = None, ray_address: Optional[str] = None,
                 chunk: int = 1):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        workers = check_count(workers, "workers", WORKERS_MAX)
        self.backend = backend
        self.workers = workers
        self.env = env
        self.env_kwargs = dict(env_kwargs or {})
        self.chunk = max(1, int(chunk))
        self.in_process = backend == "local" and self.workers == 1
        if not self.in_process and self.env_kwargs.get("kind", "real") == "real":
            raise ValueError("episodes on the real middleware run in this process only (one machine, one clock): "
                             "use --backend local --workers 1")
        if self.in_process and env is None:
            self.env = _worker_env(self.env_kwargs)
        self._executor = None
        self._ray = None
        self._ray_started = False
        self._remote = None
        if backend == "ray":
            self._start_ray(ray_address)
        elif not self.in_process:
            from joblib.externals.loky import get_reusable_executor

            self._executor = get_reusable_executor(max_workers=self.workers, timeout=300)

    def _start_ray(self, address: Optional[str]) -> None:
        try:
            import ray
        except ImportError:
            raise RuntimeError('the ray backend needs Ray: pip install "ray[default]"') from None
        self._ray = ray
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                # Workers inherit this process's environment (PYTHONPATH, NVMW_DEV_CORE_DIR).
                ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False)
            self._ray_started = True
        self._remote = ray.remote(num_cpus=1)(_worker_episodes)

    # --- submission -------------------------------------------------------------------
    def submit(self, tasks: Sequence[tuple], agent=None) -> list:
        """Start (phase, seed, epsilon) tasks acting with `agent` (None: random). The agent
        is copied now, so learning afterwards does not change what these episodes do.
        Returns handles for `results`, one per chunk of tasks."""
        tasks = [(int(p), int(s), float(e)) for p, s, e in tasks]
        chunks = [tasks[i:i + self.chunk] for i in range(0, len(tasks), self.chunk)]
        if self.in_process:
            snapshot = None if agent is None else copy.deepcopy(agent)
            return [("lazy", c, snapshot) for c in chunks]
        if self._ray is not None:
            ref = None if agent is None else self._ray.put(agent)
            env_ref = self._ray.put(self.env_kwargs)
            return [("ray", self._remote.remote(env_ref, c, ref)) for c in chunks]
        return [("loky", self._executor.submit(_worker_episodes, self.env_kwargs, c, agent)) for c in chunks]

    def results(self, handles: list, on_episode: Optional[Callable[[dict], None]] = None,
                sink: Optional[dict] = None) -> list[dict]:
        """The episodes of `handles`, in submission order (waits for them). `on_episode`
        is called as each one is available; `sink` receives transitions as they happen
        (in-process backend only)."""
        out: list[dict] = []
        for h in handles:
            if h[0] == "lazy":
                _, chunk, agent = h
                eps = []
                for ph, seed, e in chunk:
                    ep = run_episode(self.env, ph, seed, agent, e, sink=sink)
                    eps.append(ep)
                    if on_episode is not None:
                        on_episode(ep)
                out.extend(eps)
                continue
            eps = self._ray.get(h[1]) if h[0] == "ray" else h[1].result()
            if sink is not None:
                for ep in eps:
                    for k in EPISODE_KEYS:
                        sink[k].extend(ep[k])
            for ep in eps:
                if on_episode is not None:
                    on_episode(ep)
            out.extend(eps)
        return out

    def run(self, tasks: Sequence[tuple], agent=None, on_episode=None, sink=None) -> list[dict]:
        return self.results(self.submit(tasks, agent), on_episode, sink)

    def close(self) -> None:
        if self._ray is not None and self._ray_started:
            self._ray.shutdown()
            self._ray_started = False
        self._ray = None
        self._executor = None

    def __enter__(self) -> "EpisodeRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> str:
        if self.in_process:
            return "local, in this process"
        if self.backend == "ray":
            return f"ray ({self.workers} CPUs requested)" if self._ray_started else "ray (existing cluster)"
        return f"local, {self.workers} worker processes"


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


__all__ = ["COLLECT", "TRAIN", "BACKENDS", "EPISODE_KEYS", "EPISODES_MAX", "WORKERS_MAX", "EpisodeRunner",
           "episode_seed", "run_episode", "episode_arrays", "default_workers"]
