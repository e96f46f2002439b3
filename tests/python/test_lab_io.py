"""How the lab opens its files. An input that is a FIFO is read as its writer leaves it;
one that is a directory, or JSON or TOML nested past the parser's recursion, ends in one
error naming it, never a traceback; an output file is complete or absent (it is
written beside its path and renamed onto it), whatever stops the writer: Ctrl-C, a full
disk, or another writer of the same path."""
from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys
import time

import pytest

from cli_output import one_error_line as _one_error_line
from cli_output import write_sweep as _sweep
from nvmw.cli import main
from nvmw.control.sla import SLASpec
from nvmw.lab.calibration import save_oracle, save_sweep
from nvmw.rl.simparams import save_params

HANG_S = 30.0  # a command still waiting after this never returns (each one asked for takes about a second)


def _cli(argv: list, *, file_size_limit: int | None = None, timeout: float = HANG_S) -> subprocess.CompletedProcess:
    """`nvmw ARGV` in a child; with `file_size_limit` (bytes) every write past it fails with
    EFBIG, as on a full disk (SIGXFSZ ignored, as a shell's `trap '' XFSZ` does)."""
    code = "import sys; from nvmw import cli; sys.exit(cli.main(sys.argv[2:]))"
    if file_size_limit is not None:
        code = ("import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY)); " + code)
    return subprocess.run([sys.executable, "-c", "import sys; " + code, str(file_size_limit or 0), *argv],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _one_line(proc: subprocess.CompletedProcess, *names: str) -> str:
    err = proc.stderr.strip()
    assert proc.returncode in (1, 2), (proc.returncode, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for name in names:
        assert name in err, err
    return err


# --- inputs that are not regular files -------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["trace", "stats", "{f}"], "empty file"),                                  # the core's trace reader
    (["device", "show", "{f}"], "missing key 'name'"),                          # the core's profile reader
    (["sim", "check", "{f}"], "not a sweep file"),                              # JSON
    (["run-phase", "{f}"], "missing 'number'"),                                 # TOML
    (["tune", "{f}", "--out", "{f}.json"], "cannot read transitions"),          # .npz
    (["sim", "run", "--windows", "1", "--controller", "q-learning:{f}"], "not an nvmw agent file"),  # joblib
])
def test_a_fifo_is_read_as_its_writer_leaves_it(tmp_path, argv, words):
    # A writer that comes after the reader and closes without writing: the command reads
    # an empty file and says so in one line. The Python readers wait in open() for the
    # writer, as open() does (Ctrl-C ends that wait); the core's readers do not wait (a
    # read there could not be interrupted), so they may find the FIFO empty before it comes.
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from nvmw import cli; sys.exit(cli.main(sys.argv[1:]))",
                             *[a.format(f=fifo) for a in argv]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + HANG_S
        while proc.poll() is None and time.monotonic() < deadline:
            try:  # ENXIO until the reader has the FIFO open
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                break
            except OSError:
                time.sleep(0.02)
        out, err = proc.communicate(timeout=HANG_S)
    finally:
        proc.kill()
    _one_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), fifo, words)


def test_a_fifo_with_a_writer_is_read(tmp_path):
    # Process substitution (`nvmw trace stats <(zcat t.csv.gz)`) still works.
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    trace = "time_ms,op,key,bytes\n0.000,read,a,10\n1.000,write,b,20\n"
    writer = subprocess.Popen([sys.executable, "-c", f"open({fifo!r}, 'w').write({trace!r})"])
    try:
        proc = _cli(["trace", "stats", fifo, "--format", "native", "--json"])
    finally:
        writer.wait(timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == 2


@pytest.mark.parametrize("argv", [["sim", "check", "{d}"], ["run-phase", "{d}"], ["trace", "stats", "{d}"],
                                  ["device", "show", "{d}"], ["tune", "{d}", "--out", "{d}/t.json"]])
def test_a_directory_given_as_an_input_file_is_named(tmp_path, capsys, argv):
    # Was: "[Errno 21] Is a directory" without the path, or "read error".
    d = str(tmp_path)
    assert main([a.format(d=d) for a in argv]) in (1, 2)
    assert "is a directory" in _one_error_line(capsys, d).lower()


@pytest.mark.parametrize("name, text, argv", [
    ("sweep.json", "[" * 100_000, ["sim", "check", "{p}"]),
    ("phase.toml", "a = " + "[" * 100_000, ["run-phase", "{p}"]),
    ("sla.toml", "a = " + "[" * 100_000, ["run-phase", "1", "--sla", "{p}", "--duration", "0.1"]),
])
def test_a_file_nested_past_the_parsers_recursion_is_named(tmp_path, capsys, name, text, argv):
    # Was: a RecursionError traceback from json or tomllib.
    p = tmp_path / name
    p.write_text(text)
    assert main([a.format(p=p) for a in argv]) in (1, 2)
    _one_error_line(capsys, str(p), "nested too deeply")


# --- outputs complete or absent -------------------------------------------------------

def test_a_full_disk_leaves_no_half_written_output(tmp_path):
    # Was: the first 100 bytes of the SLA spec stayed at --out (a later command read its
    # first goals and nothing else), beside the one-line error.
    sweep = _sweep(tmp_path)
    spec = tmp_path / "spec.toml"
    spec.write_text("previous")
    proc = _cli(["calibrate", "--env", "synthetic", "--from-sweep", sweep, "--confirm-windows", "0",
                 "--out", str(spec)], file_size_limit=100)
    _one_line(proc, "File too large", str(spec))
    assert spec.read_text() == "previous"
    assert sorted(os.listdir(tmp_path)) == ["spec.toml", "sweep.json"]  # no temporary left


def _interrupt_json_dump(monkeypatch):
    """json.dump writes its first chunk, then Ctrl-C arrives."""
    def dump(obj, fh, **kwargs):
        fh.write(json.dumps(obj, **kwargs)[:10])
        fh.flush()
        raise KeyboardInterrupt
    monkeypatch.setattr(json, "dump", dump)


@pytest.mark.parametrize("write", [
    lambda p: save_sweep(p, [{"phase": 1}], {"window_s": 0.1}),
    lambda p: save_oracle(p, {"oracle": {"1": [2, 1]}}, "spec", {}),
    lambda p: save_params({"params": {"jitter": 0.5}}, p),
    lambda p: SLASpec().save(p),
])
def test_ctrl_c_while_an_output_is_written_keeps_the_previous_file(tmp_path, monkeypatch, write):
    # Was: the file was truncated to what was written before the interrupt.
    out = tmp_path / "out.json"
    out.write_text("previous")
    _interrupt_json_dump(monkeypatch)
    monkeypatch.setattr(SLASpec, "to_toml", lambda self: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        write(str(out))
    assert out.read_text() == "previous"
    assert os.listdir(tmp_path) == ["out.json"]


def test_an_output_path_is_written_as_named(tmp_path, capsys):
    # Was: numpy added ".npz" to a name without it: the transitions went to t.npz while
    # the command reported t, which `nvmw tune t` could not find.
    from nvmw.rl.pretrain import load_transitions

    out = tmp_path / "t"
    assert main(["collect", "--env", "synthetic", "--steps", "3", "--episodes", "1", "--phases", "1",
                 "--out", str(out)]) == 0
    assert os.listdir(tmp_path) == ["t"]
    assert len(load_transitions(str(out))["actions"]) == 3


@pytest.mark.parametrize("kind", ["trace", "policy"])
def test_a_writer_leaves_another_writers_temporary_alone(tmp_path, kind):
    # Was: PATH.tmp was every writer's temporary: a second run writing the same output
    # truncated the first one's and renamed whichever content it held onto PATH.
    if kind == "trace":
        out = tmp_path / "t.csv"
        other = tmp_path / "t.csv.tmp"
        other.write_text("another writer's trace")
        assert main(["trace", "synth", "svd", "--rows", "20", "-o", str(out)]) == 0
        assert out.read_text().startswith("time_ms,op,key,bytes\n")
    else:
        from nvmw.rl.policy import GreedyPolicy

        out = tmp_path / "a.policy.json"
        other = tmp_path / "a.policy.json.tmp"
        other.write_text("another writer's policy")
        GreedyPolicy("none", [{"mean": [0.0], "scale": [1.0], "powers": [[1]], "coef": [1.0],
                               "intercept": 0.0}]).save(out, "0" * 64)
        assert json.loads(out.read_text())["agent_sha256"] == "0" * 64
    assert other.read_text().startswith("another writer's")


@pytest.mark.parametrize("kind", ["trace", "params"])
def test_an_output_that_is_not_a_regular_file_is_written_into_not_replaced(tmp_path, kind):
    # Was (trace synth): the trace was renamed onto the path, replacing the FIFO itself,
    # and as root a device node too (`-o /dev/null` replaced /dev/null with a trace).
    fifo = str(tmp_path / "out")
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there: the writer's open goes on
    try:
        if kind == "trace":
            assert main(["trace", "synth", "svd", "--rows", "20", "-o", fifo]) == 0
        else:
            save_params({"params": {"jitter": 0.5}}, fifo)
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)
        data = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert data.startswith(b"time_ms,op,key,bytes\n" if kind == "trace" else b"{")
    assert os.listdir(tmp_path) == ["out"]


@pytest.mark.parametrize("argv, words", [
    (["sim", "fit", "{sweep}", "--out", "{sweep}", "--windows", "1", "--max-evals", "1"], "--out {sweep} is also SWEEP"),
    (["calibrate", "--env", "synthetic", "--from-sweep", "{sweep}", "--confirm-windows", "0", "--out", "{sweep}"],
     "--out {sweep} is also --from-sweep"),
    (["calibrate", "--env", "synthetic", "--from-sweep", "{sweep}", "--confirm-windows", "0", "--out", "{d}/s.toml",
      "--oracle-out", "{d}/s.toml"], "--oracle-out {d}/s.toml is also --out"),
    (["tune", "{sweep}", "--out", "{sweep}"], "--out {sweep} is also TRANSITIONS"),
])
def test_an_output_naming_an_input_or_another_output_is_refused(tmp_path, capsys, argv, words):
    # Was: the run replaced the file it had read (a sweep: minutes of measurement), or its
    # second output replaced its first, without a word.
    sweep = _sweep(tmp_path)
    before = pathlib.Path(sweep).read_text()
    fill = {"sweep": sweep, "d": str(tmp_path)}
    assert main([a.format(**fill) for a in argv]) == 1
    _one_error_line(capsys, words.format(**fill))
    assert pathlib.Path(sweep).read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["sweep.json"]


def test_calibrate_may_write_the_sweep_it_read_back_to_it(tmp_path):
    sweep = _sweep(tmp_path)
    assert main(["calibrate", "--env", "synthetic", "--from-sweep", sweep, "--sweep-out", sweep,
                 "--confirm-windows", "0", "--out", str(tmp_path / "s.toml")]) == 0
    assert json.loads(pathlib.Path(sweep).read_text())["rows"]


def test_a_file_replaced_keeps_its_permission_bits(tmp_path):
    out = tmp_path / "params.json"
    out.write_text("previous")
    out.chmod(0o600)
    save_params({"params": {"jitter": 0.5}}, str(out))
    assert json.loads(out.read_text())["params"] == {"jitter": 0.5}
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


@pytest.mark.parametrize("kind", ["trace", "params"])
def test_an_output_that_is_a_link_to_a_file_is_written_through(tmp_path, kind):
    # Was (trace synth): the link was replaced by a new file; the file it named kept the old trace.
    real = tmp_path / "real"
    real.write_text("previous")
    link = tmp_path / "link"
    link.symlink_to(real)
    if kind == "trace":
        assert main(["trace", "synth", "svd", "--rows", "20", "-o", str(link)]) == 0
    else:
        save_params({"params": {"jitter": 0.5}}, str(link))
    assert link.is_symlink()
    assert real.read_text() != "previous"
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


@pytest.mark.parametrize("argv", [["trace", "stats", "{f}"], ["replay", "{f}"], ["device", "show", "{f}"],
                                  ["trace", "synth", "svd", "--rows", "5", "-o", "{f}.out"]])
def test_a_file_name_that_is_not_utf8_is_named_not_a_traceback(tmp_path, capsys, argv):
    # Linux file names are bytes; Python carries the undecodable ones as surrogates,
    # which the core's readers and writers refused with the binding's TypeError.
    name = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(b"\xff.csv"))
    with open(name, "w") as fh:
        fh.write("time_ms,op,key,bytes\n0.000,read,a,10\n")
    assert main([a.format(f=name) for a in argv]) in (1, 2)
    _one_error_line(capsys, "the file name is not UTF-8", "\\xff.csv")


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_an_output_through_a_descriptor_redirected_to_a_file_is_written_in_place(tmp_path, name):
    # Was: the output was written beside the shell's file and renamed onto it, which left
    # the process's stdout on the old, unlinked file: what it printed before and after
    # was lost.
    script = ("import sys\nfrom nvmw.jsonfiles import open_output\nprint('printed before')\n"
              f"with open_output({name!r}) as fh:\n    fh.write('the output\\n')\n"
              "print('printed after', flush=True)\n")
    out = tmp_path / "out.txt"
    with open(out, "w") as fh:
        subprocess.run([sys.executable, "-c", script], stdout=fh, check=True, env=dict(os.environ))
    assert out.read_text() == "printed before\nthe output\nprinted after\n"
    assert os.listdir(tmp_path) == ["out.txt"]
