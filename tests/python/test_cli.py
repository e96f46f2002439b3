"""The `nvmw` CLI: every subcommand (and sub-subcommand) answers --help; a command line
imports only its own command's module."""
import argparse
import os
import pkgutil
import socket
import subprocess
import sys

import pytest

from nvmw import commands

from nvmw.cli import build_parser, main


def _subcommands(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + (name,)
                yield from _subcommands(sub, prefix + (name,))


def test_every_subcommand_has_help(capsys):
    cmds = list(_subcommands(build_parser()))
    assert ("bench",) in cmds and ("bench", "overhead") in cmds and ("bench", "engine") in cmds
    for cmd in cmds:
        with pytest.raises(SystemExit) as e:
            main([*cmd, "--help"])
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: nvmw " + " ".join(cmd))


def _summaries(parser) -> dict:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {a.dest: a.help for a in sub._choices_actions}


def test_each_command_module_registers_the_command_named_after_it_with_its_summary():
    # What lets `nvmw NAME ...` import nvmw/commands/NAME.py alone, and `nvmw --help` none.
    modules = {i.name for i in pkgutil.iter_modules(commands.__path__) if not i.name.startswith("_")}
    assert set(commands.SUMMARIES) == {name.replace("_", "-") for name in modules}
    assert _summaries(build_parser()) == commands.SUMMARIES
    for name in commands.SUMMARIES:
        assert _summaries(build_parser(name)) == {name: commands.SUMMARIES[name]}
    for other in ("run_phase", "frobnicate", "", "--help"):  # not a command: the list, nothing imported
        assert _summaries(build_parser(other)) == commands.SUMMARIES


def test_help_lists_every_command_with_its_summary(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for name, summary in commands.SUMMARIES.items():
        assert f"{name} {' '.join(summary.split())}" in out


HEAVY = ("sklearn", "gymnasium", "scipy", "joblib", "matplotlib")


def _modules_after(*argv: str) -> tuple:
    """Run `nvmw ARGV` in a fresh interpreter; (its exit code, which heavy modules it imported)."""
    code = ("import sys\nfrom nvmw.cli import main\ntry:\n    rc = main(sys.argv[1:])\n"
            "except SystemExit as e:\n    rc = e.code\n"
            f"print('RESULT', rc, *sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)
    result = [line for line in proc.stderr.splitlines() if line.startswith("RESULT ")]
    assert result, proc.stderr
    words = result[-1].split()[1:]
    return int(words[0]), words[1:]


@pytest.mark.parametrize("argv", [("--help",), ("serve", "--help"), ("run-phase", "--help"), ("ycsb", "--help"),
                                  ("replay", "--help"), ("check", "--help"), ("trace", "--help"),
                                  ("bench", "overhead", "--help"), ("sweep", "--help")])
def test_store_and_service_commands_start_without_the_rl_libraries(argv):
    assert _modules_after(*argv) == (0, [])


def test_a_mistyped_command_is_answered_without_importing_the_commands():
    assert _modules_after("frobnicate") == (2, [])


def test_serve_with_the_agent_acts_from_its_policy_file_without_scikit_learn():
    # The port is taken, so the server fails to listen after its controller is built.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, heavy = _modules_after("serve", "--engine", "memory", "--device", "optane-1dimm",
                                   "--controller", "q-learning", "--port", str(port))
    assert rc != 0 and heavy == []


def test_rl_commands_still_parse_with_their_libraries():
    rc, heavy = _modules_after("train", "--help")
    assert rc == 0 and "sklearn" in heavy


def test_unknown_command_is_an_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_expected_errors_are_one_line_not_a_traceback(capsys, tmp_path):
    missing = tmp_path / "nope.csv"
    code = main(["trace", "stats", str(missing), "--format", "azure", "--json"])
    assert code != 0
    err = capsys.readouterr().err
    assert str(missing) in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_pool_errors_are_one_line(capsys, tmp_path):
    foreign = tmp_path / "foreign.pool"
    foreign.write_text("not a pool\n" * 100)
    code = main(["ycsb", "--engine", "pmem", "--path", str(foreign), "--duration", "0.1"])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err


def test_a_missing_file_is_one_plain_error_line(tmp_path, capsys):
    # NotFoundError is also a KeyError, whose str() would wrap the message in quotes.
    missing = tmp_path / "nothing.pool"
    assert main(["check", str(missing)]) == 8  # not checked (1 is a damaged pool)
    err = capsys.readouterr().err
    assert err == f"nvmw check: error: {missing}: pool file does not exist\n"
    assert main(["device", "show", "no-such-profile"]) == 1
    assert capsys.readouterr().err.startswith("nvmw device show: error: no device profile 'no-such-profile' in ")
