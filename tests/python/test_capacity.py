"""Capacity files and the contended phases scaled to them: loading, resolving factors to
request rates, clear errors for bad factors and missing capacity, the default phase set
used by the commands, and `nvmw calibrate --capacity` writing a loadable file."""
import inspect
import json

import pytest

from nvmw.cli import build_parser, main
from nvmw.devices import REFERENCE_BYTES, model
from nvmw.lab import calibration, evaluation, runs
from nvmw.rl import pretrain
from nvmw.rl.envs import ControlEnv, SeqPhaseEnv
from nvmw.workloads import capacity as cap_mod
from nvmw.workloads import phases
from nvmw.workloads.capacity import CAPACITY_DIR, Capacity, load_capacity, rate_for, shipped_capacity_path


def _cap_dict(write=2e9, read=6e9, inter=1e6, device="test-dev"):
    return {"device": device, "device_bandwidth": {"write_bytes_per_s": write, "read_bytes_per_s": read},
            "interactive": {"ops_per_s": inter}}


PHASE_TEMPLATE = """number = 9
name = "t"
[interactive]
source = "azure"
min_bytes = 30
max_bytes = 50
requests = 50
write_ratio = 0.2
clients = 4
{inter}
[batch]
source = "svd"
requests = 20
{batch}
clients = 4
"""


def _phase_file(tmp_path, inter="capacity_rate = 0.5", batch="fixed_bytes = 1000\nwrite_ratio = 0.5\noffered_write_bw = 2"):
    p = tmp_path / "p.toml"
    p.write_text(PHASE_TEMPLATE.format(inter=inter, batch=batch))
    return p


def test_shipped_capacity_loads_and_matches_the_device_model():
    c = load_capacity()
    assert c.device == "optane-1dimm" and c.interactive_ops_per_s > 0
    m = model("optane-1dimm")
    assert c.write_bytes_per_s == pytest.approx(max(m.bandwidth("write", n, REFERENCE_BYTES) for n in range(1, 33)) * 1e9)
    assert c.read_bytes_per_s == pytest.approx(max(m.bandwidth("read", n, REFERENCE_BYTES) for n in range(1, 33)) * 1e9)
    with open(cap_mod.shipped_capacity_path(), encoding="utf-8") as fh:
        raw = json.load(fh)
    assert raw["cores"] >= 1 and raw["command"].startswith("nvmw calibrate --capacity") and raw["notes"]
    assert load_capacity("optane-1dimm") == c


def test_contended_phases_follow_capacity_and_factors():
    c = load_capacity()
    p5 = phases.load_phase(5)
    assert p5.contended and p5.batch.scaled_by == ("offered_write_bw", 1.75)
    assert p5.batch.target_ops_per_s == pytest.approx(1.75 * c.write_bytes_per_s / (0.5 * 800_000))
    assert p5.interactive.scaled_by[0] == "capacity_rate"
    assert p5.interactive.target_ops_per_s == pytest.approx(p5.interactive.scaled_by[1] * c.interactive_ops_per_s)
    # Request shapes are phase 1's (2's for phase 6); only the pace differs.
    p1, p2, p6 = phases.load_phase(1), phases.load_phase(2), phases.load_phase(6)
    for a, b in ((p5, p1), (p6, p2)):
        for side in ("interactive", "batch"):
            x, y = getattr(a, side), getattr(b, side)
            assert (x.requests, x.clients, x.write_ratio, x.min_bytes, x.max_bytes, x.fixed_bytes, x.key_space) == \
                   (y.requests, y.clients, y.write_ratio, y.min_bytes, y.max_bytes, y.fixed_bytes, y.key_space)
    assert not p1.contended and p1.scaling == ""
    assert "1.75 x the device's peak write bandwidth" in p5.scaling and c.device in p5.scaling
    # Another capacity: the rates follow it.
    other = phases.load_phase(5, capacity=_cap_dict(write=4e9, inter=2e5))
    assert other.batch.target_ops_per_s == pytest.approx(1.75 * 4e9 / (0.5 * 800_000))
    assert other.interactive.target_ops_per_s == pytest.approx(p5.interactive.scaled_by[1] * 2e5)


def test_capacity_file_from_path_and_environment(tmp_path, monkeypatch):
    f = tmp_path / "cap.json"
    f.write_text(json.dumps(_cap_dict(write=1e9, read=3e9, inter=5e4)))
    p = phases.load_phase(_phase_file(tmp_path), capacity=str(f))
    assert p.interactive.target_ops_per_s == pytest.approx(0.5 * 5e4)
    assert p.batch.target_ops_per_s == pytest.approx(2 * 1e9 / (0.5 * 1000))
    monkeypatch.setenv(cap_mod.CAPACITY_ENV, str(f))
    assert load_capacity().source == str(f)
    assert phases.load_phase(5).batch.target_ops_per_s == pytest.approx(1.75 * 1e9 / (0.5 * 800_000))


def test_read_bandwidth_factor(tmp_path):
    c = Capacity("d", write_bytes_per_s=1e9, read_bytes_per_s=4e9, interactive_ops_per_s=1e5)
    p = phases.load_phase(_phase_file(tmp_path, batch="fixed_bytes = 4096\nwrite_ratio = 0.0\noffered_read_bw = 1.5"),
                          capacity=c)
    assert p.batch.target_ops_per_s == pytest.approx(1.5 * 4e9 / 4096)
    assert rate_for("offered_read_bw", 1, c, request_bytes=1000, write_ratio=0.75) == pytest.approx(4e9 / 250)


@pytest.mark.parametrize("batch, message", [
    ("fixed_bytes = 1000\nwrite_ratio = 0.5\noffered_write_bw = 0", "offered_write_bw must be a number in (0"),
    ("fixed_bytes = 1000\nwrite_ratio = 0.5\noffered_write_bw = -1.5", "offered_write_bw must be a number in (0"),
    ("fixed_bytes = 1000\nwrite_ratio = 0.5\noffered_write_bw = 1000", "offered_write_bw must be a number in (0"),
    ("fixed_bytes = 1000\nwrite_ratio = 0.5\noffered_write_bw = \"fast\"", "offered_write_bw must be a number"),
    ("fixed_bytes = 1000\nwrite_ratio = 0.5\noffered_write_bw = 1.5\ntarget_ops_per_s = 10", "give exactly one of"),
    ("fixed_bytes = 1000\nwrite_ratio = 0.0\noffered_write_bw = 1.5", "offers no writes"),
    ("write_ratio = 0.5\noffered_write_bw = 1.5", "needs fixed_bytes"),
    ("fixed_bytes = 1000\noffered_write_bw = 1.5", "needs write_ratio"),
])
def test_bad_factors_give_clear_errors(tmp_path, batch, message):
    with pytest.raises(ValueError, match="batch") as e:
        phases.load_phase(_phase_file(tmp_path, batch=batch), capacity=_cap_dict())
    assert message in str(e.value)


def test_missing_or_malformed_capacity_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="calibrate --capacity"):
        phases.load_phase(5, capacity=str(tmp_path / "none.json"))
    with pytest.raises(ValueError, match="calibrate --capacity"):
        load_capacity("no-such-device")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"device": "x", "device_bandwidth": {"write_bytes_per_s": 1e9}}))
    with pytest.raises(ValueError, match="not a capacity file"):
        phases.load_phase(5, capacity=str(bad))
    bad.write_text(json.dumps(_cap_dict(write=-1)))
    with pytest.raises(ValueError, match="write_bytes_per_s must be a positive number"):
        load_capacity(str(bad))
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        load_capacity(str(bad))
    # Phases paced in the file need no capacity at all.
    assert phases.load_phase(1, capacity=str(tmp_path / "none.json")).batch.target_ops_per_s == 500


def test_default_phase_set_is_used_by_default():
    dp = phases.DEFAULT_PHASES
    assert set(dp) <= set(phases.list_phases()) and {1, 2, 3, 4} <= set(dp)
    assert any(phases.load_phase(n).contended for n in dp) and sum(phases.load_phase(n).contended for n in dp) >= 2
    parser = build_parser()
    for argv in (["calibrate", "--out", "x.toml"], ["collect", "--out", "x.npz"], ["train", "--out", "x.joblib"]):
        assert parser.parse_args(argv).phases == list(dp), argv
    for fn, name in ((calibration.sweep_env, "phases"), (evaluation.evaluate_controllers, "phases"),
                     (evaluation.run_controller, "phases"), (pretrain.collect_transitions, "phases"),
                     (SeqPhaseEnv.__init__, "phases")):
        assert inspect.signature(fn).parameters[name].default == dp, fn
    assert set(dp) <= set(ControlEnv.phases)
    # Every report's run header names the set and how its contended phases were scaled.
    label = runs.phase_set_label("real")
    assert label.startswith("1,2,3,4 (paced in the phase files) + 5,6 (contended, scaled to capacity optane-1dimm")
    assert runs.phase_set_label("real", [1, 3]) == "1,3 (paced in the phase files)"


def test_calibrate_capacity_writes_valid_json(tmp_path, capsys):
    out = tmp_path / "cap.json"
    # Long enough for the client to run on a loaded machine (0.05 s once measured no
    # operation at all, which calibrate rightly refuses to record).
    assert main(["calibrate", "--capacity", "--device", "optane-1dimm", "--capacity-clients", "1",
                 "--capacity-duration", "0.5", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads(out.read_text())
    assert printed == saved
    c = load_capacity(str(out))
    assert c.device == "optane-1dimm" and c.write_bytes_per_s == load_capacity("optane-1dimm").write_bytes_per_s
    assert c.interactive_ops_per_s > 0 and saved["interactive"]["per_clients"][0]["clients"] == 1
    assert saved["cores"] >= 1 and "--capacity-clients 1" in saved["command"]
    # The fresh file scales the contended phases.
    assert phases.load_phase(5, capacity=str(out)).interactive.target_ops_per_s == \
        pytest.approx(phases.load_phase(5).interactive.scaled_by[1] * c.interactive_ops_per_s)


def test_calibrate_capacity_needs_a_modelled_device(capsys):
    assert main(["calibrate", "--capacity", "--device", "none", "--capacity-clients", "1",
                 "--capacity-duration", "0.05"]) == 1
    assert "no model" in capsys.readouterr().err


def test_describe_names_a_shipped_file_by_name_and_another_by_path(tmp_path):
    shipped = load_capacity()
    assert shipped.describe().endswith("(shipped optane-1dimm.json)")
    assert CAPACITY_DIR not in shipped.describe()
    own = tmp_path / "mine.json"
    with open(shipped_capacity_path(), encoding="utf-8") as src:
        own.write_text(src.read())
    assert load_capacity(str(own)).describe().endswith(f"({own})")
