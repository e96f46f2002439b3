"""The greedy policy of a trained Q-learning agent, evaluated without scikit-learn or NumPy.

Acting greedily is a few dozen multiply-adds per window (state -> feature transform ->
scaler -> monomials -> one linear model per action -> argmax), but loading the agent's
joblib file imports scikit-learn, SciPy and NumPy first, which takes several times as
long as a 200-window simulator episode. So `QLearningAgent.save` also writes the numbers
that greedy policy needs to a small JSON file beside the agent (`policy_path`:
``NAME.policy.json`` for ``NAME.joblib``), and `GreedyPolicy` evaluates them in plain
Python. The file records the SHA-256 of the agent file it came from: `load_beside`
returns None when it is missing, unreadable, of another format or written for another
version of the agent file, and callers then load the agent itself. Anything that learns
(training, `q-learning-online`) always uses the agent.

Q values agree with `QLearningAgent.q_values` to rounding (~1e-15 relative; NumPy sums
the dot products in another order), and ties go to the lowest action, as `numpy.argmax`
breaks them."""
from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Any, Mapping, Sequence

from nvmw import _core, jsonfiles

#: The policy file's format; `load_beside` ignores files of any other.
FORMAT = "nvmw-qpolicy-1"
FEATURE_TRANSFORMS = ("log1p", "none")


def check_layout(n_actions: Any, n_features: Any, path: "str | os.PathLike") -> None:
    """ValueError naming `path` unless an agent or policy of `n_actions` actions over
    `n_features` state features fits this controller: the core's Table 3.3 actions and
    Table 3.2 state features. One of another layout would pick among other actions (a
    subset, or indices the middleware refuses) or read the state wrongly."""
    want = (int(_core.N_ACTIONS), len(_core.STATE_NAMES))
    if (n_actions, n_features) != want:
        raise ValueError(f"{os.fspath(path)}: an agent of {n_actions} actions over {n_features} state features; "
                         f"the controller has {want[0]} actions (thesis Table 3.3) over {want[1]} state features "
                         "(Table 3.2): train one for them with `nvmw train`")


def policy_path(agent_path: "str | os.PathLike") -> str:
    """The policy file beside an agent file: NAME.policy.json for NAME.joblib."""
    p = os.fspath(agent_path)
    return (p[:-len(".joblib")] if p.endswith(".joblib") else p) + ".policy.json"


def file_sha256(path: "str | os.PathLike") -> str:
    h = hashlib.sha256()
    with jsonfiles.open_input(path, "rb") as fh:
        h.update(fh.read())
    return h.hexdigest()


def _floats(xs: Any, n: int | None, what: str) -> list:
    if not isinstance(xs, list) or (n is not None and len(xs) != n):
        raise ValueError(f"{what}: expected a list of {n if n is not None else 'some'} numbers")
    out = []
    for x in xs:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ValueError(f"{what}: {x!r} is not a finite number")
        out.append(float(x))
    return out


def _shape(x: Any) -> tuple:
    """The shape of an array, or of nested sequences as NumPy would read them (along their
    first elements); () for a scalar."""
    shape = getattr(x, "shape", None)
    if shape is not None:
        return tuple(shape)
    if isinstance(x, (str, bytes)) or not hasattr(x, "__len__") or not hasattr(x, "__getitem__"):
        return ()
    return (len(x),) + (_shape(x[0]) if len(x) else ())


class GreedyPolicy:
    """argmax_a Q(s, a) with Q(s, a) = intercept_a + sum_k coef_ak prod_j z_j ** powers_akj,
    z = (transform(s) - mean_a) / scale_a; transform is log1p(max(s, 0)) or the identity
    (the agent's `feature_transform`). One dict per action with mean, scale, powers,
    coef and intercept, as `QLearningAgent.export_policy` writes them."""

    def __init__(self, feature_transform: str, models: Sequence[Mapping[str, Any]]):
        if feature_transform not in FEATURE_TRANSFORMS:
            raise ValueError(f"feature_transform must be one of {FEATURE_TRANSFORMS}, got {feature_transform!r}")
        if not models:
            raise ValueError("a policy needs at least one action")
        self.feature_transform = feature_transform
        self.n_features = None
        self._models = []
        for a, m in enumerate(models):
            mean = _floats(m.get("mean"), self.n_features, f"action {a} mean")
            if not mean:
                raise ValueError("a policy needs at least one feature")
            self.n_features = len(mean)
            scale = _floats(m.get("scale"), self.n_features, f"action {a} scale")
            powers = m.get("powers")
            if not isinstance(powers, list) or not all(
                    isinstance(row, list) and len(row) == self.n_features
                    and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in row)
                    for row in powers):
                raise ValueError(f"action {a} powers: expected lists of {self.n_features} ints >= 0")
            coef = _floats(m.get("coef"), len(powers), f"action {a} coef")
            intercept = _floats([m.get("intercept")], 1, f"action {a} intercept")[0]
            # Each monomial as its (feature, power) factors with power > 0, in feature order.
            terms = [tuple((j, p) for j, p in enumerate(row) if p) for row in powers]
            self._models.append((mean, scale, [list(r) for r in powers], terms, coef, intercept))
        self.n_actions = len(self._models)

    # --- evaluation -----------------------------------------------------------------
    def _features(self, obs: Sequence[float]) -> list:
        # One state: n_features values, or a batch of one, (1, n_features), as
        # QLearningAgent takes it; another shape is the agent's ValueError, not a TypeError
        # from float() of a row.
        shape = _shape(obs)
        if shape != (self.n_features,) and shape != (1, self.n_features):
            raise ValueError(f"obs must be one state of {self.n_features} features, got shape {shape}")
        if len(shape) == 2:
            obs = obs[0]
        x = [float(v) for v in obs]
        if self.feature_transform == "log1p":
            # numpy.maximum(x, 0) keeps NaN, as `0.0 if v < 0.0 else v` does.
            return [math.log1p(0.0 if v < 0.0 else v) for v in x]
        return x

    def q_values(self, obs: Sequence[float]) -> list:
        """Q(obs, a) for every action a. `obs` is one state: n_features values, or an array
        of shape (1, n_features), as `QLearningAgent.q_values` takes it; ValueError naming
        the expected shape for any other."""
        f = self._features(obs)
        q = []
        for mean, scale, _powers, terms, coef, intercept in self._models:
            z = [(fj - mj) / sj for fj, mj, sj in zip(f, mean, scale)]
            total = 0.0
            for c, term in zip(coef, terms):
                m = 1.0
                for j, p in term:
                    zj = z[j]
                    for _ in range(p):
                        m *= zj
                total += c * m
            q.append(total + intercept)
        return q

    def greedy_action(self, obs: Sequence[float]) -> int:
        """The action of highest Q; ties (and NaN, as numpy.argmax) go to the lowest."""
        q = self.q_values(obs)
        best = 0
        for a in range(len(q)):
            if q[a] != q[a]:
                return a
            if q[a] > q[best]:
                best = a
        return best

    def act(self, obs: Sequence[float], explore: bool = False) -> int:
        if explore:
            raise ValueError("a GreedyPolicy does not explore: load the agent to explore or learn")
        return self.greedy_action(obs)

    # --- files ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"format": FORMAT, "feature_transform": self.feature_transform, "n_actions": self.n_actions,
                "n_features": self.n_features,
                "models": [{"mean": mean, "scale": scale, "powers": powers, "coef": coef, "intercept": intercept}
                           for mean, scale, powers, _terms, coef, intercept in self._models]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GreedyPolicy":
        if not isinstance(d, Mapping) or d.get("format") != FORMAT:
            raise ValueError(f"not an {FORMAT} policy")
        models = d.get("models")
        if not isinstance(models, list) or not all(isinstance(m, Mapping) for m in models):
            raise ValueError("policy models: expected a list of objects")
        policy = cls(d.get("feature_transform"), models)
        if d.get("n_actions", policy.n_actions) != policy.n_actions or \
                d.get("n_features", policy.n_features) != policy.n_features:
            raise ValueError("policy n_actions / n_features disagree with its models")
        return policy

    def save(self, path: "str | os.PathLike", agent_sha256: str, **extra: Any) -> None:
        """Write the policy as JSON, recording the SHA-256 of the agent file it describes."""
        d = self.to_dict()
        d["agent_sha256"] = str(agent_sha256)
        d.update(extra)
        with jsonfiles.open_output(path, encoding="utf-8") as fh:
            json.dump(d, fh, indent=1)
            fh.write("\n")


def save_beside(agent_path: "str | os.PathLike", policy: GreedyPolicy, **extra: Any) -> str:
    """Write `policy` beside the agent file just saved at `agent_path`; returns its path."""
    out = policy_path(agent_path)
    policy.save(out, file_sha256(agent_path), agent_file=os.path.basename(os.fspath(agent_path)),
                state_names=list(_core.STATE_NAMES), **extra)
    return out


def load_beside(agent_path: "str | os.PathLike") -> "GreedyPolicy | None":
    """The greedy policy saved beside the agent file at `agent_path`, or None when there is
    none, it cannot be read, is of another format, or was written for another version of
    the agent file (its recorded SHA-256 differs): the caller then loads the agent."""
    try:
        with jsonfiles.open_input(policy_path(agent_path), encoding="utf-8") as fh:
            d = json.load(fh)
        if not isinstance(d, dict) or d.get("agent_sha256") != file_sha256(agent_path):
            return None
        return GreedyPolicy.from_dict(d)
    except (OSError, ValueError, TypeError, AttributeError):
        return None


__all__ = ["FORMAT", "GreedyPolicy", "check_layout", "policy_path", "file_sha256", "save_beside", "load_beside"]
