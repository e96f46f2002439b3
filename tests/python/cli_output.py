"""Checks of what a command printed, and small input files, shared by the command-line
test modules."""
import json


def one_error_line(capsys, *names: str) -> str:
    """The one line a command wrote to stderr: no traceback, and naming each of `names`."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    for name in names:
        assert name in err, err
    return err


def write_sweep(directory) -> str:
    """A small sweep report (phases 1 and 2, I1/I2 with B1, three windows each) in
    `directory`; its path."""
    rows = [{"phase": ph, "interactive_threads": i, "batch_threads": 1, "p99_us": 100.0 + 10 * i + k,
             "throughput": 4000.0 - k} for ph in (1, 2) for i in (1, 2) for k in range(3)]
    p = directory / "sweep.json"
    p.write_text(json.dumps({"rows": rows, "run": {"window_s": 0.1, "cores": 2, "device": "optane-1dimm"}}))
    return str(p)
