"""Reading the JSON files the lab writes and reads back (sweeps, capacity measurements,
tuned parameters, oracle tables, simulator parameters). A key given twice in one object
is an error naming the file: `json.load` would keep the last value without a word, and a
hand-edited file would then run on a value nobody meant. Standard library only.

Also the two ways every lab file is opened: `open_input` for the files a command reads
(a directory is refused naming it), and `replacing` / `open_output` for the files it writes
(written beside the target and renamed onto it, so Ctrl-C, a full disk or a second run
writing the same file never leaves half a file that a later command misreads); plots go
the same way through `save_figure`."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
from typing import IO, Any, Iterator


class _IsADirectory(IsADirectoryError):
    """IsADirectoryError naming the path first, as the lab's other errors do."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def open_input(path: "str | os.PathLike", mode: str = "r", **kwargs: Any) -> IO:
    """`open(path, mode)` for reading a lab input file; a directory is IsADirectoryError
    naming the path. A FIFO is read as `open` reads it: the open waits for its writer
    (`--sla <(make-spec)`, or a writer that starts later), and Ctrl-C ends the wait."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise _IsADirectory(errno.EISDIR, "is a directory, not a file", os.fspath(path))
        return open(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def _fileno(stream: Any) -> "int | None":
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # closed, or not backed by a descriptor
        return None


def _own_descriptor(path: "str | os.PathLike") -> "int | None":
    """The descriptor of this process that `path` reaches its file through (/dev/stdout,
    /dev/fd/N, /proc/self/fd/N, or a link to one of them), or None."""
    p = os.path.abspath(os.fsdecode(path))
    for _ in range(40):  # the kernel's own limit on links followed
        m = re.fullmatch(r"/(?:proc/(self|\d+)|dev)/fd/(\d+)", p)
        if m:
            return int(m.group(2)) if m.group(1) in (None, "self", str(os.getpid())) else None
        try:
            target = os.readlink(p)
        except OSError:  # not a link (or gone): the end of the chain
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), target))
    return None


@contextlib.contextmanager
def replacing(path: "str | os.PathLike") -> Iterator[str]:
    """A temporary path beside `path` (same directory and extension) to write instead of
    it: renamed onto `path` when the block ends, removed when it raises (Ctrl-C, a full
    disk, a failed writer). A symbolic link at `path` is written through; what is there and
    not a regular file (a device such as /dev/stdout, a FIFO) is `path` itself, written in
    place: a rename would replace the node. A file behind one of this process's descriptors
    (/dev/stdout redirected to a file) is written through that descriptor once the block
    ends. A file replaced keeps its permission bits."""
    try:
        mode: "int | None" = os.stat(path).st_mode
    except FileNotFoundError:  # nothing there yet (or a link to nothing: its target is made)
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        yield os.fspath(path)
        return
    fd = _own_descriptor(path) if mode is not None else None
    if fd is not None:
        # A regular file behind one of this process's descriptors (stdout redirected to a
        # file): renaming onto it would leave the descriptor on the old, unlinked file, and
        # opening it again would write from its start over what the descriptor wrote. The
        # output is made in a temporary file and then written through the descriptor, at
        # its position, after what the process printed there before.
        handle, tmp = tempfile.mkstemp(prefix="nvmw-out-", suffix=os.path.splitext(os.fsdecode(path))[1])
        os.close(handle)
        try:
            yield tmp
            for stream in (sys.stdout, sys.stderr):
                if stream is not None and _fileno(stream) == fd:
                    stream.flush()
            with open(tmp, "rb") as src, os.fdopen(os.dup(fd), "wb") as dst:
                shutil.copyfileobj(src, dst)
        finally:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        return
    target = os.path.realpath(os.fspath(path))
    directory, base = os.path.split(target)
    tmp = os.path.join(directory, f".{base}.{os.getpid()}-{secrets.token_hex(4)}.tmp{os.path.splitext(base)[1]}")
    try:
        yield tmp
        if mode is not None:
            os.chmod(tmp, stat.S_IMODE(mode))
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if isinstance(e, OSError) and e.errno is not None and e.filename in (None, tmp):
            # Named by the path asked for, not the temporary (a full disk's EFBIG named neither).
            raise OSError(e.errno, e.strerror, os.fspath(path)) from None
        raise


@contextlib.contextmanager
def open_output(path: "str | os.PathLike", mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """`open(path, mode)` for writing a whole output file through `replacing`."""
    with replacing(path) as tmp:
        with open(tmp, mode, **kwargs) as fh:
            yield fh


def save_figure(fig: Any, path: "str | os.PathLike", **kwargs: Any) -> None:
    """`fig.savefig(path, **kwargs)` through `open_output`: the plot at `path` is whole, or
    what was there before is left as it was; a device or a FIFO is written in place. The
    format is the extension of `path` (matplotlib's default, PNG, without one) and the file
    is written as named: savefig alone adds ".png" to a name without an extension (the
    command then reported a file it had not written), and opens a path for reading back,
    which a pipe refuses."""
    fmt = kwargs.pop("format", None) or os.path.splitext(os.fspath(path))[1][1:] or fig.canvas.get_default_filetype()
    with open_output(path, "wb") as fh:
        fig.savefig(fh, format=fmt, **kwargs)


def remove_stale(directory: "str | os.PathLike", owned: "list[str] | tuple[str, ...]",
                 written: "list[str] | tuple[str, ...]") -> list:
    """Remove from `directory` the files a command owns there (`owned`, names) that this
    run did not write (`written`): a previous run's eval.png or summary.json left beside
    this run's other files would read as this run's. Other names, and a directory under an
    owned name, are left alone. Returns the names removed, in `owned` order."""
    removed = []
    for name in owned:
        if name in written:
            continue
        path = os.path.join(directory, name)
        try:
            if stat.S_ISDIR(os.stat(path, follow_symlinks=False).st_mode):
                continue
            os.remove(path)
        except FileNotFoundError:
            continue
        removed.append(name)
    return removed


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
        with open_input(path, encoding="utf-8") as fh:
            return json.load(fh, object_pairs_hook=_no_repeats)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{os.fspath(path)}: not {what} (not JSON: {e})") from None
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise ValueError(f"{os.fspath(path)}: not {what} (JSON nested too deeply)") from None
    except _Repeated as e:
        raise ValueError(f"{os.fspath(path)}: key{'s' if len(e.keys) > 1 else ''} "
                         f"{', '.join(map(repr, e.keys))} given more than once in one object") from None


__all__ = ["load", "open_input", "open_output", "remove_stale", "replacing", "save_figure"]
