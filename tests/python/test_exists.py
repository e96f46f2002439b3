"""Middleware.exists: whether a key exists, without copying its value."""
import time

import pytest

import nvmw
from nvmw import errors


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
    seq = mw.wait_for_window(0)["seq"]
    for key in (b"big", b"nope", b"big", b"big"):
        mw.exists(key, cls="interactive")
    ops, moved, writes = 0, 0.0, 0.0
    deadline = time.monotonic() + 30
    while ops < 4 and time.monotonic() < deadline:
        w = mw.wait_for_window(seq)
        seq = w["seq"]
        inter = w["interactive"]
        ops += inter["ops"]
        moved += inter["bytes_per_s"] * w["duration_s"]
        writes += inter["write_ratio"] * inter["ops"]
        assert inter["errors"] == 0  # NotFound is an answer, not an error
    assert ops == 4
    assert moved == 0.0
    assert writes == 0.0
