"""`nvmw demo` checks its options before anything runs: an unknown --device is a usage
error listing the shipped profiles (it was refused only once the first scenario had
begun), and --duration, --clients and --segment have upper bounds."""
import pytest

from nvmw.cli import main
from nvmw.commands import demo
from nvmw.devices import devices_dir, list_profiles


class _Ran(Exception):
    """Raised by a stand-in for the demo's first step: the options got through."""


@pytest.fixture
def no_run(monkeypatch, tmp_path):
    def ran(*args, **kwargs):
        raise _Ran()

    monkeypatch.setattr(demo, "run_interference", ran)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("argv, option", [
    (["--device", "optane-2dimm"], "--device"),
    (["--device", ""], "--device"),
    (["--device", "."], "--device"),
    (["--clients", "4097"], "--clients"),
    (["--clients", "0"], "--clients"),
    (["--duration", "1e300"], "--duration"),
    (["--duration", "0"], "--duration"),
    (["--segment", str(demo.SEGMENT_MAX + 1)], "--segment"),
    (["--segment", "99999999999999999999"], "--segment"),
])
def test_bad_option_is_a_usage_error_before_the_run(no_run, capsys, argv, option):
    with pytest.raises(SystemExit) as e:
        main(["demo", "--engine", "memory", *argv])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""  # not even the demo's first line
    assert f"argument {option}:" in err
    assert "Traceback" not in err


def test_unknown_device_lists_the_shipped_profiles(no_run, capsys):
    for device in ("optane-2dimm", "."):
        with pytest.raises(SystemExit):
            main(["demo", "--engine", "memory", "--device", device])
        err = capsys.readouterr().err
        assert all(name in err for name in list_profiles()), err
        assert "optane-1dimm" in err


@pytest.mark.parametrize("argv", [
    [],
    ["--device", "none"],
    ["--device", "optane-6dimm"],
    ["--device", str(devices_dir() / "optane-6dimm.toml")],
    ["--clients", "4096", "--duration", "0.5", "--segment", str(demo.SEGMENT_MAX)],
])
def test_good_options_get_to_the_run(no_run, argv):
    with pytest.raises(_Ran):
        main(["demo", "--engine", "memory", *argv])
