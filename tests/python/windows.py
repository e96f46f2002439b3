"""Reading a middleware's windows one after the other, shared by the test modules that
count requests in them."""
import time


def windows_after(mw, requests, enough, timeout: float = 60.0) -> list:
    """Runs requests() and returns the windows from the one open when it started, read
    one after the other until enough(windows) holds: every request it made, and no
    other, is in one of them. wait_for_window hands over the last window closed, so a
    reader slower than a window (a loaded machine) misses one; then requests() runs
    again, after a fresh window, until `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        # A window that closed after this call: a request of an earlier try is in it, or
        # in one before it.
        seq = mw.wait_for_window(mw.get_stats()["seq"], timeout_s=5)["seq"]
        requests()
        windows: list = []
        while not enough(windows):
            assert time.monotonic() < deadline, f"not enough after {timeout:.0f} s: {windows}"
            w = mw.wait_for_window(seq, timeout_s=5)
            if w["seq"] != seq + 1:
                break  # a window went by unread
            seq = w["seq"]
            windows.append(w)
        else:
            return windows
        assert time.monotonic() < deadline, f"every reading in {timeout:.0f} s missed a window"


def interactive_ops(windows: list) -> int:
    return sum(w["interactive"]["ops"] for w in windows)
