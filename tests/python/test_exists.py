"""Middleware.exists: whether a key exists, without copying its value."""

import pytest

import nvmw
from nvmw import errors
from windows import interactive_ops, windows_after


def test_exists_sync_and_async(mw):
    mw.put(b"big", b"b" * 800_000, cls="batch")
    assert mw.exists(b"big") is True
    assert mw.exists("big", cls="batch") is True
    assert mw.exists(b"nope") is False
    assert mw.submit("exists", "big").result(timeout=10) is True
    assert mw.submit("exists", "nope").result(timeout=10) is False
    mw.remove(b"big")
    assert mw.exists(b"big") is False
    with pytest.raises(errors.InvalidArgumentError):
        mw.exists(b"big", cls="bulk")
    with pytest.raises(errors.InvalidArgumentError):
        mw.submit("contains", "big")


def test_exists_counts_as_a_read_of_no_bytes(mw):
    # The value goes in through the engine, so the windows below see only the EXISTS calls.
    mw.engine.put(b"big", b"b" * 800_000)

    def exists_calls() -> None:
        for key in (b"big", b"nope", b"big", b"big"):
            mw.exists(key, cls="interactive")

    windows = windows_after(mw, exists_calls, lambda ws: interactive_ops(ws) >= 4)
    assert interactive_ops(windows) == 4
    for w in windows:
        inter = w["interactive"]
        assert inter["bytes_per_s"] * w["duration_s"] == 0.0  # no bytes moved
        assert inter["write_ratio"] * inter["ops"] == 0.0
        assert inter["errors"] == 0  # NotFound is an answer, not an error
