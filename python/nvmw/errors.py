"""Typed exceptions, one per failure kind of the C++ core (nvmw::Status codes).

Every class derives from :class:`NvmwError`; some also derive from the matching
builtin so ordinary handlers work (``except ValueError`` catches
:class:`InvalidArgumentError`, ``except OSError`` catches :class:`StorageIOError`).
"""
from nvmw._core import (  # noqa: F401  (re-exported)
    CorruptionError,
    InvalidArgumentError,
    NoSpaceError,
    NotFoundError,
    NotSupportedError,
    NvmwError,
    OverloadedError,
    ShutdownError,
    StorageIOError,
)

__all__ = [
    "NvmwError",
    "NotFoundError",
    "InvalidArgumentError",
    "StorageIOError",
    "CorruptionError",
    "NoSpaceError",
    "OverloadedError",
    "ShutdownError",
    "NotSupportedError",
]
