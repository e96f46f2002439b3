"""Traces from Python: readers (quirks, malformed rows with line numbers), synth ->
stats round trip against the published statistics, CLI synth/stats/replay, replay."""
import json
import pytest

import nvmw
from nvmw import _core
from nvmw.cli import main
from nvmw.errors import InvalidArgumentError
from nvmw.workloads import traces

HEADER = ("Timestamp,AnonRegion,AnonUserId,AnonAppName,AnonFunctionInvocationId,AnonBlobName,"
          "BlobType,AnonBlobETag,BlobBytes,Read,Write\n")


def test_reader_quirks_and_line_numbers(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text(HEADER
                    + "1606355700058,iic,1,uf2u84b0,1,tp783etybrgxap8x,BlockBlob/,6mreka6qhr,36.0,False,True\n"
                    + "1606092900138,6ex,2,9gti3olh,2,jfvf7k9kwiiq7gdx,BlockBlob/text/plain; charset=utf-8,kq2su6bhi0,,TRUE,false\n")
    t = traces.read_trace(path)
    assert t.records() == [(0, "read", "jfvf7k9kwiiq7gdx", 0),
                           ((1606355700058 - 1606092900138) * 1000, "write", "tp783etybrgxap8x", 36)]
    assert t.origin_unix_ms == 1606092900138
    with open(path, "a") as fh:
        fh.write("1606092900138,6ex,2,9gti3olh,2,abc,BlockBlob/,kq2su6bhi0,1.0,True,True\n")
    with pytest.raises(InvalidArgumentError, match=r"trace\.csv:4: exactly one of Read and Write"):
        traces.read_trace(path)
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError
        traces.read_trace(path)
    t = traces.read_trace(path, skip_malformed=True)
    assert len(t) == 2 and t.skipped_rows == 1
    assert ":4:" in t.first_skip_reason


def test_synth_stats_round_trip_follows_published_statistics(tmp_path, capsys):
    out = tmp_path / "azure.csv"
    assert main(["trace", "synth", "azure", "-o", str(out), "--rows", "30000", "--seed", "5",
                 "--max-blob-bytes", "0"]) == 0
    capsys.readouterr()
    assert main(["trace", "stats", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    for key in traces.STATS_KEYS:
        assert key in stats
    assert stats["rows"] == 30000 and stats["skipped_rows"] == 0
    assert stats["reads"] + stats["writes"] == 30000
    assert stats["rows"] / stats["duration_s"] == pytest.approx(36.6, rel=0.04)
    assert stats["writes"] / stats["rows"] == pytest.approx(0.2, abs=0.015)
    assert 5302 * 0.7 < stats["bytes_p50"] < 5302 * 1.3        # published p50 (per blob)
    assert 1589532 / 3 < stats["bytes_p99"] < 1589532 * 3      # published p99
    # The file is the released schema and unsorted, like the real one.
    lines = out.read_text().splitlines()
    assert lines[0] + "\n" == HEADER and len(lines) == 30001
    stamps = [int(line.split(",", 1)[0]) for line in lines[1:200]]
    assert stamps != sorted(stamps)


def test_synth_svd_native_and_stats(tmp_path, capsys):
    out = tmp_path / "svd.csv"
    assert main(["trace", "synth", "svd", "-o", str(out), "--rows", "3847"]) == 0
    assert out.read_text().startswith("time_ms,op,key,bytes\n")
    capsys.readouterr()
    assert main(["trace", "stats", str(out), "--format", "native", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["rows"] == 3847
    assert abs(stats["reads"] - stats["writes"]) < 0.05 * 3847   # SVD I/O is about 50/50
    assert stats["bytes_p50"] == 80_000_000


def test_stats_reports_bad_file_cleanly(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("not,a,trace\n")
    assert main(["trace", "stats", str(bad)]) == 1
    assert "bad.csv:1:" in capsys.readouterr().err
    assert main(["trace", "stats", str(tmp_path / "missing.csv")]) == 1


def test_filters_and_transforms():
    t = traces.synth("azure", rows=20000, seed=3)
    small = traces.shape(t, min_bytes=30, max_bytes=50, max_records=100, write_ratio=0.25,
                         key_prefix="i/", seed=1)
    recs = small.records()
    assert len(recs) == 100 and recs[0][0] == 0
    assert all(30 <= r[3] <= 50 and r[2].startswith("i/") for r in recs)
    assert sum(r[1] == "write" for r in recs) == 25
    fixed = traces.shape(t, fixed_bytes=4096, key_space=10)
    assert {r[3] for r in fixed.records()} == {4096}
    assert fixed.summary()["distinct_keys"] <= 10
    with pytest.raises(InvalidArgumentError):
        traces.shape(t, write_ratio=2.0)
    with pytest.raises(InvalidArgumentError):
        traces.shape(t, start_s=5, end_s=1)


def test_replay_through_middleware_open_loop():
    t = _core.Trace.from_records([(i * 1000, "read" if i % 2 else "write", f"k{i % 7}", 64)
                                  for i in range(200)])
    with nvmw.Middleware(engine="memory", window_s=0.1) as mw:
        r = traces.replay(t, mw.core, threads=8, accel=2.0)
    assert r["all"]["ops"] == 200 and r["errors"] == 0
    assert r["read"]["not_found"] == 0 and r["preloaded_keys"] == 7
    assert r["elapsed_s"] >= 0.199 / 2          # nothing issued before it is due
    assert r["offered_ops_per_s"] == pytest.approx(2000, rel=0.01)
    assert r["all"]["p99_us"] >= r["all"]["service_p50_us"]


def test_replay_cli(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("time_ms,op,key,bytes\n" + "".join(f"{i},{'read' if i % 3 else 'write'},key{i % 20},100\n"
                                                       for i in range(300)))
    assert main(["replay", str(trace), "--format", "native", "--threads", "8", "--accel", "5",
                 "--write-ratio", "0.5", "--fixed-size", "1000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["all"]["ops"] == 300 and out["errors"] == 0
    assert out["write"]["ops"] == 150 and out["write"]["bytes"] == 150 * 1000
    assert main(["replay", str(trace), "--format", "native", "--loop"]) == 2   # loop needs a duration
    assert capsys.readouterr().err == "nvmw replay: error: --loop needs --duration (a replay that starts over ends only at it)\n"


def test_stats_and_replay_read_a_native_trace_without_format(tmp_path, capsys):
    # Was: --format defaulted to azure, so `nvmw trace stats` of the file `nvmw trace synth
    # svd` had just written failed with "expected the azure header".
    out = tmp_path / "svd.csv"
    assert main(["trace", "synth", "svd", "-o", str(out), "--rows", "200"]) == 0
    capsys.readouterr()
    assert main(["trace", "stats", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 200
    commented = tmp_path / "commented.csv"
    commented.write_bytes(b"\xef\xbb\xbf# made by hand\n\n Time_ms , OP,key,bytes\r\n0,read,a,10\r\n1,write,b,20\r\n")
    assert main(["replay", str(commented), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["all"]["ops"] == 2
    azure = tmp_path / "azure.csv"
    assert main(["trace", "synth", "azure", "-o", str(azure), "--rows", "50"]) == 0
    capsys.readouterr()
    assert main(["trace", "stats", str(azure), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 50
    assert main(["trace", "stats", str(azure), "--format", "native"]) == 1  # a given format is kept
    assert "expected the native header" in capsys.readouterr().err


def test_sniff_format_looks_only_into_a_readable_regular_file(tmp_path):
    assert traces.sniff_format(tmp_path / "missing.csv") == "azure"
    assert traces.sniff_format(tmp_path) == "azure"
    (tmp_path / "empty.csv").write_text("")
    assert traces.sniff_format(tmp_path / "empty.csv") == "azure"
    (tmp_path / "n.csv").write_text("time_ms,op,key,bytes\n")
    assert traces.sniff_format(tmp_path / "n.csv") == "native"
    assert traces.sniff_format(str(tmp_path / "n.csv")) == "native"
