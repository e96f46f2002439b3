"""Bad input to the Python API: wrong types, fractions, NaN, numbers beyond the core's
types and paths with NUL characters end in an exception that names the argument, never
in a crash, a silently truncated number or a different file."""
import copy
import gc
import math
import os
import pickle

import pytest

import nvmw
from nvmw import _core, devices, errors
from nvmw.middleware import open_engine


# ---- Middleware and open_engine ------------------------------------------------------

@pytest.mark.parametrize("option, value, error", [
    ("max_threads", 1.5, errors.InvalidArgumentError),
    ("max_threads", "3", TypeError),
    ("max_threads", True, TypeError),
    ("interactive_threads", True, TypeError),
    ("queue_capacity", 1.5, errors.InvalidArgumentError),
    ("batch_nice", 1.9, errors.InvalidArgumentError),
    ("spin_ns", math.inf, errors.InvalidArgumentError),
    ("interactive_threads", 1.7, errors.InvalidArgumentError),
    ("interactive_threads", math.nan, errors.InvalidArgumentError),
    ("batch_threads", None, TypeError),
    ("window_s", "1", TypeError),
    ("window_s", None, TypeError),
    ("control", None, TypeError),
    ("control", "no", TypeError),
    ("execution", None, TypeError),
    ("execution", b"handoff", TypeError),
])
def test_middleware_options_of_the_wrong_kind_are_named(option, value, error):
    with pytest.raises(error, match=f"^{option} must be"):
        nvmw.Middleware(engine="memory", **{option: value})


def test_middleware_options_accept_integral_floats_and_numpy_like_ints():
    class Index:
        def __index__(self):
            return 3

    with nvmw.Middleware(engine="memory", max_threads=Index(), interactive_threads=2.0,
                         spin_ns=2e4, window_s=1) as mw:
        assert mw.threads == (2, 1)
        assert mw.set_threads(Index(), 1.0) == (3, 1)


def test_resizing_refuses_fractions_and_strings():
    with nvmw.Middleware(engine="memory") as mw:
        with pytest.raises(errors.InvalidArgumentError, match="interactive"):
            mw.set_threads(1.5, 2)
        with pytest.raises(TypeError, match="batch"):
            mw.set_threads(2, "2")
        with pytest.raises(errors.InvalidArgumentError, match="action"):
            mw.perform_action(1.5)
        with pytest.raises(TypeError, match="action"):
            mw.perform_action("3")
        assert mw.threads == (1, 1)


def test_counts_refuse_bools():
    # True is an int to Python: set_threads(True, True) silently meant (1, 1).
    with nvmw.Middleware(engine="memory", max_threads=4) as mw:
        mw.set_threads(3, 3)
        with pytest.raises(TypeError, match="^interactive must be an integer, not bool"):
            mw.set_threads(True, 2)
        with pytest.raises(TypeError, match="^batch must be"):
            mw.set_threads(2, False)
        with pytest.raises(TypeError, match="^action must be"):
            mw.perform_action(True)
        with pytest.raises(TypeError, match="^after_seq must be"):
            mw.wait_for_window(True)
        assert mw.threads == (3, 3)


@pytest.mark.parametrize("call", ["get", "put", "remove", "exists", "submit"])
def test_keys_and_values_of_the_wrong_kind_are_named(call):
    with nvmw.Middleware(engine="memory") as mw:
        run = (lambda k, v=b"v": mw.put(k, v)) if call == "put" else (
            (lambda k, v=b"v": mw.submit("put", k, v)) if call == "submit" else
            (lambda k, v=b"v": getattr(mw, call)(k)))
        with pytest.raises(TypeError, match="^key must be bytes, bytearray, memoryview or str, not int"):
            run(7)
        with pytest.raises(TypeError, match="^key must be .* not NoneType"):
            run(None)
        # A lone surrogate has no UTF-8 form: the error names the key, not the codec.
        with pytest.raises(errors.InvalidArgumentError, match="^key is a str that UTF-8 cannot encode"):
            run("a\ud800")
        if call in ("put", "submit"):
            with pytest.raises(TypeError, match="^value must be .* not NoneType"):
                run(b"k", None)
            with pytest.raises(errors.InvalidArgumentError, match="^value is a str"):
                run(b"k", "\udcff")
        assert mw.get(b"k") is None


def test_buffers_are_stored_as_their_bytes():
    with nvmw.Middleware(engine="memory") as mw:
        strided = memoryview(b"k-e-y")[::2]  # not contiguous
        mw.put(strided, bytearray(b"value"))
        assert mw.get(b"key") == b"value"
        mw.put("k\u00e9", memoryview(b"xyz")[1:])
        assert mw.get("k\u00e9".encode()) == b"yz"
        assert mw.submit("get", bytearray(b"key")).result(timeout=60) == b"value"


def test_engine_takes_keys_and_values_as_the_middleware_does():
    # The engine took bytes only: a str or a bytearray was a TypeError listing the
    # binding's signature.
    engine = open_engine("memory")
    engine.put(bytearray(b"k1"), memoryview(b"a-b-c")[::2])
    assert engine.get("k1") == b"abc"
    assert engine.exists(memoryview(b"k1")) and engine.remove("k1")
    with pytest.raises(TypeError, match="^key must be bytes, bytearray, memoryview or str, not int"):
        engine.get(1)
    with pytest.raises(TypeError, match="^value must be .* not NoneType"):
        engine.put(b"k", None)
    with pytest.raises(errors.InvalidArgumentError, match="^key is a str that UTF-8 cannot encode"):
        engine.exists("\ud800")
    assert engine.count() == 0


def test_submit_refuses_an_op_that_is_not_a_name():
    with nvmw.Middleware(engine="memory") as mw:
        for op in (["get"], None, 0):
            with pytest.raises(errors.InvalidArgumentError, match="^unknown op"):
                mw.submit(op, b"k")


def test_a_middleware_cannot_be_copied_or_pickled():
    # A shallow copy shared the running core: collecting the copy closed the original.
    with nvmw.Middleware(engine="memory") as mw:
        for copy_it in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="^a Middleware cannot be"):
                copy_it(mw)
            gc.collect()
        mw.put(b"k", b"v")
        assert mw.get(b"k") == b"v"


def test_a_closed_middleware_cannot_be_entered_again():
    mw = nvmw.Middleware(engine="memory")
    with mw:
        with mw:  # re-entry: the inner block closes it
            mw.put(b"k", b"v")
        with pytest.raises(errors.ShutdownError):
            mw.get(b"k")
    with pytest.raises(errors.ShutdownError):
        with mw:
            pass
    mw.close()


def test_wait_for_window_arguments_are_named():
    with nvmw.Middleware(engine="memory", window_s=0.05) as mw:
        with pytest.raises(errors.InvalidArgumentError, match="after_seq"):
            mw.wait_for_window(-1)
        with pytest.raises(TypeError, match="after_seq"):
            mw.wait_for_window(None)
        with pytest.raises(TypeError, match="timeout_s"):
            mw.wait_for_window(0, None)
        assert mw.wait_for_window(0, 30)["seq"] >= 1


def test_queue_length_needs_a_real_class():
    with nvmw.Middleware(engine="memory") as mw:
        assert mw.queue_length("interactive") == 0
        for cls in ("auto", None):
            with pytest.raises(errors.InvalidArgumentError, match="queue_length"):
                mw.queue_length(cls)


@pytest.mark.parametrize("option, value", [
    ("execution", "bogus"), ("batch_nice", 20), ("max_threads", 0), ("window_s", 1e6),
    ("device", "no-such-device"),
])
def test_a_refused_middleware_leaves_its_pool_closed(shm_dir, option, value):
    path = os.path.join(shm_dir, "t.pool")
    with pytest.raises((errors.InvalidArgumentError, errors.NotFoundError)) as refused:
        nvmw.Middleware(path, pool_size=64 << 20, **{option: value})
    # While the error is kept (an interactive session keeps the last one), its traceback
    # holds the half-made object: the pool it opened was still open, and this open failed
    # with "pool is open in another process or engine".
    with nvmw.Middleware(path, pool_size=64 << 20) as mw:
        mw.put(b"k", b"v")
    assert refused.value is not None


def test_a_path_is_refused_where_the_engine_does_not_use_it(shm_dir):
    # The memory engine, or an engine given open, ignored it: the pool file named as the
    # store received none of the writes.
    path = os.path.join(shm_dir, "t.pool")
    with pytest.raises(errors.InvalidArgumentError, match="^path is the pool file of engine='pmem'"):
        nvmw.Middleware(path, engine="memory")
    with pytest.raises(errors.InvalidArgumentError, match="an open engine does not use it"):
        nvmw.Middleware(path, engine=open_engine("memory"))
    with pytest.raises(errors.InvalidArgumentError, match="engine='memory'"):
        open_engine("memory", path)
    assert os.listdir(shm_dir) == []


def test_open_engine_file_mode_and_flags(shm_dir):
    path = os.path.join(shm_dir, "m.pool")
    # "644" would have been read as decimal 644 (0o1204, sticky bit) before.
    with pytest.raises(TypeError, match="file_mode"):
        open_engine("pmem", path, pool_size=8 << 20, file_mode="644")
    with pytest.raises(errors.InvalidArgumentError, match="file_mode"):
        open_engine("pmem", path, pool_size=8 << 20, file_mode=1.5)
    with pytest.raises(TypeError, match="create_if_missing"):
        open_engine("pmem", path, pool_size=8 << 20, create_if_missing=None)
    assert not os.path.exists(path)
    engine = open_engine("pmem", os.fsencode(path), pool_size=8 << 20)  # a bytes path
    engine.put(b"k", b"v")
    assert os.path.exists(path)


# ---- paths ----------------------------------------------------------------------------

def test_paths_with_a_nul_character_are_refused(shm_dir):
    # The operating system sees only the part before the NUL: another file.
    bad = os.path.join(shm_dir, "a\x00b")
    with pytest.raises(errors.InvalidArgumentError, match="NUL"):
        open_engine("pmem", bad, pool_size=8 << 20)
    with pytest.raises(errors.InvalidArgumentError, match="NUL"):
        _core.read_trace(bad, "native")
    with pytest.raises(errors.InvalidArgumentError, match="NUL"):
        _core.synth_azure({"rows": 3}).write(bad)
    with pytest.raises(errors.InvalidArgumentError, match="NUL"):
        _core.check_pmem_pool(bad)
    with pytest.raises(errors.InvalidArgumentError, match="NUL"):
        devices.load_profile(os.path.join(shm_dir, "p.toml\x00x"))
    assert os.listdir(shm_dir) == []


def test_a_pool_path_that_is_not_utf8(shm_dir):
    # A file name is bytes: one that is not UTF-8, given as bytes or as the str that
    # os.fsdecode makes of it, failed with the binding's signature TypeError.
    raw = os.path.join(os.fsencode(shm_dir), b"p\xff.pool")
    with nvmw.Middleware(raw, pool_size=8 << 20) as mw:
        mw.put(b"k", b"v")
    with nvmw.Middleware(os.fsdecode(raw), pool_size=8 << 20) as mw:
        assert mw.get(b"k") == b"v"
    # `nvmw check` of such a pool ended in that TypeError's traceback.
    report = _core.check_pmem_pool(os.fsdecode(raw), scratch_dir=os.fsdecode(shm_dir))
    assert report["clean"] and report["entries_ok"] == 1
    assert os.listdir(os.fsencode(shm_dir)) == [b"p\xff.pool"]
    with pytest.raises(TypeError, match="^path must be str, bytes or os.PathLike, not int"):
        _core.open_pmem_engine(7)
    with pytest.raises(TypeError, match="^salvage_to must be str, bytes or os.PathLike"):
        _core.check_pmem_pool(raw, salvage_to=None)


# ---- device model ---------------------------------------------------------------------

def test_device_curve_call_checks_its_points_and_argument():
    # Each of these read outside the curve's vectors (a crash for x without y).
    with pytest.raises(errors.InvalidArgumentError, match="1 x values but 0 y values"):
        _core.DeviceCurve([1.0], [])(0.5)
    with pytest.raises(errors.InvalidArgumentError, match="3 x values but 1 y values"):
        _core.DeviceCurve([1.0, 2.0, 3.0], [5.0])(2.5)
    curve = _core.DeviceCurve([1.0, 2.0], [1.0, 3.0])
    with pytest.raises(errors.InvalidArgumentError, match="NaN"):
        curve(math.nan)
    curve.y = [1.0]
    with pytest.raises(errors.InvalidArgumentError, match="2 x values but 1 y values"):
        curve(1.5)
    assert _core.DeviceCurve([1.0, 2.0], [1.0, 3.0])(1.5) == 2.0
    assert _core.DeviceCurve()(7.0) == 1.0


def test_mixed_accessor_counts_beyond_32_bits_are_refused():
    model = devices.model("optane-1dimm")
    # 2^32 readers wrapped around to 0 before: the answer for one writer alone.
    for call in (lambda: model.rate_per_accessor("read", 2**32, 1),
                 lambda: model.mixed_service_time_ns("read", 4096, 2**32 + 2, 0)):
        with pytest.raises(errors.InvalidArgumentError, match="readers and writers"):
            call()
    assert model.mixed_service_time_ns("read", 4096, 3, 0) == model.service_time_ns("read", 4096, 3)


# ---- option dicts -----------------------------------------------------------------------

def _ycsb(mw, **options):
    return _core.YcsbGenerator(mw.core, {"record_count": 10, "operation_count": 10, "threads": 1, **options})


@pytest.mark.parametrize("make, message", [
    (lambda mw: _ycsb(mw, record_count="10"), "ycsb: record_count must be an integer, not str"),
    (lambda mw: _ycsb(mw, duration_s="1"), "ycsb: duration_s must be a number, not str"),
    (lambda mw: _ycsb(mw, distribution=3), "ycsb: distribution must be a str, not int"),
    (lambda mw: _core.YcsbGenerator(mw.core, {1: 2}), "ycsb: option names must be str"),
    (lambda mw: _core.synth_azure({"rows": "5"}), "azure synth: rows must be an integer"),
    (lambda mw: _core.synth_azure({"rows": 3}).filter({"rebase": "yes"}), "trace filter: rebase"),
    (lambda mw: _core.Replay(_core.synth_azure({"rows": 3}), {"cls": 1}), "replay: cls must be a str"),
    (lambda mw: _core.Simulator({"cores": "2"}), "sim param cores must be a number"),
    (lambda mw: _core.Simulator({}).set_workload({"times_us": "abc"}, {}), "workload times_us"),
    (lambda mw: _core.read_trace("t.csv", start_unix_ms="x"), "read_trace: start_unix_ms"),
])
def test_option_dicts_name_a_value_of_the_wrong_type(make, message):
    # These raised RuntimeError("std::bad_cast") before, naming nothing.
    with nvmw.Middleware(engine="memory") as mw:
        with pytest.raises(TypeError, match=message):
            make(mw)


def test_integer_options_are_exact_to_64_bits():
    # Read through a double before: 2^53 + 1 became 2^53 (the same trace as seed 2^53),
    # and seeds above 9e18 were refused.
    a = _core.synth_azure({"rows": 50, "seed": 2**53}).records()
    b = _core.synth_azure({"rows": 50, "seed": 2**53 + 1}).records()
    assert a != b
    assert len(_core.synth_azure({"rows": 5, "seed": 2**64 - 1})) == 5
    with pytest.raises(errors.InvalidArgumentError, match="seed must be an integer in"):
        _core.synth_azure({"rows": 5, "seed": 2**64})
    with pytest.raises(errors.InvalidArgumentError, match="rows must be an integer in"):
        _core.synth_azure({"rows": 2.5})
    # 2^64 - 1 bytes wrapped around to -1 ("keep the sizes") before.
    with pytest.raises(errors.InvalidArgumentError, match="fixed_bytes"):
        _core.synth_azure({"rows": 3}).transform({"fixed_bytes": 2**64 - 1})


@pytest.mark.parametrize("size", [2**63, 2**63 + 4095, 2**64 - 1])
def test_pool_size_beyond_a_file_size_is_refused_before_the_core(shm_dir, size):
    # Was: StorageIOError "cannot create pool: invalid size (...) for os_off_t" from libpmemobj.
    path = os.path.join(shm_dir, "big.pool")
    for make in (lambda: nvmw.Middleware(path, pool_size=size), lambda: open_engine("pmem", path, pool_size=size)):
        with pytest.raises(errors.InvalidArgumentError, match=rf"^pool_size must be an integer in \[0, 2\^63-1\], "
                                                              rf"got {size}$"):
            make()
    assert os.listdir(shm_dir) == []


def test_pool_size_at_the_bound_reaches_the_filesystem(shm_dir):
    # 2^63-1 is a valid file size: the filesystem refuses it (no space, or larger than its
    # largest file), naming the pool, and leaves nothing behind.
    path = os.path.join(shm_dir, "big.pool")
    with pytest.raises((errors.NoSpaceError, errors.StorageIOError)) as e:
        nvmw.Middleware(path, pool_size=2**63 - 1)
    assert path in str(e.value) and "os_off_t" not in str(e.value)
    assert os.listdir(shm_dir) == []


def test_a_not_found_error_reads_as_its_message():
    # Was: NotFoundError is also a KeyError, whose str() is the repr of its argument, so
    # `nvmw replay --device optane-2dimm` and Middleware(device=...) showed it in quotes.
    with pytest.raises(errors.NotFoundError) as e:
        devices.load_profile("optane-2dimm")
    assert str(e.value).startswith("no device profile 'optane-2dimm' in ")
    assert isinstance(e.value, KeyError) and e.value.args == (str(e.value),)
    with pytest.raises(KeyError) as e:
        nvmw.Middleware(engine="memory", device="optane-2dimm")
    assert not str(e.value).startswith('"')
