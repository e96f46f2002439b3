"""nvmw: workload-aware, SLA-driven concurrency control in front of a persistent
key-value store (library, service and lab)."""
from __future__ import annotations

import os as _os

# Developer hook: load a privately built _core (scripts/dev-core.sh) instead of the
# installed one. Unset in normal use.
if _os.environ.get("NVMW_DEV_CORE_DIR"):
    __path__.insert(0, _os.environ["NVMW_DEV_CORE_DIR"])  # noqa: F821

import importlib as _importlib  # noqa: E402

from nvmw import _core  # noqa: E402
from nvmw import errors  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Middleware", "open_engine", "errors", "CLASS_STAT_KEYS", "STATE_NAMES", "__version__"]

#: Imported from nvmw.middleware on first use: it pulls in concurrent.futures (with
#: logging), a third of a simulator run's start-up, which `nvmw sim run` does not need.
_LAZY = frozenset({"Middleware", "open_engine", "CLASS_STAT_KEYS", "STATE_NAMES"})


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(_importlib.import_module("nvmw.middleware"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nvmw' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
