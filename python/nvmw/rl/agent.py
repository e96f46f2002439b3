"""Q-learning agent with one polynomial-regression Q model per action (thesis Algorithm 2).

Each action a has a Q model M_a = StandardScaler -> PolynomialFeatures -> SGDRegressor,
bootstrapped offline on collected transitions (`pretrain`) and then refined online with
`partial_fit` (`update`). Exploration is epsilon-greedy, epsilon decaying once per episode.
Choices where the thesis is ambiguous are parameters; docs/rl.md explains the defaults."""
from __future__ import annotations

import copy
import os
import warnings
from typing import Any, Callable, Mapping, Sequence

import joblib
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler
from tqdm.auto import tqdm

from nvmw import _core, jsonfiles
from nvmw.control.loop import drive
from nvmw.rl.policy import GreedyPolicy, check_layout, save_beside
from nvmw.rl.simrun import check_count

#: Thesis Table 3.3 actions and Table 3.2 state features, as the core defines them.
N_ACTIONS = int(_core.N_ACTIONS)
N_FEATURES = len(_core.STATE_NAMES)
#: The most fitted-Q refits of a bootstrap (`QLearningAgent.pretrain`, `nvmw train
#: --fqi-iterations`; the thesis makes none). A refit fits the nine models again on all the
#: transitions, about 25 ms per 1,000 of them: at the bound over an hour for the 180,000 of
#: the thesis's collection (150 episodes of 200 steps in six phases).
FQI_ITERATIONS_MAX = 1_000
REWARD_TRANSFORMS = ("none", "symlog")

# Table D.2's common choice: degree 2, invscaling, squared loss, elasticnet, alpha 0.01.
DEFAULT_MODEL_PARAMS: dict[str, Any] = {
    "degree": 2,
    "loss": "squared_error",
    "penalty": "elasticnet",
    "alpha": 0.01,
    "learning_rate": "invscaling",
    "max_iter": 1000,
    "eta0": 0.01,
}

_SGD_KEYS = {"loss", "penalty", "alpha", "l1_ratio", "learning_rate", "max_iter", "eta0",
             "power_t", "epsilon", "tol", "fit_intercept"}


def make_pipeline(params: Mapping[str, Any] | None = None, random_state: int | None = None) -> Pipeline:
    """One Q model: StandardScaler -> PolynomialFeatures(degree) -> SGDRegressor(**rest).

    `params` uses the flat Table D.1 names (degree, loss, penalty, alpha, learning_rate,
    max_iter, plus any other SGDRegressor argument such as eta0)."""
    p = dict(DEFAULT_MODEL_PARAMS)
    p.update(params or {})
    degree = int(p.pop("degree"))
    if p.get("loss") == "squared_loss":  # the thesis's (old scikit-learn) spelling
        p["loss"] = "squared_error"
    unknown = set(p) - _SGD_KEYS
    if unknown:
        raise ValueError(f"unknown Q-model parameters: {sorted(unknown)}")
    return Pipeline([
        ("scaler", StandardScaler()),
        ("poly", PolynomialFeatures(degree=degree, include_bias=False)),
        ("sgd", SGDRegressor(random_state=random_state, **p)),
    ])


def transform_features(X: np.ndarray, how: str) -> np.ndarray:
    """Pre-scaler feature transform. 'log1p' tames the heavy-tailed queue lengths and block
    sizes (30 B .. 800 KB) so one outlier window cannot blow up the polynomial features."""
    X = np.asarray(X, dtype=np.float64)
    if how == "log1p":
        return np.log1p(np.maximum(X, 0.0))
    if how == "none":
        return X
    raise ValueError(f"feature_transform must be 'log1p' or 'none', got {how!r}")


def learning_reward(r: np.ndarray, scale: float = 1.0, transform: str = "none") -> np.ndarray:
    """What the Q models learn from: the reward divided by `scale`, then 'none' (as is) or
    'symlog' (sign(r) log(1 + |r|)); see QLearningAgent's reward_transform."""
    r = np.asarray(r, dtype=np.float64) / scale
    if transform == "symlog":
        return np.sign(r) * np.log1p(np.abs(r))
    if transform == "none":
        return r
    raise ValueError(f"reward_transform must be one of {REWARD_TRANSFORMS}, got {transform!r}")


def _action_indices(actions: Any, n_actions: int) -> np.ndarray:
    """Actions as int64 indices; ValueError unless each is a whole number in [0, n_actions)
    (a cast to int64 used to turn 1.5 into action 1)."""
    a = np.asarray(actions).ravel()
    if a.dtype.kind not in "iuf" or (a.dtype.kind == "f" and not np.all(np.isfinite(a) & (a == np.floor(a)))):
        raise ValueError(f"actions must be integers in [0, {n_actions}), got dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() >= n_actions):
        raise ValueError(f"actions must be in [0, {n_actions})")
    return a.astype(np.int64)


#: Step budget of one training episode: the env's own truncation ends it first.
_UNTIL_EPISODE_ENDS = 1 << 62


class _Exploring:
    """The agent as a controller of the control loop: epsilon-greedy actions."""

    def __init__(self, agent: "QLearningAgent"):
        self.agent = agent

    def act(self, obs, info) -> int:
        return self.agent.act(obs)


def _median(xs: list[float]) -> float:
    a = np.asarray(xs, dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(np.median(a)) if a.size else float("nan")


class QLearningAgent:
    """Thesis Algorithm 2 with per-action SGD polynomial regressors.

    Parameters
    ----------
    gamma : discount factor (Table D.3: 0.95).
    learning_rate : Table D.3's 0.7. With ``learning_rate_mode='q_step'`` (default) it is the
        Q-learning step alpha: target = Q(s,a) + alpha * (r + gamma max Q(s',.) - Q(s,a)).
        With ``'sgd_eta0'`` the target is Algorithm 2 line 23 verbatim (r + gamma max Q) and
        0.7 becomes the SGD initial step ``eta0`` of every model.
    epsilon : initial exploration rate (Table D.3: 0.9; the text says 1).
    epsilon_decay : per-episode decay (Table D.3: 0.1). ``epsilon_decay_mode='multiplicative'``
        (default): epsilon <- epsilon * (1 - decay); ``'linear'``: epsilon <- epsilon - decay.
    epsilon_min : floor for epsilon.
    model_params : dict of Table D.1 parameters shared by all actions, or a list of nine
        dicts (one per action, e.g. from ``nvmw tune``).
    scaler_mode : 'fixed' (default): the scalers are fitted on the pretraining data and then
        frozen, so online updates do not move the feature basis under the learned weights;
        'partial_fit': scalers keep adapting with every update.
    feature_transform : 'log1p' (default) or 'none', applied before the scaler.
    reward_scale : rewards are divided by this before learning (ranking of actions is
        unchanged; keeps SGD targets in a sane range for huber/epsilon losses).
    reward_transform : 'none' or 'symlog': the models learn from sign(r) log(1 + |r|) instead
        of r. Algorithm 1's rewards span five orders of magnitude (+40 for a window that
        meets both goals, -60,000 for one far off them), so a squared-error fit of raw
        rewards spends itself on the worst windows and ranks the actions of ordinary
        states by noise; symlog keeps every window's sign and order. Default 'none' (the
        thesis); the shipped agents say which they used.
    bootstrap_on_truncation : a time-limit truncation is not a terminal state, so the target
        keeps the gamma max Q term (Algorithm 2 treats 'done' as terminal; set False for that).
    random_state : seed for exploration and the SGD models.
    """

    #: For agents saved before the parameter existed.
    reward_transform = "none"

    def __init__(self, n_actions: int = N_ACTIONS, gamma: float = 0.95, learning_rate: float = 0.7,
                 learning_rate_mode: str = "q_step", epsilon: float = 0.9, epsilon_decay: float = 0.1,
                 epsilon_decay_mode: str = "multiplicative", epsilon_min: float = 0.0,
                 model_params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
                 scaler_mode: str = "fixed", feature_transform: str = "log1p",
                 reward_scale: float = 1.0, reward_transform: str = "none",
                 bootstrap_on_truncation: bool = True, random_state: int | None = None):
        self.n_actions = n_actions
        self.gamma = gamma
        self.learning_rate = learning_rate
        self.learning_rate_mode = learning_rate_mode
        self.epsilon = epsilon
        self.epsilon_decay = epsilon_decay
        self.epsilon_decay_mode = epsilon_decay_mode
        self.epsilon_min = epsilon_min
        self.model_params = model_params
        self.scaler_mode = scaler_mode
        self.feature_transform = feature_transform
        self.reward_scale = reward_scale
        self.reward_transform = reward_transform
        self.bootstrap_on_truncation = bootstrap_on_truncation
        self.random_state = random_state

    # --- setup ----------------------------------------------------------------------
    def _check_params(self) -> None:
        if self.learning_rate_mode not in ("q_step", "sgd_eta0"):
            raise ValueError("learning_rate_mode must be 'q_step' or 'sgd_eta0'")
        if self.epsilon_decay_mode not in ("multiplicative", "linear"):
            raise ValueError("epsilon_decay_mode must be 'multiplicative' or 'linear'")
        if self.scaler_mode not in ("fixed", "partial_fit"):
            raise ValueError("scaler_mode must be 'fixed' or 'partial_fit'")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError("gamma must be in [0, 1]")
        if not 0.0 < self.learning_rate <= 1.0 and self.learning_rate_mode == "q_step":
            raise ValueError("learning_rate (Q step) must be in (0, 1]")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError("epsilon must be in [0, 1]")
        if self.reward_scale <= 0:
            raise ValueError("reward_scale must be positive")
        if self.n_actions < 1:
            raise ValueError("n_actions must be >= 1")
        if self.reward_transform not in REWARD_TRANSFORMS:
            raise ValueError(f"reward_transform must be one of {REWARD_TRANSFORMS}, got {self.reward_transform!r}")

    def _action_params(self, a: int) -> dict[str, Any]:
        mp = self.model_params
        if mp is None:
            p: dict[str, Any] = {}
        elif isinstance(mp, Mapping):
            p = dict(mp)
        else:
            if len(mp) != self.n_actions:
                raise ValueError(f"model_params needs {self.n_actions} dicts, got {len(mp)}")
            p = dict(mp[a])
        if self.learning_rate_mode == "sgd_eta0":
            p["eta0"] = self.learning_rate
        return p

    def _setup(self) -> None:
        self._check_params()
        self.rng_ = np.random.default_rng(self.random_state)
        seeds = self.rng_.integers(0, 2**31 - 1, size=self.n_actions)
        self.models_ = [make_pipeline(self._action_params(a), int(seeds[a])) for a in range(self.n_actions)]
        self.epsilon_ = float(self.epsilon)
        self.n_episodes_ = 0
        self.n_updates_ = 0

    def _learning_reward(self, r: np.ndarray) -> np.ndarray:
        return learning_reward(r, self.reward_scale, self.reward_transform)

    def pretrain(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                 next_states: np.ndarray | None = None, dones: np.ndarray | None = None,
                 fqi_iterations: int = 0) -> "QLearningAgent":
        """Bootstrap the nine Q models from offline transitions (random-agent data).

        Every scaler is fitted on all states; each action's regressor on that action's
        transitions with target = reward (the thesis's bootstrap). ``fqi_iterations`` > 0
        then refits with fitted-Q targets r + gamma max Q(s') that many times (needs
        next_states), at most FQI_ITERATIONS_MAX. An action with no samples is fitted on all
        transitions."""
        fqi_iterations = check_count(fqi_iterations, "fqi_iterations", FQI_ITERATIONS_MAX, lo=0)
        X = np.asarray(states, dtype=np.float64)
        A = _action_indices(actions, self.n_actions)
        R = np.asarray(rewards, dtype=np.float64).ravel()
        if X.ndim != 2 or X.shape[0] == 0:
            raise ValueError(f"states must be a non-empty 2-D array, got shape {X.shape}")
        if not (len(A) == len(R) == len(X)):
            raise ValueError("states, actions and rewards must have the same length")
        if not np.all(np.isfinite(X)) or not np.all(np.isfinite(R)):
            raise ValueError("states and rewards must be finite")
        if fqi_iterations > 0:
            # Checked before the models are replaced: next states of another shape used to
            # fail on broadcasting, NaN ones in a later action's fit.
            if next_states is None:
                raise ValueError("fqi_iterations > 0 needs next_states")
            Xn = np.asarray(next_states, dtype=np.float64)
            D = np.zeros(len(X), bool) if dones is None else np.asarray(dones, bool).ravel()
            if Xn.shape != X.shape or len(D) != len(X):
                raise ValueError(f"next_states (shape {Xn.shape}) and dones must match states (shape {X.shape})")
            if not np.all(np.isfinite(Xn)):
                raise ValueError("next_states must be finite")
        self._setup()
        R = self._learning_reward(R)
        self.n_features_in_ = X.shape[1]
        F = transform_features(X, self.feature_transform)
        for m in self.models_:
            m.named_steps["scaler"].fit(F)
            m.named_steps["poly"].fit(m.named_steps["scaler"].transform(F))
        targets = R.copy()
        self.pretrain_converged_ = [False] * self.n_actions
        rounds = 1 + max(0, int(fqi_iterations))
        for it in range(rounds):
            if it > 0:
                qn = self._predict_all(Xn).max(axis=1)
                targets = R + self.gamma * np.where(D, 0.0, qn)
            for a, m in enumerate(self.models_):
                mask = A == a
                if not mask.any():
                    mask = np.ones(len(A), bool)
                Z = m.named_steps["poly"].transform(m.named_steps["scaler"].transform(F[mask]))
                with warnings.catch_warnings():
                    # Table D.2 picks small max_iter on purpose; record instead of warning.
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    m.named_steps["sgd"].fit(Z, targets[mask])
                sgd = m.named_steps["sgd"]
                self.pretrain_converged_[a] = bool(sgd.n_iter_ < sgd.max_iter)
        return self

    def initialize(self, states: np.ndarray) -> "QLearningAgent":
        """Start without pretraining: fit the scalers on sample states, Q models at zero."""
        X = np.asarray(states, dtype=np.float64)
        return self.pretrain(X, np.arange(len(X)) % self.n_actions, np.zeros(len(X)))

    # --- acting ---------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "models_"):
            raise RuntimeError("QLearningAgent is not fitted: call pretrain() or initialize() first")

    def _predict_all(self, X: np.ndarray) -> np.ndarray:
        F = transform_features(np.atleast_2d(X), self.feature_transform)
        if self.scaler_mode == "partial_fit":
            return np.column_stack([m.predict(F) for m in self.models_])
        # Fixed scalers are identical across actions (fitted on the same states), so the
        # polynomial features are computed once per degree and each model is one dot
        # product: ~50x cheaper than nine Pipeline.predict calls, which matters at 10 Hz.
        # The monomials are products of powers (PolynomialFeatures.powers_), computed here
        # directly: sklearn's transform costs ~0.5 ms per call whatever the batch size,
        # which dominated acting one window at a time (values agree to ~1e-15).
        cache: dict[int, np.ndarray] = {}
        cols = []
        for m in self.models_:
            poly = m.named_steps["poly"]
            if poly.degree not in cache:
                sc = m.named_steps["scaler"]
                Z = (F - sc.mean_) / sc.scale_
                cache[poly.degree] = np.prod(Z[:, None, :] ** poly.powers_[None, :, :], axis=2)
            sgd = m.named_steps["sgd"]
            cols.append(cache[poly.degree] @ sgd.coef_ + sgd.intercept_[0])
        return np.column_stack(cols)

    def _state(self, obs: np.ndarray, what: str = "obs") -> np.ndarray:
        """One state as a (1, n_features) row; ValueError unless obs holds n_features values
        (a scalar or a state of another length used to broadcast against the scalers)."""
        x = np.asarray(obs, dtype=np.float64)
        n = getattr(self, "n_features_in_", None)
        if x.ndim > 2 or (x.ndim == 2 and x.shape[0] != 1) or (n is not None and x.size != n) or x.size == 0:
            raise ValueError(f"{what} must be one state of {n} features, got shape {x.shape}")
        return x.reshape(1, -1)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Predicted Q for every action in state obs (Algorithm 2 lines 12-14)."""
        self._check_fitted()
        return self._predict_all(self._state(obs))[0]

    def greedy_action(self, obs: np.ndarray) -> int:
        q = self.q_values(obs)
        return int(np.argmax(q))

    def act(self, obs: np.ndarray, explore: bool = True) -> int:
        """Epsilon-greedy action (lines 6-16); explore=False is purely greedy."""
        self._check_fitted()
        self._state(obs)
        if explore and self.rng_.random() < self.epsilon_:
            return int(self.rng_.integers(self.n_actions))
        return self.greedy_action(obs)

    # --- learning -------------------------------------------------------------------
    def update(self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray,
               terminated: bool, truncated: bool = False) -> float:
        """One Q-learning update of M_action (lines 19-28). Returns the target used."""
        self._check_fitted()
        # -1 used to update the last action's model (a negative index), 1.5 fail on indexing.
        if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)) \
                or not 0 <= action < self.n_actions:
            raise ValueError(f"action must be an int in [0, {self.n_actions}), got {action!r}")
        obs, next_obs = self._state(obs), self._state(next_obs, "next_obs")
        r = float(self._learning_reward(np.array([float(reward)]))[0])
        done = terminated or (truncated and not self.bootstrap_on_truncation)
        target = r if done else r + self.gamma * float(np.max(self.q_values(next_obs)))
        if self.learning_rate_mode == "q_step":
            q_sa = float(self.q_values(obs)[action])
            target = q_sa + self.learning_rate * (target - q_sa)
        m = self.models_[int(action)]
        F = transform_features(obs, self.feature_transform)
        if not (np.all(np.isfinite(F)) and np.isfinite(target)):
            raise ValueError("update: obs, next_obs and reward must be finite")
        if self.scaler_mode == "partial_fit":
            m.named_steps["scaler"].partial_fit(F)
        Z = m.named_steps["poly"].transform(m.named_steps["scaler"].transform(F))
        m.named_steps["sgd"].partial_fit(Z, [target])
        self.n_updates_ += 1
        return target

    def update_batch(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
                     terminated: np.ndarray, truncated: np.ndarray | None = None, *,
                     learning_rate: float | None = None) -> np.ndarray:
        """Q-learning updates for a batch of transitions at once (an episode, or a replay
        sample): every target is computed with the models as they are before the batch
        (lines 19-24, like a target network refreshed once per batch), then each action's
        model takes one `partial_fit` over its rows in order. ~50x cheaper than `update`
        per transition, whose cost is sklearn's per-call overhead, not arithmetic.
        `learning_rate` overrides the Q step for this batch (online learning bounds it).
        Returns the targets."""
        self._check_fitted()
        X = np.asarray(obs, dtype=np.float64).reshape(-1, self.n_features_in_)
        Xn = np.asarray(next_obs, dtype=np.float64).reshape(-1, self.n_features_in_)
        A = _action_indices(actions, self.n_actions)
        R = self._learning_reward(np.asarray(rewards, dtype=np.float64).ravel())
        term = np.asarray(terminated, bool).ravel()
        trunc = np.zeros_like(term) if truncated is None else np.asarray(truncated, bool).ravel()
        if not (len(X) == len(Xn) == len(A) == len(R) == len(term) == len(trunc)):
            raise ValueError("update_batch: all columns must have the same length")
        if len(A) == 0:
            return np.zeros(0)
        done = term | (trunc & (not self.bootstrap_on_truncation))
        targets = R + np.where(done, 0.0, self.gamma * self._predict_all(Xn).max(axis=1))
        if self.learning_rate_mode == "q_step":
            lr = self.learning_rate if learning_rate is None else float(learning_rate)
            q_sa = self._predict_all(X)[np.arange(len(A)), A]
            targets = q_sa + lr * (targets - q_sa)
        F = transform_features(X, self.feature_transform)
        # Checked before any model moves: a NaN in one action's rows used to fail in its
        # partial_fit after the models of the lower actions had taken theirs.
        if not (np.all(np.isfinite(F)) and np.all(np.isfinite(targets))):
            raise ValueError("update_batch: states, next states and rewards must be finite")
        for a in np.unique(A):
            rows = A == a
            m = self.models_[int(a)]
            if self.scaler_mode == "partial_fit":
                m.named_steps["scaler"].partial_fit(F[rows])
            Z = m.named_steps["poly"].transform(m.named_steps["scaler"].transform(F[rows]))
            m.named_steps["sgd"].partial_fit(Z, targets[rows])
        self.n_updates_ += len(A)
        return targets

    def decayed_epsilon(self, epsilon: float) -> float:
        """The exploration rate one episode after `epsilon` (line 32's schedule)."""
        if self.epsilon_decay_mode == "multiplicative":
            e = epsilon * (1.0 - self.epsilon_decay)
        else:
            e = epsilon - self.epsilon_decay
        return float(max(self.epsilon_min, e))

    def end_episode(self) -> float:
        """Decay epsilon (line 32); returns the new value."""
        self._check_fitted()
        self.epsilon_ = self.decayed_epsilon(self.epsilon_)
        self.n_episodes_ += 1
        return self.epsilon_

    def learn(self, env, episodes: int, *, reset_options: Mapping[str, Any] | None = None,
              seed: int | None = None, progress: bool = False,
              callback: Callable[[int, int, dict], None] | None = None) -> list[dict]:
        """Run Algorithm 2 for `episodes` episodes on a Gymnasium env; returns per-episode
        summaries {episode, steps, reward_sum, reward_median, epsilon, p99_us_median,
        throughput_median}. `callback(episode, step, info)` sees every step."""
        self._check_fitted()
        history = []
        bar = None
        if progress:
            bar = tqdm(total=episodes, desc="q-learning", unit="ep")
        explorer = _Exploring(self)
        for ep in range(episodes):
            ep_seed = None if seed is None else seed + ep
            obs, info = env.reset(seed=ep_seed, options=dict(reset_options or {}) or None)
            rewards: list[float] = []
            p99s: list[float] = []
            tps: list[float] = []

            def learn_from(o, a, r, next_o, term, trunc, step_info, ep=ep):
                self.update(o, a, r, next_o, term, trunc)
                rewards.append(float(r))
                p99s.append(float(step_info.get("p99_us", np.nan)))
                tps.append(float(step_info.get("throughput", np.nan)))
                if callback is not None:
                    callback(ep, len(rewards) - 1, step_info)

            # The episode ends when the env terminates or truncates (max_episode_steps).
            _obs, _info, step, _ended = drive(env, explorer, _UNTIL_EPISODE_ENDS, obs, info, on_step=learn_from)
            eps_used = self.epsilon_
            self.end_episode()
            history.append({
                "episode": self.n_episodes_, "steps": step, "reward_sum": float(np.sum(rewards)),
                "reward_median": float(np.median(rewards)), "epsilon": eps_used,
                "p99_us_median": _median(p99s),
                "throughput_median": _median(tps),
            })
            if bar is not None:
                bar.update(1)
                bar.set_postfix(reward_med=f"{history[-1]['reward_median']:.3g}", eps=f"{self.epsilon_:.3f}")
        if bar is not None:
            bar.close()
        return history

    # --- persistence ----------------------------------------------------------------
    def get_params(self) -> dict[str, Any]:
        return {k: copy.deepcopy(getattr(self, k)) for k in (
            "n_actions", "gamma", "learning_rate", "learning_rate_mode", "epsilon", "epsilon_decay",
            "epsilon_decay_mode", "epsilon_min", "model_params", "scaler_mode", "feature_transform",
            "reward_scale", "reward_transform", "bootstrap_on_truncation", "random_state")}

    def export_policy(self) -> GreedyPolicy:
        """The greedy policy as plain numbers (`nvmw.rl.policy.GreedyPolicy`): per action
        the scaler's mean and scale, the monomial powers, the coefficients and intercept,
        taken as `_predict_all` uses them (with fixed scalers, the scaler of the first model
        of the same degree), so that it acts as `greedy_action` without scikit-learn."""
        self._check_fitted()
        models = []
        first_of_degree: dict[int, Any] = {}
        for m in self.models_:
            poly, sgd = m.named_steps["poly"], m.named_steps["sgd"]
            sc = m.named_steps["scaler"]
            if self.scaler_mode == "fixed":
                sc = first_of_degree.setdefault(poly.degree, sc)
            models.append({"mean": [float(x) for x in sc.mean_], "scale": [float(x) for x in sc.scale_],
                           "powers": [[int(p) for p in row] for row in poly.powers_],
                           "coef": [float(x) for x in np.ravel(sgd.coef_)], "intercept": float(sgd.intercept_[0])})
        return GreedyPolicy(self.feature_transform, models)

    def save(self, path: str | os.PathLike, metadata: Mapping[str, Any] | None = None) -> None:
        """Write the whole agent (parameters, models, RNG state, metadata) to one joblib file,
        and its greedy policy beside it (`export_policy`, NAME.policy.json: what acting
        greedily loads without scikit-learn; see nvmw.rl.policy)."""
        self._check_fitted()
        self.metadata_ = dict(metadata or getattr(self, "metadata_", {}) or {})
        with jsonfiles.replacing(path) as tmp:
            joblib.dump({"format": "nvmw-qagent-1", "agent": self}, tmp, compress=3)
        save_beside(path, self.export_policy())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "QLearningAgent":
        try:
            with jsonfiles.open_input(path, "rb") as fh:
                blob = joblib.load(fh)
        except FileNotFoundError:
            raise FileNotFoundError(f"agent file not found: {path}") from None
        except Exception as e:  # joblib raises assorted errors for foreign files
            raise ValueError(f"{path}: not an nvmw agent file ({type(e).__name__}: {e})") from None
        if not isinstance(blob, dict) or blob.get("format") != "nvmw-qagent-1" or not isinstance(blob.get("agent"), cls):
            raise ValueError(f"{path}: not an nvmw agent file")
        agent = blob["agent"]
        check_layout(agent.n_actions, getattr(agent, "n_features_in_", None), path)
        return agent


def export_policy_file(path: str | os.PathLike) -> str:
    """(Re)write the greedy policy beside an existing agent file without rewriting the agent
    (`QLearningAgent.save` does it for new ones): for agents saved before policy files
    existed, or after the format changed. Returns the policy file's path."""
    return save_beside(path, QLearningAgent.load(path).export_policy())
