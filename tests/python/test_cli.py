"""The `nvmw` CLI: every subcommand (and sub-subcommand) answers --help."""
import argparse

import pytest

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
