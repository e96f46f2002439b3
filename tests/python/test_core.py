"""The Python API of the core: engines, middleware, typed errors, stats, control."""
import os
import threading
import time

import pytest

import nvmw
from nvmw import errors
from windows import interactive_ops, windows_after


def test_put_get_remove_roundtrip(mw):
    assert mw.get(b"missing") is None
    mw.put(b"k1", b"v1", cls="interactive")
    mw.put("k2", b"x" * 200_000, cls="batch")
    assert mw.get(b"k1") == b"v1"
    assert mw.get("k2", cls="batch") == b"x" * 200_000
    assert mw.remove(b"k1") is True
    assert mw.remove(b"k1") is False
    assert mw.get(b"k1") is None


def test_binary_and_empty_values(mw):
    key = bytes(range(256))
    mw.put(key, b"")
    assert mw.get(key) == b""
    mw.put(key, bytes(range(256)) * 3)
    assert mw.get(key) == bytes(range(256)) * 3


def test_submit_returns_futures(mw):
    futs = [mw.submit("put", f"a{i}", f"v{i}".encode(), cls="interactive") for i in range(200)]
    assert [f.result(timeout=10) for f in futs] == [None] * 200
    gets = [mw.submit("get", f"a{i}") for i in range(200)]
    assert [g.result(timeout=10) for g in gets] == [f"v{i}".encode() for i in range(200)]
    assert mw.submit("get", "nope").result(timeout=10) is None
    assert mw.submit("remove", "a0").result(timeout=10) is True
    assert mw.submit("remove", "a0").result(timeout=10) is False


def test_bad_input_raises_typed_errors(mw):
    with pytest.raises(errors.InvalidArgumentError):
        mw.put(b"k", b"v", cls="bulk")
    with pytest.raises(ValueError):  # InvalidArgumentError is also a ValueError
        mw.get(b"k", cls="sometimes")
    with pytest.raises(errors.InvalidArgumentError):
        mw.put(b"", b"v")
    with pytest.raises(errors.InvalidArgumentError):
        mw.perform_action(9)
    with pytest.raises(errors.InvalidArgumentError):
        mw.set_threads(0, 1)
    with pytest.raises(errors.InvalidArgumentError):
        mw.set_threads(1, 33)
    with pytest.raises(errors.InvalidArgumentError):
        mw.submit("scan", b"k")
    with pytest.raises(TypeError):
        mw.put(b"k", 12)


def test_oversized_value_is_rejected_and_nothing_lost(shm_dir):
    with nvmw.Middleware(engine="memory", max_value_bytes=1024) as m:
        m.put(b"k", b"old")
        with pytest.raises(errors.InvalidArgumentError):
            m.put(b"k", b"x" * 2048)
        assert m.get(b"k") == b"old"


def test_actions_and_threads(mw):
    assert mw.threads == (2, 1)
    mw.perform_action(1)  # I+1
    assert mw.threads == (3, 1)
    mw.perform_action(8)  # I-1, B-1 (B clamps at 1)
    assert mw.threads == (2, 1)
    mw.set_threads(5, 7)
    assert mw.threads == (5, 7)
    state = mw.get_state()
    assert len(state) == len(nvmw.STATE_NAMES) == 8
    assert state[0] == 5 and state[1] == 7


def test_window_stats_have_documented_keys_and_count_requests():
    # Every request is counted once, in one of the windows read one after the other.
    with nvmw.Middleware(engine="memory", window_s=0.5) as m:
        def puts() -> None:
            for i in range(300):
                m.put(f"s{i}", b"y" * 100, cls="interactive")

        windows = windows_after(m, puts, lambda ws: interactive_ops(ws) >= 300)
        assert interactive_ops(windows) == 300
        for cls in ("interactive", "batch", "all"):
            assert set(nvmw.CLASS_STAT_KEYS) <= set(windows[-1][cls])


def test_totals_count_every_window_without_reading_any():
    with nvmw.Middleware(engine="memory", window_s=0.02) as m:
        assert m.totals()["all"] == {"windows": 0, "ops": 0, "errors": 0, "rejected": 0, "latency_s": 0.0}
        for i in range(50):
            m.put(f"t{i}", b"v", cls="batch")
            m.get(f"t{i}", cls="interactive")
            if i % 10 == 0:
                time.sleep(0.03)  # the requests spread over several windows
        deadline = time.monotonic() + 60
        while m.totals()["all"]["ops"] < 100 and time.monotonic() < deadline:
            time.sleep(0.02)
        t = m.totals()
    assert (t["interactive"]["ops"], t["batch"]["ops"], t["all"]["ops"]) == (50, 50, 100)
    assert t["all"]["windows"] >= 2 and t["all"]["errors"] == 0 and t["all"]["rejected"] == 0
    assert t["all"]["latency_s"] == pytest.approx(t["interactive"]["latency_s"] + t["batch"]["latency_s"])
    assert t["batch"]["latency_s"] > 0


def test_stats_describe_the_workload(mw):
    stop, writing = threading.Event(), threading.Event()

    def writer():
        while not stop.is_set():
            mw.put(b"w", b"z" * 1000, cls="interactive")
            writing.set()

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert writing.wait(30)
        # A window that opened once the writer was writing (the second after the last
        # closed one); on a loaded machine the writer may have no request in it, so
        # until one that has.
        seq = mw.get_stats()["seq"] + 1
        deadline = time.monotonic() + 30
        while True:
            stats = mw.wait_for_window(seq, timeout_s=5)
            seq = stats["seq"]
            if stats["interactive"]["ops"] > 0 or time.monotonic() > deadline:
                break
    finally:
        stop.set()
        t.join()
    inter = stats["interactive"]
    assert inter["ops"] > 0
    assert inter["write_ratio"] == 1.0
    assert inter["mean_block_bytes"] == 1000
    assert inter["p50_us"] <= inter["p99_us"] <= inter["max_us"] * 1.01
    assert stats["batch"]["ops"] == 0


def test_closed_middleware_raises_shutdown(shm_dir):
    m = nvmw.Middleware(engine="memory")
    m.close()
    m.close()  # idempotent
    with pytest.raises(errors.ShutdownError):
        m.get(b"k")


def test_no_control_mode(shm_dir):
    with nvmw.Middleware(engine="memory", control=False, window_s=0.05) as m:
        m.put(b"a", b"b")
        assert m.get(b"a") == b"b"
        assert m.submit("get", b"a").result(timeout=5) == b"b"


def test_pmem_persists_across_reopen(shm_dir):
    path = os.path.join(shm_dir, "p.pool")
    with nvmw.Middleware(path, pool_size=64 << 20) as m:
        for i in range(100):
            m.put(f"k{i}", f"v{i}" * 10)
    with nvmw.Middleware(path, create_if_missing=False) as m:
        assert [m.get(f"k{i}") for i in range(100)] == [f"v{i}".encode() * 10 for i in range(100)]
        assert m.engine.count() == 100


def test_pmem_bad_paths(shm_dir):
    with pytest.raises(errors.StorageIOError):
        nvmw.Middleware(os.path.join(shm_dir, "no", "such", "dir", "x.pool"))
    with pytest.raises(errors.NotFoundError):
        nvmw.Middleware(os.path.join(shm_dir, "absent.pool"), create_if_missing=False)
    foreign = os.path.join(shm_dir, "foreign.txt")
    with open(foreign, "w") as f:
        f.write("not a pool\n" * 1000)
    with pytest.raises(errors.CorruptionError):
        nvmw.Middleware(foreign)
    with open(foreign) as f:
        assert f.read() == "not a pool\n" * 1000  # untouched
    with pytest.raises(errors.InvalidArgumentError):
        nvmw.Middleware(None, engine="pmem")
    with pytest.raises(errors.InvalidArgumentError):
        nvmw.Middleware(engine="rocks")


def test_batch_nice_is_validated():
    with pytest.raises(errors.InvalidArgumentError):
        nvmw.Middleware(engine="memory", batch_nice=20)
    with nvmw.Middleware(engine="memory", batch_nice=10) as m:
        m.put(b"k", b"v" * 100_000, cls="batch")
        assert m.get(b"k", cls="batch") == b"v" * 100_000


def test_async_errors_arrive_as_typed_exceptions(shm_dir):
    # A pool too small for the values: the worker's NoSpace reaches the Future as NoSpaceError.
    path = os.path.join(shm_dir, "small.pool")
    with nvmw.Middleware(path, pool_size=16 << 20) as m:
        futs = [m.submit("put", f"big{i}", b"x" * (1 << 20), cls="batch") for i in range(32)]
        outcomes = []
        for f in futs:
            try:
                f.result(timeout=30)
                outcomes.append("ok")
            except errors.NoSpaceError:
                outcomes.append("nospace")
        assert "ok" in outcomes and "nospace" in outcomes
        # Nothing acknowledged was lost.
        for i, o in enumerate(outcomes):
            if o == "ok":
                assert m.get(f"big{i}") == b"x" * (1 << 20)
