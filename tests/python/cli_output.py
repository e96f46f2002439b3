"""Checks of what a command printed, shared by the command-line test modules."""


def one_error_line(capsys, *names: str) -> str:
    """The one line a command wrote to stderr: no traceback, and naming each of `names`."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    for name in names:
        assert name in err, err
    return err
