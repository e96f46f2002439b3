"""nvmw: workload-aware, SLA-driven concurrency control in front of a persistent
key-value store (library, service and lab)."""
from __future__ import annotations

import os as _os

# Developer hook: load a privately built _core (scripts/dev-core.sh) instead of the
# installed one. Unset in normal use.
if _os.environ.get("NVMW_DEV_CORE_DIR"):
    __path__.insert(0, _os.environ["NVMW_DEV_CORE_DIR"])  # noqa: F821

from nvmw import _core  # noqa: E402
from nvmw import errors  # noqa: E402
from nvmw.middleware import CLASS_STAT_KEYS, STATE_NAMES, Middleware, open_engine  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Middleware", "open_engine", "errors", "CLASS_STAT_KEYS", "STATE_NAMES", "__version__"]
