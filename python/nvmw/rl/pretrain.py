"""Offline pretraining (thesis 3.4.3, Appendix D): a random agent collects transitions,
then per-action model selection by 5-fold cross-validation over Table D.1, run with joblib
locally or on a Ray cluster (joblib's ray backend)."""
from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
import zipfile
import zlib
from typing import Any, Mapping, Sequence

import joblib
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, KFold, train_test_split
from tqdm.auto import tqdm

from nvmw import jsonfiles
from nvmw.errors import Interrupted
from nvmw.rl.agent import N_ACTIONS, N_FEATURES, learning_reward, make_pipeline, transform_features
from nvmw.rl.episodes import EPISODE_KEYS, EPISODES_MAX, EpisodeRunner, episode_arrays, episode_seed
from nvmw.rl.simrun import check_count
from nvmw.workloads.phases import DEFAULT_PHASES

# Table D.1 (scikit-learn spelling: the thesis's 'squared' loss is 'squared_error').
FULL_GRID: dict[str, list] = {
    "poly__degree": [1, 2, 3],
    "sgd__loss": ["squared_error", "huber", "epsilon_insensitive"],
    "sgd__penalty": ["l1", "l2", "elasticnet"],
    "sgd__alpha": [0.1, 0.01, 0.001, 0.0001],
    "sgd__learning_rate": ["constant", "optimal", "invscaling"],
    "sgd__max_iter": [100, 1000, 10000, 100000],
}
# The region of Table D.1 where all nine of Table D.2's tuned models lie (squared loss,
# invscaling, any penalty and alpha, every degree), with max_iter up to 1,000: 72 points.
# The constant/optimal schedules and max_iter 10,000-100,000 are what make the whole grid
# take hours (a fit that does not converge runs every pass). Table D.2 picked neither
# schedule; four of its nine models have max_iter 10,000, capped here at 1,000.
THESIS_GRID: dict[str, list] = {
    "poly__degree": [1, 2, 3],
    "sgd__loss": ["squared_error"],
    "sgd__penalty": ["l1", "l2", "elasticnet"],
    "sgd__alpha": [0.1, 0.01, 0.001, 0.0001],
    "sgd__learning_rate": ["invscaling"],
    "sgd__max_iter": [100, 1000],
}
GRIDS = {"full": FULL_GRID, "thesis": THESIS_GRID}
# A 16-point corner of it for quick runs and tests.
QUICK_GRID: dict[str, list] = {
    "poly__degree": [1, 2],
    "sgd__loss": ["squared_error", "huber"],
    "sgd__penalty": ["l2", "elasticnet"],
    "sgd__alpha": [0.01, 0.001],
    "sgd__learning_rate": ["invscaling"],
    "sgd__max_iter": [1000],
}
GRIDS["quick"] = QUICK_GRID

TRANSITION_KEYS = ("states", "actions", "rewards", "next_states", "terminated", "truncated", "phases",
                   "p99_us", "throughput")


def collect_transitions(env=None, *, episodes_per_phase: int = 150, phases: Sequence[int] = DEFAULT_PHASES,
                        seed: int = 0, progress: bool = False, runner=None) -> dict[str, np.ndarray]:
    """Random-agent transitions (uniform actions) for every phase, phase by phase.

    Episode k of the run (phases in order, `episodes_per_phase` each) has the seed
    `episode_seed(seed, k)` for its reset and its actions, and episodes are gathered in
    that order, so the dataset depends on `seed` only: the same on `env` in this process
    (default) as on any `runner` (`nvmw.rl.episodes.EpisodeRunner`: worker processes or
    Ray tasks). `episodes_per_phase` is an integer in [1, EPISODES_MAX]: every transition
    is kept until the end, about 1 KB per step."""
    episodes_per_phase = check_count(episodes_per_phase, "episodes_per_phase", EPISODES_MAX)
    own = runner is None
    if own:
        if env is None:
            raise ValueError("collect_transitions needs an env or a runner")
        runner = EpisodeRunner("local", env=env)
    tasks = [(int(ph), episode_seed(seed, k), 1.0) for k, ph in enumerate(
        ph for ph in phases for _ in range(episodes_per_phase))]
    bar = None
    if progress:
        bar = tqdm(total=len(tasks), desc="collect", unit="ep")
    sink: dict[str, list] = {k: [] for k in EPISODE_KEYS}
    episodes: list[dict] = []

    def done(ep):
        episodes.append(ep)
        if bar is not None:
            bar.update(1)

    try:
        runner.run(tasks, on_episode=done, sink=sink)
    except KeyboardInterrupt:
        # Ctrl-C: every whole transition so far (each stands alone for fitted Q-iteration).
        if bar is not None:
            bar.close()
        data = episode_arrays(sink)
        n = len(data["actions"])
        lengths, ph_col = [len(e["actions"]) for e in episodes], []
        for (ph, _s, _e), ln in zip(tasks, lengths + [n - sum(lengths)]):
            ph_col.extend([ph] * ln)
        data["phases"] = np.asarray(ph_col[:n], np.int64)
        raise Interrupted(f"{n} transitions collected", partial=data) from None
    finally:
        if own:
            runner.close()
    if bar is not None:
        bar.close()
    data = {k: np.concatenate([e[k] for e in episodes]) for k in EPISODE_KEYS}
    data["states"] = data["states"].reshape(-1, N_FEATURES)
    data["next_states"] = data["next_states"].reshape(-1, N_FEATURES)
    data["phases"] = np.concatenate([np.full(len(e["actions"]), t[0], np.int64) for e, t in zip(episodes, tasks)])
    return {k: data[k] for k in TRANSITION_KEYS}


def save_transitions(path: str | os.PathLike, data: Mapping[str, np.ndarray], meta: Mapping[str, Any] | None = None) -> None:
    with jsonfiles.open_output(path, "wb") as fh:  # a file, not a name: numpy would add ".npz" to one
        np.savez_compressed(fh, **{k: np.asarray(data[k]) for k in TRANSITION_KEYS},
                            meta=np.asarray(json.dumps(dict(meta or {}))))


def load_transitions(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a transitions file; checks every column is present, of the right shape and
    kind, and that lengths agree (ValueError naming the file and the column otherwise)."""
    try:
        # Opened here, not by numpy: np.load leaves its own file open when the archive's
        # directory does not read (a truncated file).
        with jsonfiles.open_input(path, "rb") as fh:
            z = np.load(fh, allow_pickle=False)
            if not hasattr(z, "files"):
                raise ValueError(f"{path}: not an nvmw transitions file (one array, not an .npz archive)")
            with z:
                missing = [k for k in TRANSITION_KEYS if k not in z.files]
                if missing:
                    raise ValueError(f"{path}: not an nvmw transitions file (missing {', '.join(missing)})")
                data = {k: z[k] for k in TRANSITION_KEYS}
                if "meta" in z.files:
                    data["meta"] = str(z["meta"])
    except FileNotFoundError:
        raise FileNotFoundError(f"transitions file not found: {path}") from None
    except (OSError, EOFError) as e:
        raise ValueError(f"{path}: cannot read transitions ({e})") from None
    except (zipfile.BadZipFile, zlib.error) as e:
        # A truncated or damaged archive: its directory or a member does not read back.
        raise ValueError(f"{path}: cannot read transitions: damaged or truncated archive ({e})") from None
    except ValueError as e:
        if str(e).startswith(f"{path}: "):
            raise
        # numpy takes any other file for a pickle, and refuses it: say what the file is not.
        raise ValueError(f"{path}: not an nvmw transitions file (.npz from `nvmw collect`)") from None
    for k in TRANSITION_KEYS:
        a = data[k]
        ndim = 2 if k in ("states", "next_states") else 1
        if a.ndim != ndim or (ndim == 2 and a.shape[1] != N_FEATURES):
            want = f"(rows, {N_FEATURES})" if ndim == 2 else "(rows,)"
            raise ValueError(f"{path}: column {k} has shape {a.shape}, expected {want}")
        if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
            raise ValueError(f"{path}: column {k} holds {a.dtype} values, not numbers")
    n = len(data["actions"])
    for k in TRANSITION_KEYS:
        if len(data[k]) != n:
            raise ValueError(f"{path}: column {k} has {len(data[k])} rows, expected {n}")
    if n == 0:
        raise ValueError(f"{path}: no transitions")
    actions = data["actions"]
    if not np.issubdtype(actions.dtype, np.integer) or actions.min() < 0 or actions.max() >= N_ACTIONS:
        raise ValueError(f"{path}: column actions must hold integers in [0, {N_ACTIONS})")
    for k in ("states", "next_states", "rewards"):
        if not np.all(np.isfinite(data[k])):
            raise ValueError(f"{path}: column {k} has values that are not finite")
    return data


def _ray_backend(address: str | None):
    """Context that runs joblib work on Ray (ray.util.joblib), starting a local Ray if
    none is connected (num_cpus=2 keeps it polite on a small machine)."""
    try:
        import ray
        from ray.util.joblib import register_ray
    except ImportError:
        raise RuntimeError('the ray backend needs Ray: pip install "ray[default]"') from None
    @contextlib.contextmanager
    def ctx():
        started = False
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            started = True
        register_ray()
        try:
            with joblib.parallel_backend("ray"):
                yield
        finally:
            if started:
                ray.shutdown()

    return ctx()


def tune_models(data: Mapping[str, np.ndarray], *, grid: Mapping[str, list] | None = None, cv: int = 5,
                n_jobs: int = 2, backend: str = "loky", ray_address: str | None = None,
                feature_transform: str = "log1p", reward_scale: float = 1.0, reward_transform: str = "none", test_size: float = 0.2,
                seed: int = 0, progress: bool = False, max_samples: int | None = None) -> dict[str, Any]:
    """Per-action model selection: for each action, hold out `test_size` of its transitions,
    GridSearchCV (cv folds, neg. MSE) over the grid on the rest, report the held-out R^2.

    `max_samples` caps each action's transitions (a seeded random subset) so that a search
    on thesis-sized data (150 episodes per phase, ~20,000 transitions per action) takes
    minutes.

    Returns {"model_params": [9 flat dicts usable as QLearningAgent(model_params=...)],
    "cv_score": [...], "test_r2": [...], "n_samples": [...], "grid": ..., "wall_s": ...}."""
    grid = dict(grid or FULL_GRID)
    if backend not in ("loky", "ray"):
        raise ValueError("backend must be 'loky' or 'ray'")
    X_all = transform_features(data["states"], feature_transform)
    A = np.asarray(data["actions"]).ravel()
    # The target the agent's models will learn (QLearningAgent reward_scale/reward_transform).
    y_all = learning_reward(np.asarray(data["rewards"], np.float64).ravel(), reward_scale, reward_transform)
    out: dict[str, Any] = {"model_params": [], "cv_score": [], "test_r2": [], "n_samples": [], "grid": grid,
                           "backend": backend, "cv": cv, "max_samples": max_samples}
    t0 = time.monotonic()
    bar = None
    if progress:
        bar = tqdm(total=N_ACTIONS, desc=f"tune ({backend})", unit="action")
    backend_ctx = _ray_backend(ray_address) if backend == "ray" else contextlib.nullcontext()
    with backend_ctx, warnings.catch_warnings():
        # Small max_iter values in the grid do not converge by design; that is what CV judges.
        warnings.simplefilter("ignore", ConvergenceWarning)
        for a in range(N_ACTIONS):
            mask = A == a
            n = int(mask.sum())
            if n < 2 * cv:
                raise ValueError(f"action {a} has {n} transitions; need at least {2 * cv} for {cv}-fold CV "
                                 "(collect more episodes)")
            X, y = X_all[mask], y_all[mask]
            if max_samples is not None and n > max_samples:
                keep = np.sort(np.random.default_rng(seed + 7919 * (a + 1)).choice(n, size=max_samples, replace=False))
                X, y = X[keep], y[keep]
            X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=test_size, random_state=seed + a)
            pipe = make_pipeline({}, random_state=seed + a)
            search = GridSearchCV(pipe, grid, cv=KFold(cv, shuffle=True, random_state=seed + a),
                                  scoring="neg_mean_squared_error", n_jobs=n_jobs, error_score=np.nan,
                                  refit=True)
            search.fit(X_tr, y_tr)
            best = {k.split("__", 1)[1]: v for k, v in search.best_params_.items()}
            out["model_params"].append(best)
            out["cv_score"].append(float(search.best_score_))
            out["test_r2"].append(float(search.best_estimator_.score(X_te, y_te)))
            out["n_samples"].append(n)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    out["wall_s"] = time.monotonic() - t0
    return out
