"""`nvmw check` and `--salvage` on intact, damaged, foreign and non-UTF-8 pool files, and
its exit statuses: 0 intact, 1 damaged, 2 usage error, 8 not checked."""
import json
import os

import pytest

import nvmw
from nvmw.cli import main
from nvmw.errors import CorruptionError

KEYS = 60


def _value(i: int) -> bytes:
    return b"value-%d-" % i + b"x" * (20 + i)


@pytest.fixture
def pool(shm_dir):
    path = os.path.join(shm_dir, "p.pool")
    eng = nvmw.open_engine("pmem", path, pool_size=16 << 20)
    for i in range(KEYS):
        eng.put(b"key-%d" % i, _value(i))
    del eng  # closes the pool
    return path


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _flip(path, offset, mask=0x10):
    data = bytearray(_read(path))
    data[offset] ^= mask
    with open(path, "wb") as f:
        f.write(data)


def _fletcher64(data: bytes, checksum_at: int) -> int:
    """libpmemobj's header checksum: Fletcher-64 over 32-bit words, its own 8 bytes as 0."""
    lo = hi = 0
    for off in range(0, len(data), 4):
        if off not in (checksum_at, checksum_at + 4):
            lo = (lo + int.from_bytes(data[off:off + 4], "little")) & 0xFFFFFFFF
        hi = (hi + lo) & 0xFFFFFFFF
    return hi << 32 | lo


def _relabel(path, layout: bytes):
    """Give the pool at `path` another layout name, with the descriptor's checksum that
    libpmemobj would have written for it: a pool another program (or another nvmw
    format) made, intact."""
    data = bytearray(_read(path))
    desc = data[4096:4096 + 2048]
    assert _fletcher64(desc, 2040) == int.from_bytes(desc[2040:], "little")  # as written
    desc[:1024] = layout.ljust(1024, b"\0")
    desc[2040:] = _fletcher64(desc, 2040).to_bytes(8, "little")
    data[4096:4096 + 2048] = desc
    with open(path, "wb") as f:
        f.write(data)


def test_intact_pool_is_clean(pool, capsys):
    before = _read(pool)
    assert main(["check", pool]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "%d intact entries" % KEYS in out
    assert _read(pool) == before


def test_damaged_entry_is_reported_and_salvage_keeps_the_rest(pool, shm_dir, capsys):
    at = _read(pool).find(_value(17))
    assert at > 0
    _flip(pool, at + 3)
    before = _read(pool)
    out_pool = os.path.join(shm_dir, "salvaged.pool")
    code = main(["check", pool, "--salvage", out_pool, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and not report["clean"]
    assert report["entries_damaged"] == 1 and report["entries_ok"] == KEYS - 1
    assert any("key-17" in p for p in report["problems"])
    assert report["salvaged"] == KEYS - 1
    assert _read(pool) == before  # check never writes the checked pool
    eng = nvmw.open_engine("pmem", out_pool, create_if_missing=False)
    assert eng.count() == KEYS - 1
    assert eng.get(b"key-17") is None
    for i in range(KEYS):
        if i != 17:
            assert eng.get(b"key-%d" % i) == _value(i)
    del eng
    # The damaged pool still opens; the damaged key is refused, not served wrong.
    eng = nvmw.open_engine("pmem", pool, create_if_missing=False)
    with pytest.raises(CorruptionError, match="key-17"):
        eng.get(b"key-17")
    assert eng.get(b"key-18") == _value(18)


def test_damaged_link_is_reported_in_text(pool, capsys):
    data = _read(pool)
    entry = data.find(b"key-5value-5-") - 40
    link = next(p for p in range(8192, len(data), 8)
                if data[p:p + 8] == entry.to_bytes(8, "little"))
    _flip(pool, link + 1, 0x01)
    assert main(["check", pool]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out and "damaged links" in out and "  bucket " in out
    with pytest.raises(CorruptionError, match="nvmw check --salvage"):
        nvmw.open_engine("pmem", pool, create_if_missing=False)


def test_foreign_file_is_one_line(shm_dir, capsys):
    path = os.path.join(shm_dir, "foreign")
    with open(path, "wb") as f:
        f.write(b"not a pool\n" * (1 << 20))
    assert main(["check", path]) == 8
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "PMEMOBJ" in err and "Traceback" not in err


def test_non_utf8_layout_is_a_clear_error(pool, capsys):
    data = bytearray(_read(pool))
    data[4096:4096 + 4] = b"\xff\xfe\x80\x00"  # the layout name
    with open(pool, "wb") as f:
        f.write(data)
    # The name fails the descriptor's checksum and the root object is ours: damage.
    assert main(["check", pool]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "\\xff\\xfe\\x80" in err
    with pytest.raises(CorruptionError, match="layout"):
        nvmw.open_engine("pmem", pool, create_if_missing=False)
    assert _read(pool) == bytes(data)


def test_salvage_target_must_be_new(pool, shm_dir):
    other = os.path.join(shm_dir, "exists")
    open(other, "wb").close()
    assert main(["check", pool, "--salvage", other]) == 8


SIZE_RANGE = "must be between 8388608 (8 MiB) and 9223372036854775807 (2^63-1)"


@pytest.mark.parametrize("size", ["0", "-5", str((8 << 20) - 1), str(2**63), str(2**64), str(2**64 + 5)])
def test_salvage_size_out_of_range_is_a_usage_error(pool, shm_dir, capsys, size):
    # Was: 0 made a 1 GiB pool, -5 and 2^64 a TypeError traceback from the binding, 2^63 a
    # libpmemobj "invalid size for os_off_t", sizes under 8 MiB a failed salvage.
    out_pool = os.path.join(shm_dir, "salvaged.pool")
    with pytest.raises(SystemExit) as e:
        main(["check", pool, "--salvage", out_pool, "--salvage-size", size])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"nvmw check: error: argument --salvage-size: {size} is out of range: {SIZE_RANGE}"
    assert not os.path.exists(out_pool)


@pytest.mark.parametrize("size", ["abc", "1.5", "8MiB", ""])
def test_salvage_size_not_an_integer_is_a_usage_error(pool, shm_dir, capsys, size):
    out_pool = os.path.join(shm_dir, "salvaged.pool")
    with pytest.raises(SystemExit) as e:
        main(["check", pool, "--salvage", out_pool, "--salvage-size", size])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        f"nvmw check: error: argument --salvage-size: {size!r} is not an integer"
    assert not os.path.exists(out_pool)


def test_salvage_size_bounds_are_accepted_and_rounded_to_pages(pool, shm_dir, capsys):
    smallest = os.path.join(shm_dir, "smallest.pool")
    assert main(["check", pool, "--salvage", smallest, "--salvage-size", str((8 << 20) + 4095)]) == 0
    assert os.path.getsize(smallest) == 8 << 20  # rounded down to whole 4 KiB pages
    assert "salvaged %d entries" % KEYS in capsys.readouterr().out
    # The largest file size reaches the filesystem, which refuses it in one line naming the pool.
    largest = os.path.join(shm_dir, "largest.pool")
    # A salvage that could not be written did not finish: 8, not 1 (the pool is intact).
    assert main(["check", pool, "--salvage", largest, "--salvage-size", str(2**63 - 1)]) == 8
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"nvmw check: error: {largest}: salvage failed: ")
    assert "os_off_t" not in err and not os.path.exists(largest)


def test_salvage_size_without_salvage_is_a_usage_error(pool, capsys):
    # Was: ignored, exit 0, nothing salvaged.
    assert main(["check", pool, "--salvage-size", str(64 << 20)]) == 2
    assert capsys.readouterr().err == "nvmw check: error: --salvage-size needs --salvage (it sizes the salvage pool)\n"


def test_help_gives_the_salvage_size_range(capsys):
    with pytest.raises(SystemExit) as e:
        main(["check", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "8388608 (8 MiB, the smallest pmem pool) to 2^63-1, rounded down to a multiple of 4096" in text


@pytest.mark.parametrize("option", ["--salvage", "--scratch-dir"])
def test_empty_path_is_a_usage_error(pool, capsys, option):
    # Was: an empty --salvage salvaged nothing and exited 0; an empty --scratch-dir meant the default.
    with pytest.raises(SystemExit) as e:
        main(["check", pool, option, ""])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"nvmw check: error: argument {option}: empty path"


@pytest.mark.parametrize("kind", ["under-a-file", "missing-directory", "dangling-link"])
def test_salvage_target_is_checked_before_the_walk(pool, shm_dir, capsys, kind):
    blocker = os.path.join(shm_dir, "file")
    open(blocker, "wb").close()
    dangling = os.path.join(shm_dir, "dangling")
    os.symlink(os.path.join(shm_dir, "nowhere"), dangling)
    out_pool, message = {
        # Was: "salvage target exists" (stat failed with ENOTDIR, not ENOENT).
        "under-a-file": (os.path.join(blocker, "out.pool"),
                         f"--salvage {blocker}/out.pool: directory {blocker} is not a directory"),
        # Was: "pool directory ... No such file or directory", after the whole walk.
        "missing-directory": (os.path.join(shm_dir, "no", "out.pool"),
                              f"--salvage {shm_dir}/no/out.pool: directory {shm_dir}/no does not exist"),
        # Was: "salvage failed: ... cannot open or create pool".
        "dangling-link": (dangling, f"{dangling}: salvage target exists; give a new path"),
    }[kind]
    assert main(["check", pool, "--salvage", out_pool]) == 8
    assert capsys.readouterr() == ("", f"nvmw check: error: {message}\n")
    assert sorted(os.listdir(shm_dir)) == ["dangling", "file", "p.pool"]


def test_scratch_dir_must_be_a_directory(pool, shm_dir, capsys):
    # Was: an error naming the scratch file inside it (".p.pool.check-PID-N: No such file or directory").
    blocker = os.path.join(shm_dir, "file")
    open(blocker, "wb").close()
    missing = os.path.join(shm_dir, "missing")
    for scratch, what in ((missing, "no such directory"), (blocker, "not a directory")):
        assert main(["check", pool, "--scratch-dir", scratch]) == 8
        assert capsys.readouterr() == ("", f"nvmw check: error: --scratch-dir {scratch}: {what}\n")
    scratch = os.path.join(shm_dir, "scratch")
    os.mkdir(scratch)
    assert main(["check", pool, "--scratch-dir", scratch]) == 0
    assert os.listdir(scratch) == []  # the scratch copy is removed


def test_missing_pool_with_salvage_is_the_core_s_one_line(shm_dir, capsys):
    # Was: "[Errno 2] No such file or directory: '...'" from sizing the salvage pool.
    missing = os.path.join(shm_dir, "nothing.pool")
    out_pool = os.path.join(shm_dir, "out.pool")
    assert main(["check", missing, "--salvage", out_pool]) == 8
    assert capsys.readouterr().err == f"nvmw check: error: {missing}: pool file does not exist\n"
    assert not os.path.exists(out_pool)


def test_a_file_that_is_not_a_pool_under_a_name_that_is_not_utf8(shm_dir, capsys):
    # Was: the report quoted the name, and turning it into text ended in a RuntimeError
    # traceback ("nanobind::str(): conversion error").
    raw = os.path.join(os.fsencode(shm_dir), b"q\xff.pool")
    with open(raw, "wb") as f:
        f.write(b"not a pool\n" * (1 << 20))
    assert main(["check", os.fsdecode(raw)]) == 8
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    report = nvmw._core.check_pmem_pool(raw)
    assert not report["readable"] and any("q\\xff.pool" in p for p in report["problems"]), report


def test_a_pool_open_in_another_engine_is_refused_not_reported_damaged(pool, capsys):
    # A copy read while another engine can write is not one state of the pool: an intact
    # pool open elsewhere was reported with a damaged heap ("pool initialization failed").
    eng = nvmw.open_engine("pmem", pool)
    try:
        before = _read(pool)
        assert main(["check", pool]) == 8  # not checked, not damaged
        captured = capsys.readouterr()
        assert captured.err == (f"nvmw check: error: {pool}: pool is open in another process or engine; "
                                f"check it once that one has closed it\n")
        assert "damaged" not in captured.out
        assert _read(pool) == before
    finally:
        del eng
    assert main(["check", pool]) == 0


# --- exit statuses ---------------------------------------------------------------------

def _make(kind, pool, shm_dir):
    """The file `nvmw check` is given for `kind`, made from the intact pool at `pool`."""
    data = _read(pool)
    path = pool
    if kind == "damaged-entry":
        _flip(pool, data.find(_value(17)) + 3)
    elif kind == "damaged-pool-header":
        _flip(pool, 200, 0x01)  # inside the pool header's checksum
    elif kind == "damaged-signature":
        _flip(pool, 0, 0x01)  # "PMEMOBJ" no more; the layout name still says nvmw
    elif kind == "truncated-pool":
        with open(pool, "wb") as f:
            f.write(data[:4 << 20])  # smaller than any pmemobj pool, the header ours
    elif kind == "missing":
        path = os.path.join(shm_dir, "nothing.pool")
    elif kind == "directory":
        path = os.path.join(shm_dir, "dir.pool")
        os.mkdir(path)
    elif kind == "empty-file":
        path = os.path.join(shm_dir, "empty.pool")
        open(path, "wb").close()
    elif kind == "text-file":
        path = os.path.join(shm_dir, "notes.txt")
        with open(path, "wb") as f:
            f.write(b"not a pool\n" * (1 << 20))
    elif kind == "foreign-layout":
        _relabel(pool, b"another-program")
    elif kind == "format-1":
        _relabel(pool, b"nvmw-kv-1")
    else:
        assert kind == "intact"
    return path


STATUSES = [
    ("intact", 0, "ok: format 2"),
    ("damaged-entry", 1, "DAMAGED"),
    ("damaged-pool-header", 1, "pool header damaged (checksum mismatch)"),
    ("damaged-signature", 1, 'pool header damaged (no PMEMOBJ signature; the layout name is "nvmw-kv-2")'),
    ("truncated-pool", 1, "nvmw pool truncated to 4194304 bytes"),
    ("missing", 8, "nothing.pool: pool file does not exist"),
    ("directory", 8, "dir.pool: not a regular file"),
    ("empty-file", 8, "empty file (0 bytes), not an nvmw pool"),
    ("text-file", 8, "not a pmemobj pool (no PMEMOBJ signature)"),
    ("foreign-layout", 8, 'pool has layout "another-program", expected "nvmw-kv-2"'),
    ("format-1", 8, "nvmw pool format version 1"),
]


@pytest.mark.parametrize("kind, status, words", STATUSES, ids=[k for k, _, _ in STATUSES])
def test_exit_status_tells_damage_from_a_check_that_did_not_run(pool, shm_dir, capsys, kind, status, words):
    # Was: 1 for every one of them but the intact pool, so a script could not tell a
    # damaged pool (salvage it) from a check that did not run (a wrong path, another
    # program's file).
    path = _make(kind, pool, shm_dir)
    before = _read(path) if os.path.isfile(path) else None
    assert main(["check", path]) == status
    out, err = capsys.readouterr()
    assert words in (out if status == 0 or kind == "damaged-entry" else err), (out, err)
    if err:
        assert len(err.splitlines()) == 1 and err.startswith("nvmw check: error: ")
    # The same status with --json; the report, when the file could be read, says whose it is.
    assert main(["check", path, "--json"]) == status
    out, err = capsys.readouterr()
    if kind in ("missing", "directory"):
        assert out == "" and words in err
    else:
        report = json.loads(out)
        assert report["nvmw_pool"] is (status != 8)
        assert report["clean"] is (status == 0)
    if before is not None:
        assert _read(path) == before  # never written


@pytest.mark.parametrize("kind, status", [("intact", 0), ("damaged-entry", 1), ("damaged-pool-header", 1),
                                          ("missing", 8), ("foreign-layout", 8)])
def test_exit_status_with_salvage(pool, shm_dir, capsys, kind, status):
    path = _make(kind, pool, shm_dir)
    out_pool = os.path.join(shm_dir, "salvaged.pool")
    assert main(["check", path, "--salvage", out_pool]) == status
    capsys.readouterr()
    # A pool whose entries could be read is salvaged; one that is not an nvmw pool, or
    # whose header is damaged, leaves nothing behind.
    assert os.path.exists(out_pool) is (kind in ("intact", "damaged-entry"))


def test_help_lists_the_exit_statuses(capsys):
    with pytest.raises(SystemExit) as e:
        main(["check", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    epilog = out[out.index("exit status:"):].splitlines()
    assert [line.split()[0] for line in epilog[1:] if line[:3].strip()] == ["0", "1", "2", "8"]
    assert "  8  not checked, nothing said about the pool: no such file," in out
