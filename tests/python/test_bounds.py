"""The CLI's bounds: nonsensical numbers, unwritable outputs and absurd trace sizes end
with one line in the library's own words and a non-zero exit, never a traceback."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _nvmw(*argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nvmw", *argv], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


@pytest.mark.parametrize("argv, option", [
    (["sweep", "--duration", "-1"], "--duration"),
    (["sweep", "--duration", "0"], "--duration"),
    (["sweep", "--clients", "0"], "--clients"),
    (["evaluate", "--steps", "0"], "--steps"),
    (["ycsb", "--threads", "99999999999999999999"], "--threads"),
    (["replay", "x.csv", "--accel", "nan"], "--accel"),
    (["run-phase", "1", "--duration", "-5"], "--duration"),
    (["calibrate", "--windows", "0", "--out", "x.toml"], "--windows"),
])
def test_nonsensical_numbers_are_usage_errors(argv, option):
    r = _nvmw(*argv)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f"argument {option}" in r.stderr


def test_an_integer_past_the_top_is_told_the_top():
    # The lower bound alone ("must be >= 1") would send the user the wrong way.
    r = _nvmw("ycsb", "--ops", "99999999999999999999")
    assert r.returncode == 2
    assert "out of range: must be between 0 and 1000000000" in r.stderr
    r = _nvmw("bench", "overhead", "--ops", "0")
    assert r.returncode == 2
    assert "out of range: must be between 1 and 100000000" in r.stderr
    r = _nvmw("replay", "x.csv", "--key-space", "99999999999999999999")  # a count without a bound of its own
    assert r.returncode == 2
    assert "out of range: must be between 1 and 2^63-1" in r.stderr


def test_unwritable_output_directory_fails_before_the_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = _nvmw("sweep", "--out", str(blocker / "sub"))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "--out" in r.stderr and "cannot create the output directory" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_unwritable_output_file_fails_before_collecting(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = _nvmw("collect", "--env", "synthetic", "--episodes", "1", "--out", str(blocker / "t.npz"))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "t.npz").exists()


def test_collection_that_cannot_fit_in_memory_is_refused_before_it_starts(tmp_path):
    # Each option is within its own bound; together they would keep ~57 TiB of
    # transitions. Refused at once (the run would otherwise go on for hours).
    out = tmp_path / "t.npz"
    r = _nvmw("collect", "--env", "synthetic", "--episodes", "10000", "--phases", "1", "2", "3", "4", "5", "6",
              "--steps", "1000000", "--out", str(out), timeout=60)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "60,000,000,000 transitions" in r.stderr and "--episodes" in r.stderr and "--steps" in r.stderr
    assert not out.exists()


def test_collection_that_fits_is_not_refused(tmp_path):
    out = tmp_path / "t.npz"
    r = _nvmw("collect", "--env", "synthetic", "--episodes", "1", "--phases", "1", "--steps", "5",
              "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert out.exists()


def test_replay_refuses_a_size_over_the_middleware_cap(tmp_path):
    trace = tmp_path / "huge.csv"
    trace.write_text("time_ms,op,key,bytes\n0.000,W,a,128\n1.000,W,b,900000000000000\n")
    r = _nvmw("replay", str(trace), "--format", "native")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "bad_alloc" not in r.stderr
    assert "max_value_bytes" in r.stderr or "size" in r.stderr


# ---- trace rows that are not UTF-8 --------------------------------------------------------

def _native_with_bad_row(path) -> None:
    path.write_bytes(b"time_ms,op,key,bytes\n0.000,W,caf\xc3\xa9,10\n1.000,W,k\xff\xfe,20\n2.000,R,x,30\n")


def test_trace_stats_skips_a_non_utf8_row_and_names_it(tmp_path):
    trace = tmp_path / "t.csv"
    _native_with_bad_row(trace)
    r = _nvmw("trace", "stats", str(trace), "--format", "native", "--json")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "UnicodeDecodeError" not in r.stderr
    import json
    stats = json.loads(r.stdout)
    assert stats["rows"] == 2 and stats["skipped_rows"] == 1
    assert stats["first_skip_reason"] == f"{trace}:3: not UTF-8 text (byte 0xFF at column 10)"


def test_trace_stats_strict_fails_on_a_non_utf8_row_with_its_line(tmp_path):
    trace = tmp_path / "t.csv"
    _native_with_bad_row(trace)
    r = _nvmw("trace", "stats", str(trace), "--format", "native", "--strict")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "UnicodeDecodeError" not in r.stderr
    assert r.stderr.strip() == f"nvmw trace stats: error: {trace}:3: not UTF-8 text (byte 0xFF at column 10)"


def test_trace_api_reads_non_utf8_rows_as_malformed(tmp_path):
    from nvmw import _core
    from nvmw.errors import InvalidArgumentError
    from nvmw.workloads import traces
    trace = tmp_path / "t.csv"
    _native_with_bad_row(trace)
    with pytest.raises(InvalidArgumentError, match=r":3: not UTF-8"):
        traces.read_trace(trace, "native")
    t = traces.read_trace(trace, "native", skip_malformed=True)
    assert [r[2] for r in t.records()] == ["café", "x"]
    t = _core.parse_trace(trace.read_bytes(), "native", True, "mem")  # bytes as they are
    assert t.skipped_rows == 1 and t.first_skip_reason.startswith("mem:3: not UTF-8")


# ---- thread counts: reported as used, refused in the library's words -------------------

def test_clamped_thread_counts_are_reported_as_used():
    import nvmw
    from nvmw.errors import InvalidArgumentError
    with nvmw.Middleware(engine="memory", interactive_threads=100, batch_threads=0) as mw:
        assert mw.threads == (32, 1)
        for bad in ((100, 0), (2 ** 40, 1), (-1, 3)):
            with pytest.raises(InvalidArgumentError, match=r"thread counts must be in \[1, 32\], got"):
                mw.set_threads(*bad)
            assert mw.threads == (32, 1)  # nothing changed
        assert mw.set_threads(4, 2) == (4, 2)
        from nvmw import _core
        grow = next(a for a, (di, db) in enumerate(_core.ACTION_DELTAS) if di > 0 and db > 0)
        di, db = _core.ACTION_DELTAS[grow]
        assert mw.perform_action(grow) == (4 + di, 2 + db)
        mw.set_threads(32, 32)
        assert mw.perform_action(grow) == (32, 32)  # clamped, and reported so
        with pytest.raises(InvalidArgumentError, match=r"action must be in \[0, 8\], got 9"):
            mw.perform_action(9)
    with nvmw.Middleware(engine="memory", interactive_threads=2 ** 40, batch_threads=-2 ** 40,
                         max_threads=8) as mw:
        assert mw.threads == (8, 1)
        assert mw.set_threads(8, 8) == (8, 8)
    with pytest.raises(InvalidArgumentError, match=r"max_threads must be an integer in \[-2\^31, 2\^31-1\], got "):
        nvmw.Middleware(engine="memory", max_threads=2 ** 40)
    with pytest.raises(InvalidArgumentError, match=r"max_threads must be in \[1, 1024\]"):  # the core's own range
        nvmw.Middleware(engine="memory", max_threads=5000)


def test_cli_reports_the_clamped_pool_sizes():
    import json
    r = _nvmw("ycsb", "--controller", "fixed:64,2", "--duration", "0.2", "--records", "20", "--threads", "2",
              "--json")
    assert r.returncode == 0, r.stderr
    mw = json.loads(r.stdout)["middleware"]
    assert (mw["interactive_threads"], mw["batch_threads"]) == (32, 2)


def test_sweep_refuses_a_grid_the_middleware_would_clamp():
    r = _nvmw("sweep", "--grid-i", "1,64", "--grid-b", "1")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert "grid_i values must be in [1, 32]" in r.stderr


# ---- bounds and checks reachable from Python ---------------------------------------------

def test_read_trace_max_bytes_names_the_line(tmp_path):
    from nvmw.errors import InvalidArgumentError
    from nvmw.workloads import traces
    trace = tmp_path / "t.csv"
    trace.write_text("time_ms,op,key,bytes\n0,W,a,100\n1,W,b,5000\n")
    assert len(traces.read_trace(trace, "native")) == 2
    with pytest.raises(InvalidArgumentError, match=r":3: bytes 5000 exceeds the size cap 4096"):
        traces.read_trace(trace, "native", max_bytes=4096)
    t = traces.read_trace(trace, "native", max_bytes=4096, skip_malformed=True)
    assert len(t) == 1 and t.skipped_rows == 1


def test_replay_max_value_bytes_refuses_before_starting():
    import nvmw
    from nvmw import _core
    from nvmw.errors import InvalidArgumentError
    from nvmw.workloads import traces
    trace = _core.Trace.from_records([(0, "write", "a", 64), (1000, "write", "big", 5000)])
    with nvmw.Middleware(engine="memory") as mw:
        r = _core.Replay(trace, traces.replay_options(threads=2, max_value_bytes=4096))
        with pytest.raises(InvalidArgumentError, match=r"record 2 \(key 'big'\) is 5000 bytes, over the size cap 4096"):
            r.start(mw.core)
        assert mw.engine.count() == 0
        out = traces.replay(trace, mw.core, threads=2, max_value_bytes=5000)
        assert out["all"]["ops"] == 2 and out["errors"] == 0
    with pytest.raises(ValueError, match="max_value_bytes"):
        traces.replay_options(max_value_bytes=-1)


def _flip_in_place(path: str, offset: int) -> None:
    with open(path, "r+b") as f:  # the pool stays mapped: the change is seen through the mapping
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x10]))


def test_open_engine_verify_checksums_refuses_a_value_damaged_while_open(shm_dir):
    import nvmw
    from nvmw.errors import CorruptionError
    value = b"V" * 200
    for verify in (False, True):
        path = os.path.join(shm_dir, f"v{int(verify)}.pool")
        eng = nvmw.open_engine("pmem", path, pool_size=16 << 20, verify_checksums=verify)
        eng.put(b"k", value)
        with open(path, "rb") as f:
            at = f.read().find(value)
        _flip_in_place(path, at + 7)
        if verify:
            with pytest.raises(CorruptionError):
                eng.get(b"k")
        else:
            assert eng.get(b"k") != value  # what read verification is for
        del eng


def test_open_engine_paranoid_checks_and_file_mode(shm_dir):
    import stat
    import nvmw
    from nvmw.errors import CorruptionError, InvalidArgumentError
    path = os.path.join(shm_dir, "p.pool")
    old = os.umask(0)
    try:
        eng = nvmw.open_engine("pmem", path, pool_size=16 << 20, file_mode=0o640)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    eng.put(b"a", b"A" * 100)
    eng.put(b"b", b"B" * 100)
    del eng
    with open(path, "rb") as f:
        at = f.read().find(b"A" * 100)
    _flip_in_place(path, at + 5)
    with pytest.raises(CorruptionError):
        nvmw.open_engine("pmem", path, create_if_missing=False, paranoid_checks=True)
    eng = nvmw.open_engine("pmem", path, create_if_missing=False)  # default: quarantined
    with pytest.raises(CorruptionError):
        eng.get(b"a")
    assert eng.get(b"b") == b"B" * 100
    del eng
    with pytest.raises(InvalidArgumentError, match="file_mode"):
        nvmw.open_engine("pmem", os.path.join(shm_dir, "q.pool"), file_mode=0o17777)


@pytest.mark.parametrize("option, value", [
    ("queue_capacity", 2 ** 70), ("batch_threshold_bytes", -1), ("spin_ns", 2 ** 64),
    ("max_value_bytes", -5), ("no_control_max_inflight", 2 ** 40), ("batch_nice", 2 ** 33),
])
def test_integers_outside_the_cores_types_are_named(option, value):
    import nvmw
    from nvmw.errors import InvalidArgumentError
    with pytest.raises(InvalidArgumentError, match=rf"^{option} must be an integer in \[.*\], got {value}$"):
        nvmw.Middleware(engine="memory", **{option: value})


def test_pool_size_outside_its_type_is_named(shm_dir):
    import nvmw
    from nvmw.errors import InvalidArgumentError
    for value in (-1, 2 ** 65):
        with pytest.raises(InvalidArgumentError, match=rf"^pool_size must be an integer in \[0, 2\^63-1\], got {value}$"):
            nvmw.open_engine("pmem", os.path.join(shm_dir, "p.pool"), pool_size=value)
    assert not os.path.exists(os.path.join(shm_dir, "p.pool"))


def test_out_of_memory_in_a_helper_thread_is_one_line(tmp_path):
    # The synthesis runs on a helper thread (so that Ctrl-C can stop it); its
    # std::bad_alloc must come back to the caller as MemoryError, not end the process.
    import resource

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    for kind in ("azure", "svd"):
        # The most rows --rows takes, about 6 GB of records reserved at once.
        r = subprocess.run([sys.executable, "-m", "nvmw", "trace", "synth", kind, "--rows", "100000000",
                            "-o", str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ), preexec_fn=cap)
        assert r.returncode == 1, (r.returncode, r.stderr[-500:])
        assert r.stderr.strip() == "nvmw trace synth: error: out of memory"


@pytest.mark.parametrize("option", ["--duration-ms", "--warmup-ms"])
def test_device_bench_times_past_32_bits_are_usage_errors(capsys, option):
    # Was: the binding's TypeError, a traceback listing its signature (it counts them in 32 bits).
    from nvmw.cli import main

    with pytest.raises(SystemExit) as e:
        main(["device", "bench", "optane-1dimm", option, str(1 << 32)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and "4294967295" in err and "Traceback" not in err
