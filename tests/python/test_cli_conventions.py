"""What every `nvmw` command does alike: an error is one line `nvmw CMD: error: MESSAGE`
(exit 1; 2 for a usage error), a missing input file is named with the system's words and
no "[Errno N]", a reader of stdout going away ends the command quietly, every option has
a help line, and a count is printed with the noun's right number."""
import argparse
import os
import subprocess
import sys

import pytest

import nvmw
from cli_output import one_error_line
from nvmw.cli import _call, build_parser, main


def _options_without_help(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options_without_help(sub, prefix + (name,))
        elif isinstance(action, argparse._HelpAction) or action.help is argparse.SUPPRESS:
            continue  # -h, and the old spellings kept working but not shown
        elif not (action.help or "").strip():
            yield " ".join(prefix) + " " + "/".join(action.option_strings or [action.dest])


def test_every_option_of_every_command_has_a_help_line():
    # Was: about 40 options printed nothing in --help (ycsb --read-proportion, train
    # --gamma, device bench's options, most --seeds).
    assert list(_options_without_help(build_parser())) == []


# --- one error line ----------------------------------------------------------------------

def _trace(tmp_path) -> str:
    p = tmp_path / "t.csv"
    p.write_text("time_ms,op,key,bytes\n" + "".join(f"{i},read,key{i % 5},100\n" for i in range(20)))
    return str(p)


@pytest.mark.parametrize("argv, start", [
    (["ycsb", "--ops", "10", "--records", "10", "--controller", "aimd"],
     "nvmw ycsb: error: this command runs one static configuration: "),
    (["replay", "{trace}", "--format", "native", "--controller", "aimd"],
     "nvmw replay: error: this command runs one static configuration: "),
    (["replay", "{missing}"], "nvmw replay: error: {missing}: "),
    (["sweep", "--grid-i", "40"], "nvmw sweep: error: grid_i values must be in [1, 32]"),
    (["trace", "stats", "{missing}"], "nvmw trace stats: error: {missing}: "),
    (["trace", "synth", "azure", "--rows", "1", "-o", ""], "nvmw trace synth: error: "),
    (["run-phase", "1", "--controller", "q-learning:{missing}"], "nvmw run-phase: error: no trained agent at "),
    (["check", "{trace}"], "nvmw check: error: "),
])
def test_a_failing_command_prints_one_common_error_line(tmp_path, capsys, argv, start):
    # Was: ycsb, sweep, replay, run-phase, trace and an unreadable pool in check printed
    # `nvmw CMD: MESSAGE`, without "error:", and some exited with 2.
    names = {"trace": _trace(tmp_path), "missing": str(tmp_path / "missing.csv")}
    argv = [word.format(**names) for word in argv]
    assert main(argv) == (8 if argv[0] == "check" else 1)  # check: 8, not checked (1 is damage)
    assert one_error_line(capsys).startswith(start.format(**names))


@pytest.mark.parametrize("argv, line", [
    (["calibrate"], "nvmw calibrate: error: --out is required (the SLA spec to write)"),
    (["calibrate", "--out", "{tmp}/spec.toml", "--no-control-windows", "3"],
     "nvmw calibrate: error: --no-control-windows needs --no-control-out"),
    (["replay", "{tmp}/t.csv", "--loop"],
     "nvmw replay: error: --loop needs --duration (a replay that starts over ends only at it)"),
])
def test_options_refused_together_are_usage_errors_in_the_common_form(tmp_path, capsys, argv, line):
    _trace(tmp_path)
    assert main([word.format(tmp=tmp_path) for word in argv]) == 2
    assert one_error_line(capsys) == line.format(tmp=tmp_path)


# --- missing files -----------------------------------------------------------------------

def test_a_missing_input_file_is_named_without_errno(tmp_path, capsys):
    # Was: "nvmw sim: error: [Errno 2] No such file or directory: '.../missing.json'" and
    # "nvmw run-phase: [Errno 2] ...".
    missing = str(tmp_path / "missing.json")
    assert main(["sim", "check", missing]) == 1
    assert one_error_line(capsys) == f"nvmw sim check: error: {missing}: No such file or directory"
    missing = str(tmp_path / "missing.toml")
    assert main(["run-phase", missing]) == 1
    assert one_error_line(capsys) == f"nvmw run-phase: error: {missing}: No such file or directory"


def test_a_missing_file_given_with_an_option_is_named_with_the_option(tmp_path, capsys):
    missing = str(tmp_path / "sweep.json")
    assert main(["calibrate", "--from-sweep", missing, "--out", str(tmp_path / "spec.toml")]) == 1
    assert one_error_line(capsys) == f"nvmw calibrate: error: --from-sweep {missing}: No such file or directory"


def test_an_os_error_names_the_option_its_file_came_from(capsys):
    def fails():
        raise FileNotFoundError(2, "No such file or directory", "p.json")

    assert _call(fails, "sim check", {"p.json": "--params"}) == 1
    assert capsys.readouterr().err == "nvmw sim check: error: --params p.json: No such file or directory\n"
    assert _call(fails, "sim check", {}) == 1
    assert capsys.readouterr().err == "nvmw sim check: error: p.json: No such file or directory\n"


def test_an_os_error_about_a_file_descriptor_names_its_number(capsys):
    def fails():
        os.stat(2**30)  # no such descriptor: the error's filename is the number

    assert _call(fails, "device show", {}) == 1
    assert capsys.readouterr().err == f"nvmw device show: error: {2**30}: Bad file descriptor\n"


def test_a_broken_pipe_that_is_not_stdout_is_an_error_line(capsys):
    # A client's socket closing under a command is the command's failure: said, not silenced.
    def fails():
        raise BrokenPipeError(32, "Broken pipe")

    assert _call(fails, "serve") == 1
    assert capsys.readouterr().err == "nvmw serve: error: Broken pipe\n"


# --- stdout's reader gone ----------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["device", "list"],
    ["--help"],
    ["ycsb", "--help"],
    ["sim", "run", "--windows", "3"],
    ["trace", "synth", "azure", "--rows", "100", "-o", "/dev/stdout"],
    ["run-phase", "1", "--duration", "0.1", "--window", "0.1", "--engine", "memory", "--device", "none"],
])
def test_a_command_whose_stdout_reader_is_gone_stops_quietly(argv):
    # Was: "nvmw run-phase: [Errno 32] Broken pipe", or "Exception ignored ... BrokenPipeError"
    # when Python flushed stdout at exit. The read end is closed before the command starts.
    read, write = os.pipe()
    os.close(read)
    try:
        r = subprocess.run([sys.executable, "-m", "nvmw", *argv], stdout=write, stderr=subprocess.PIPE,
                           text=True, timeout=120, env=dict(os.environ))
    finally:
        os.close(write)
    assert (r.returncode, r.stderr) == (141, "")


# --- counts ------------------------------------------------------------------------------

def test_check_counts_one_entry_in_the_singular(shm_dir, capsys):
    # Was: "1 intact entries" and "salvaged 1 entries".
    pool = os.path.join(shm_dir, "one.pool")
    eng = nvmw.open_engine("pmem", pool, pool_size=16 << 20)
    eng.put(b"key", b"value")
    del eng  # closes the pool
    out_pool = os.path.join(shm_dir, "salvaged.pool")
    assert main(["check", pool, "--salvage", out_pool]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith(f"{pool}: ok: format ")
    assert first.endswith(", 1 intact entry, 0 damaged entries, 0 damaged links, 0 unreachable entries")
    assert out.splitlines()[-1] == f"salvaged 1 entry into {out_pool}"
