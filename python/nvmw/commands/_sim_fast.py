"""`nvmw sim run` of a static configuration (--controller none or fixed:I,B), or of the
trained agent acting greedily (--controller q-learning[:FILE]) from the policy file saved
beside it, without building the command line: importing the sim command's module costs
more than the 200-window episode itself (the simulator fit, the environments and their
libraries: SciPy, NumPy, Gymnasium). `cli.main` asks `parse` first; anything it does
not recognise (help, old spellings, other controllers, an agent without a current policy
file, a malformed value) goes to the full parser, which reports errors as usual."""
from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Callable, Optional

from nvmw.lab.runs import shipped_agent_path
from nvmw.rl.policy import check_layout, load_beside
from nvmw.rl.simrun import RUN_WINDOWS_MAX, run_greedy, run_static, static_config
from nvmw.workloads.phases import list_phases

_INT64_MAX = (1 << 63) - 1
_INT_TEXT = re.compile(r"[0-9]+")
_FLOAT_TEXT = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_DEFAULTS = {"phase": "1", "controller": "fixed:15,15", "windows": "10", "window": "0.1",
             "device": "optane-1dimm", "params": None, "seed": "0"}


def parse(words: list) -> Optional[Callable[[], int]]:
    """The run for `nvmw sim run WORDS`, or None when the full parser must handle them."""
    opts = dict(_DEFAULTS)
    exact = False
    k = 0
    while k < len(words):
        word = words[k]
        if word == "--exact":
            exact = True
            k += 1
            continue
        name, eq, value = word.partition("=")
        if not name.startswith("--") or name[2:] not in opts:
            return None
        if not eq:
            if k + 1 >= len(words) or words[k + 1].startswith("-"):
                return None
            value = words[k + 1]
            k += 1
        opts[name[2:]] = value
        k += 1
    # Numbers as the full parser takes them (its errors name them): int() and float() also
    # take "1_000", "+5" and " 5", which it refuses.
    if not all(_INT_TEXT.fullmatch(opts[k]) for k in ("phase", "windows", "seed")) \
            or not _FLOAT_TEXT.fullmatch(opts["window"]):
        return None
    phase, windows, seed = int(opts["phase"]), int(opts["windows"]), int(opts["seed"])
    window = float(opts["window"])
    # The full parser's bounds (its errors name them): a seed past 2^63-1 ran here, reduced
    # to another seed without a word.
    if not (phase in list_phases() and 1 <= windows <= RUN_WINDOWS_MAX and 0 <= seed <= _INT64_MAX
            and 0.001 <= window <= 3600):
        return None
    static = static_config(opts["controller"])
    policy = None if static is not None else _greedy_policy(opts["controller"], opts["device"])
    if static is None and policy is None:
        return None

    def run() -> int:
        out = sys.stdout
        common = dict(windows=windows, window_s=window, device=opts["device"], params=opts["params"], seed=seed,
                      exact=exact, on_window=lambda row: out.write(json.dumps(row) + "\n"))
        if policy is not None:
            # simulate_phase starts a controller without initial threads of its own at 15/15.
            run_greedy(phase, policy, threads=(15, 15), **common)
        else:
            control, i, b = static
            run_static(phase, control=control, threads=(i, b), **common)
        return 0

    return run


def _greedy_policy(controller: str, device: str) -> Any:
    """The greedy policy of "q-learning" (the shipped agent for `device`) or
    "q-learning:FILE", from the policy file beside the agent; None for any other
    controller, a missing agent, an agent without a current policy file or one of another
    layout (the full command line then loads the agent, or reports the error)."""
    kind, _, arg = controller.partition(":")
    if kind != "q-learning":
        return None
    path = arg or shipped_agent_path(device)
    if not os.path.isfile(path):
        return None
    policy = load_beside(path)
    try:
        if policy is not None:
            check_layout(policy.n_actions, policy.n_features, path)
    except ValueError:
        return None
    return policy
