"""A benchmark's report: printed as JSON on stdout and, given an output path, written there
whole. The file is written beside its final name and renamed onto it, so an interrupted
run leaves the previous results (or none), never half a JSON document."""
from __future__ import annotations

import json
import os


def emit(report: dict, out: "str | None" = None, *, indent: int = 2, sort_keys: bool = False,
         echo: bool = True) -> None:
    """Print `report` as JSON (unless `echo` is false) and write it to `out` if given."""
    text = json.dumps(report, indent=indent, sort_keys=sort_keys)
    if echo:
        print(text)
    if out:
        tmp = f"{out}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
