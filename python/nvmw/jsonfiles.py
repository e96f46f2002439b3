"""Reading the JSON files the lab writes and reads back (sweeps, capacity measurements,
tuned parameters, oracle tables, simulator parameters). A key given twice in one object
is an error naming the file: `json.load` would keep the last value without a word, and a
hand-edited file would then run on a value nobody meant. Standard library only."""
from __future__ import annotations

import json
import os
from typing import Any


class _Repeated(Exception):
    def __init__(self, keys: list):
        super().__init__(keys)
        self.keys = keys


def _no_repeats(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise _Repeated(twice)
    return dict(pairs)


def load(path: "str | os.PathLike", what: str) -> Any:
    """The JSON document in `path`. ValueError naming the file, and `what` it was meant to
    be ("a sweep file"), for text that is not UTF-8 JSON or repeats a key in one object.
    OSError (a missing or unreadable file) is the caller's to report."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh, object_pairs_hook=_no_repeats)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{os.fspath(path)}: not {what} (not JSON: {e})") from None
    except _Repeated as e:
        raise ValueError(f"{os.fspath(path)}: key{'s' if len(e.keys) > 1 else ''} "
                         f"{', '.join(map(repr, e.keys))} given more than once in one object") from None


__all__ = ["load"]
