"""The one check behind every bounded count of the package: an option's value (episodes,
steps, windows, records, clients...) and the library argument that takes the same count."""
from __future__ import annotations

import operator
from typing import Any


def count_in(name: str, value: Any, lo: int, hi: int) -> int:
    """`value` as an int (numpy's integers too); ValueError naming `name` unless it is an
    integer in [lo, hi]. A bool is not one, and neither is a float, even a whole one."""
    try:
        n = operator.index(value)
    except TypeError:
        n = None
    if n is None or isinstance(value, bool) or not lo <= n <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi:,}], got {value!r}")
    return n
