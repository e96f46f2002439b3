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

# NotFoundError is also a KeyError so that `except KeyError` catches it; KeyError's str()
# is the repr of its argument (for a missing dict key), which would print this error's
# sentence in quotes wherever it is shown with str() or print().
NotFoundError.__str__ = BaseException.__str__


class Interrupted(KeyboardInterrupt):
    """Ctrl-C ended a long run that kept what it had measured so far.

    A KeyboardInterrupt (handlers of that still catch it). ``partial`` holds the result so
    far (its shape is the run's own); ``note`` says what was kept and where, for the one
    line the command line prints before exiting with 130."""

    def __init__(self, note: str = "", partial: object = None):
        super().__init__(note)
        self.note = note
        self.partial = partial


__all__ = [
    "Interrupted",
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
