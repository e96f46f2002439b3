"""`nvmw sim run` of a static configuration (--controller none or fixed:I,B) without
building the whole command line: importing every command module costs more than the
200-window episode itself (the controllers, the agent and their libraries). `cli.main`
asks `parse` first; anything it does not recognise (help, old spellings, other
controllers, a malformed value) goes to the full parser, which reports errors as usual."""
from __future__ import annotations

import json
import math
import sys
from typing import Callable, Optional

from nvmw.rl.simrun import run_static, static_config

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
    try:
        phase, windows, seed = int(opts["phase"]), int(opts["windows"]), int(opts["seed"])
        window = float(opts["window"])
    except ValueError:
        return None
    static = static_config(opts["controller"])
    if static is None or phase < 1 or windows < 1 or seed < 0 or not (0 < window <= 3600 and math.isfinite(window)):
        return None

    def run() -> int:
        control, i, b = static
        out = sys.stdout
        run_static(phase, windows=windows, control=control, threads=(i, b), window_s=window,
                   device=opts["device"], params=opts["params"], seed=seed, exact=exact,
                   on_window=lambda row: out.write(json.dumps(row) + "\n"))
        return 0

    return run
