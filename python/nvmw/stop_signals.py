"""The signals that stop a long-running command cleanly, on the standard library alone:
`nvmw serve` installs them in its first lines, before it imports the core and numpy.

While installed, SIGTERM, SIGINT and SIGHUP set `event` instead of ending the process; one
after the first (a second Ctrl-C during a drain) is ignored, so the drain, the pool's
close and the removal of a temporary pool always finish. A signal ignored at install
stays ignored (SIGHUP under nohup). Main thread only."""
from __future__ import annotations

import signal
import threading

#: The signals that stop a service (SIGHUP too: a closed terminal stops it cleanly, unless
#: it was started ignoring SIGHUP, as under nohup).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopSignals:
    """install(block=True) also blocks the signals: one that comes is held, pending, until
    deliver(). Installed before any other thread starts, every thread inherits the block,
    so none can take a signal that an exec would then lose: a command that executes itself
    again passes the block, and the signals pending, to the new process."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._old: dict = {}
        self._held = False

    def install(self, *, block: bool = False) -> "StopSignals":
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                self._old[sig] = signal.signal(sig, self._handler)
        if block:
            signal.pthread_sigmask(signal.SIG_BLOCK, list(self._old))
            self._held = True
        return self

    def pending(self) -> bool:
        """Whether a stop signal has come (held or handled)."""
        return self.event.is_set() or bool(signal.sigpending() & set(self._old))

    def deliver(self) -> None:
        """Unblocks the signals: those held reach the handler now, later ones at once.
        A signal blocked by this process's parent (a command before it executed itself
        again) is unblocked too."""
        if self._held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, list(self._old))
            self._held = False

    def _handler(self, _signum, _frame) -> None:
        self.event.set()

    def ignore_to_exit(self) -> None:
        """For a process that ends with the command: ignores the signals from now on,
        then unblocks them. A restore() would put back the default actions, and a second
        signal in the moments the process takes to exit after the drain (Python's
        shutdown resets its own handlers to the default action) would end it with -15 or
        130, or a KeyboardInterrupt traceback, where the drain finished with status 0."""
        for sig in self._old:
            signal.signal(sig, signal.SIG_IGN)
        self.deliver()
        self._old.clear()

    def restore(self) -> None:
        """Unblocks, then puts back the handlers found at install."""
        self.deliver()
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old.clear()
