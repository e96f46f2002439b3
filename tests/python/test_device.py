"""Tests of the emulated Optane device from Python: profile files and loading, the
model against the FAST'20 CSVs (read here independently with the csv module),
wrap_engine, the collapse under real threads, and the `nvmw device` CLI."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from nvmw import _core
from nvmw.errors import InvalidArgumentError, NotFoundError
from nvmw import devices
from nvmw.lab import device as device_lab

try:
    import tomllib
except ModuleNotFoundError:  # python < 3.11
    import tomli as tomllib

DATA = Path(devices.__file__).resolve().parent / "data"
FAST20 = DATA / "optane-fast20"
BIG = 2 << 20


def column(file: str, name: str) -> list[float]:
    with open(FAST20 / file, newline="") as f:
        return [float(row[name]) for row in csv.DictReader(f)]


def test_shipped_profiles_are_listed_and_valid_toml():
    names = devices.list_profiles()
    assert {"none", "optane-1dimm", "optane-6dimm"} <= set(names)
    for name in names:
        with open(DATA / "devices" / f"{name}.toml", "rb") as f:
            doc = tomllib.load(f)  # the C++ subset reader must stay real TOML
        assert doc["name"] == name
        p = devices.load_profile(name)
        assert p.name == name
        assert p.passthrough == doc.get("passthrough", False)


def test_load_by_path_and_errors(tmp_path):
    p = devices.load_profile(DATA / "devices" / "optane-1dimm.toml")
    assert p.name == "optane-1dimm" and not p.passthrough
    with pytest.raises(NotFoundError, match="optane-1dimm"):
        devices.load_profile("optane-7dimm")
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\ndata_dir = "."\n[latency]\ncsv = [1]\n')
    with pytest.raises(InvalidArgumentError, match="bad.toml:4"):
        devices.load_profile(bad)
    with pytest.raises(InvalidArgumentError):
        devices.load_profile(42)


@pytest.mark.parametrize("profile,file,op,col", [
    ("optane-1dimm", "04-bandwidth_thcount_optane_ni.csv", "read", "Read"),
    ("optane-1dimm", "04-bandwidth_thcount_optane_ni.csv", "write", "Write(ntstore)"),
    ("optane-6dimm", "04-bandwidth_thcount_optane.csv", "read", "Read"),
    ("optane-6dimm", "04-bandwidth_thcount_optane.csv", "write", "Write(clwb)"),  # swapped header
])
def test_model_reproduces_thread_sweep_within_5_percent(profile, file, op, col):
    m = devices.model(profile)
    for n, measured in zip(column(file, "Threads"), column(file, col)):
        assert m.bandwidth(op, int(n), BIG) == pytest.approx(measured, rel=0.05)
        per_access = int(n) * BIG / m.service_time_ns(op, BIG, int(n))
        assert per_access == pytest.approx(measured, rel=0.05)


def test_interleaved_write_columns_are_swapped():
    # The evidence the 6-DIMM profile relies on (see data/optane-fast20/README.md).
    header_ntstore = column("04-bandwidth_thcount_optane.csv", "Write(ntstore)")
    header_clwb = column("04-bandwidth_thcount_optane.csv", "Write(clwb)")
    one_dimm_clwb = column("04-bandwidth_thcount_optane_ni.csv", "Write(clwb)")
    size_ntstore = column("05-bandwidth_accesssize_optane.csv", "Write(ntstore)")
    size_clwb = column("05-bandwidth_accesssize_optane.csv", "Write(clwb)")
    assert header_ntstore[0] == pytest.approx(one_dimm_clwb[0], rel=0.05)
    assert max(header_clwb) == pytest.approx(max(size_ntstore), rel=0.05)
    assert max(header_ntstore) == pytest.approx(max(size_clwb), rel=0.05)


def test_access_size_efficiency_applied():
    m = devices.model("optane-1dimm")
    sizes = column("05-bandwidth_accesssize_optane_ni.csv", "AccessSize")
    writes = column("05-bandwidth_accesssize_optane_ni.csv", "Write(ntstore)")
    for s, w in zip(sizes, writes):
        ratio = m.bandwidth("write", 2, int(s)) / m.bandwidth("write", 2, BIG)
        assert ratio == pytest.approx(w / writes[-1], abs=0.01)
    assert m.bandwidth("write", 1, 64) / m.bandwidth("write", 1, 256) == pytest.approx(0.25, abs=0.02)
    # a 30-byte write costs a whole 64-byte one
    assert m.service_time_ns("write", 30, 3) == m.service_time_ns("write", 64, 3)


def test_mixed_readers_writers_use_the_mix_factor():
    m = devices.model("optane-1dimm")
    p = m.profile
    mixed = 8 * m.rate_per_accessor("read", 8, 8) + 8 * m.rate_per_accessor("write", 8, 8)
    blend = 0.5 * p.read_bandwidth(16) + 0.5 * p.write_bandwidth(16)
    assert mixed / blend == pytest.approx(p.mix_factor(0.5))
    assert m.mixed_service_time_ns("write", BIG, 0, 4) == m.service_time_ns("write", BIG, 4)


def test_bad_arguments_raise():
    m = devices.model("optane-1dimm")
    with pytest.raises(InvalidArgumentError, match="read' or 'write"):
        m.bandwidth("erase", 1, 64)
    with pytest.raises(InvalidArgumentError):
        m.service_time_ns("read", 64, 0)
    with pytest.raises(InvalidArgumentError):
        m.service_time_ns("read", -1, 1)


def test_profile_built_from_fields():
    p = _core.DeviceProfile()
    p.name = "toy"
    p.passthrough = False
    p.read_latency_ns = 100.0
    p.write_latency_ns = 50.0
    p.read_bandwidth = _core.DeviceCurve([1, 4], [1.0, 4.0])
    p.write_bandwidth = _core.DeviceCurve([1, 2, 8], [2.0, 2.0, 1.0])
    m = devices.model(p)
    assert m.bandwidth("write", 8, 4096) == pytest.approx(1.0)
    assert m.service_time_ns("read", 1000, 1) == pytest.approx(100 + 1000 / 1.0)
    p.write_bandwidth = _core.DeviceCurve([2, 1], [1.0, 1.0])
    with pytest.raises(InvalidArgumentError, match="increasing"):
        p.validate()


def test_wrap_engine_none_and_emulated():
    base = _core.new_memory_engine()
    assert devices.wrap_engine(base, "none") is base
    assert devices.wrap_engine(base, None) is base
    emu = devices.wrap_engine(base, "optane-1dimm")
    assert emu.name == "emulated"
    emu.put(b"key", b"v" * 5000)
    assert emu.get(b"key") == b"v" * 5000
    assert emu.get(b"nope") is None
    assert base.count() == 1
    stats = devices.device_stats(emu)
    assert stats["write_accesses"] == 1 and stats["read_accesses"] == 2
    assert stats["write_bytes"] == 5003
    with pytest.raises(InvalidArgumentError):
        devices.device_stats(base)
    del base  # the wrapper keeps its base engine alive
    assert emu.get(b"key") == b"v" * 5000


def test_emulated_writes_collapse_with_real_threads():
    # Shorter than the C++ test (which sweeps 1..4 writers): 2 writers vs 24 on 1 DIMM,
    # judged on the emulator's busy-time accounting, once the 24 really overlap.
    low = device_lab.bench("optane-1dimm", "write", 2, 2 << 20, 30, 120)
    for _ in range(3):
        high = device_lab.bench("optane-1dimm", "write", 24, 2 << 20, 40, 400)
        if high["mean_active_while_busy"] >= 20:
            break
    else:
        pytest.skip(f"host too loaded: 24 writers did not overlap ({high})")
    assert high["busy_gbps"] < 0.5 * low["busy_gbps"], (low, high)


def test_cli_show_curve_and_plot(tmp_path, capsys):
    from nvmw.cli import main

    def run(*args):
        capsys.readouterr()
        assert main(["device", *args]) == 0
        return capsys.readouterr().out

    shown = json.loads(run("show", "optane-6dimm", "--json"))
    assert shown["name"] == "optane-6dimm"
    assert shown["write_bandwidth"]["y"][0] == pytest.approx(
        column("04-bandwidth_thcount_optane.csv", "Write(clwb)")[0])
    rows = json.loads(run("curve", "optane-1dimm", "--json", "--max-threads", "4"))
    assert [r["threads"] for r in rows] == [1, 2, 3, 4]
    assert "optane-6dimm" in run("list")
    png = tmp_path / "device.png"
    device_lab.plot(str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
