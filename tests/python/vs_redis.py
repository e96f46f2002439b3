"""Talking to `nvmw serve` and redis-server side by side over raw RESP, for the tests that
compare them (test_serve_vs_redis.py, test_serve_vs_redis_random.py): requests as bytes,
replies read as whole frames, a pair of servers of a test's own, and DIFFERENCES, the
replies docs/server.md says differ on purpose, each pinned to nvmw's exact reply."""
import contextlib
import os
import re
import select
import shutil
import socket
import subprocess
import sys

import pytest

import nvmw
from ports import start_failed, with_free_ports

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "server.md")


def cmd(*args) -> bytes:
    """One request as a RESP array of bulk strings."""
    args = [a if isinstance(a, bytes) else a.encode() for a in args]
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def comparable(frame: bytes) -> bytes:
    """A reply as compared: HELLO's server map differs only in the version (documented) and
    the client id, which are masked."""
    return re.sub(rb"(\$7\r\nversion\r\n)\$\d+\r\n[\d.]+\r\n|(\$2\r\nid\r\n):\d+\r\n", rb"\1\2<>", frame)


class Reader:
    """Reads whole RESP2/RESP3 frames off a socket, each as its raw bytes."""

    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, b""

    def _need(self, end: int) -> None:
        while len(self.buf) < end:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError(f"connection closed inside a reply: {self.buf[:200]!r}")
            self.buf += chunk

    def _line_end(self, pos: int) -> int:
        while (end := self.buf.find(b"\r\n", pos)) < 0:
            self._need(len(self.buf) + 1)
        return end

    def _skip(self, pos: int) -> int:
        """The offset just past the frame starting at pos."""
        end = self._line_end(pos)
        kind, head, nxt = self.buf[pos:pos + 1], self.buf[pos + 1:end], end + 2
        assert kind and kind in b"+-:_,#($=!*~>%", f"not a RESP frame: {self.buf[pos:pos + 80]!r}"
        if kind in b"+-:_,#(":
            return nxt
        n = int(head)
        if n < 0 and kind in b"$*":  # RESP2 null
            return nxt
        if kind in b"$=!":
            self._need(nxt + n + 2)
            return nxt + n + 2
        for _ in range(n * (2 if kind == b"%" else 1)):  # an array, set, push or map
            nxt = self._skip(nxt)
        return nxt

    def frame(self) -> bytes:
        end = self._skip(0)
        out, self.buf = self.buf[:end], self.buf[end:]
        return out

    def closed(self) -> bool:
        try:
            return not self.buf and self.sock.recv(1) == b""
        except TimeoutError:
            return False


def start(procs: list, argv: list, ready: bytes) -> "re.Match":
    """Starts a server (appended to procs) and waits for its output to match ready."""
    pythonpath = [os.path.dirname(os.path.dirname(nvmw.__file__)), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PMEM_IS_PMEM_FORCE="1", PYTHONPATH=os.pathsep.join(p for p in pythonpath if p))
    procs.append(proc := subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env))
    text = b""
    while (m := re.search(ready, text)) is None:
        if not select.select([proc.stdout], [], [], 60)[0]:
            pytest.fail(f"{argv[0]} did not start in 60 s: {text.decode(errors='replace')}")
        if not (chunk := os.read(proc.stdout.fileno(), 4096)):  # it stopped
            procs.remove(proc)
            proc.wait()
            proc.stdout.close()
            start_failed(f"{argv[0]} exited at start: {text.decode(errors='replace')}")
        text += chunk
    return m


def start_redis(procs: list, redis_server: str, bind: str, port: int) -> int:
    """start() for redis-server on `port`, which takes --port 0 as "no TCP" and so is given
    a port picked here (AddressInUse when it was taken meanwhile); returns the port."""
    start(procs, [redis_server, "--port", str(port), "--bind", bind, "--save", "", "--appendonly", "no"],
          rb"Ready to accept connections")
    return port


@contextlib.contextmanager
def pair(bind: str = "127.0.0.1", nvmw_args: tuple = ("--engine", "memory")):
    """A redis-server and an nvmw serve of their own, bound to `bind`: yields their ports;
    both are stopped afterwards and must exit with status 0."""
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        pytest.fail("redis-server is not installed: scripts/setup.sh installs it (Debian package redis-server)")
    procs: list = []
    try:
        redis_port = with_free_ports(lambda port: start_redis(procs, redis_server, bind, port), host=bind)
        m = start(procs, [sys.executable, "-m", "nvmw", "serve", "--port", "0", "--bind", bind, *nvmw_args],
                  rb"listening on [\d.]+:(\d+)")
        yield redis_port, int(m.group(1))
    finally:
        stop_all(procs)


def stop_all(procs: list) -> None:
    """Stop the servers a test started; each must exit cleanly."""
    for proc in procs:
        proc.terminate()
        rc = proc.wait(timeout=60)
        proc.stdout.close()
        assert rc == 0, f"{proc.args[0]} exited with {rc}"


# The documented differences: the request, nvmw's exact reply, and the docs' words for it.
DIFFERENCES = {
    "keys nvmw cannot hold": (  # refused whole, no pair written; the DEL leaves Redis as it was
        [cmd("SET", "", "v"), cmd("SET", b"k" * 65537, "v"), cmd("MSET", "ek", "1", "", "2"), cmd("GET", "ek"),
         cmd("DEL", "ek", "", b"k" * 65537)],
        [b"-ERR invalid argument: empty key\r\n",
         b"-ERR invalid argument: key of 65537 bytes exceeds max_key_bytes=65536\r\n",
         b"-ERR invalid argument: empty key\r\n", b"$-1\r\n", b":0\r\n"],
        "an empty key or one over 64 KiB is refused by SET and MSET (Redis stores it)"),
    "set options": ([cmd("SET", "so", "v", "NX", "XX"), cmd("SET", "so", "v", "EX"),
                     cmd("SET", "so", "v", b"xx\x00y"), cmd("GET", "so")],  # Redis reads an option up to a NUL
                    [b"-ERR SET option NX is not supported by nvmw (no expiry, no conditional set)\r\n",
                     b"-ERR SET option EX is not supported by nvmw (no expiry, no conditional set)\r\n",
                     b"-ERR SET option XX is not supported by nvmw (no expiry, no conditional set)\r\n", b"$-1\r\n"],
                    "each of `EX PX EXAT PXAT NX XX KEEPTTL GET` is refused with the nvmw message"),
    "one database": ([cmd("SELECT", "1"), cmd("CONFIG", "GET", "databases")],
                     [b"-ERR DB index is out of range\r\n", b"*2\r\n$9\r\ndatabases\r\n$1\r\n1\r\n"],
                     "`SELECT` of any index but 0 is `-ERR DB index is out of range`"),
    "protocol version": ([cmd("HELLO", "4")], [b"-NOPROTO sorry, this protocol version is not supported\r\n"],
                         "`-NOPROTO sorry, this protocol version is not supported`"),
    "leading zeros": ([b"*01\r\n$04\r\nPING\r\n"], [b"+PONG\r\n"], "a length with leading zeros (`*01`, `$04`)"),
    "command docs": ([cmd("COMMAND", "DOCS", "hello", "set")],
                     [b"*4\r\n$5\r\nhello\r\n*10\r\n$7\r\nsummary\r\n$20\r\nHandshake with Redis\r\n$5\r\nsince\r\n$5\r\n6.0.0\r\n"
                      b"$5\r\ngroup\r\n$10\r\nconnection\r\n$10\r\ncomplexity\r\n$4\r\nO(1)\r\n$9\r\narguments\r\n*1\r\n*8\r\n"
                      b"$4\r\nname\r\n$9\r\narguments\r\n$4\r\ntype\r\n$5\r\nblock\r\n$5\r\nflags\r\n*1\r\n+optional\r\n"
                      b"$9\r\narguments\r\n*3\r\n*4\r\n$4\r\nname\r\n$8\r\nprotover\r\n$4\r\ntype\r\n$7\r\ninteger\r\n"
                      b"*10\r\n$4\r\nname\r\n$17\r\nusername_password\r\n$4\r\ntype\r\n$5\r\nblock\r\n$5\r\ntoken\r\n$4\r\nAUTH\r\n"
                      b"$5\r\nflags\r\n*1\r\n+optional\r\n$9\r\narguments\r\n*2\r\n*4\r\n$4\r\nname\r\n$8\r\nusername\r\n"
                      b"$4\r\ntype\r\n$6\r\nstring\r\n*4\r\n$4\r\nname\r\n$8\r\npassword\r\n$4\r\ntype\r\n$6\r\nstring\r\n"
                      b"*8\r\n$4\r\nname\r\n$10\r\nclientname\r\n$4\r\ntype\r\n$6\r\nstring\r\n$5\r\ntoken\r\n$7\r\nSETNAME\r\n"
                      b"$5\r\nflags\r\n*1\r\n+optional\r\n"
                      b"$3\r\nset\r\n*10\r\n$7\r\nsummary\r\n$29\r\nSet the string value of a key\r\n$5\r\nsince\r\n$5\r\n1.0.0\r\n"
                      b"$5\r\ngroup\r\n$6\r\nstring\r\n$10\r\ncomplexity\r\n$4\r\nO(1)\r\n$9\r\narguments\r\n*2\r\n*6\r\n"
                      b"$4\r\nname\r\n$3\r\nkey\r\n$4\r\ntype\r\n$3\r\nkey\r\n$14\r\nkey_spec_index\r\n:0\r\n"
                      b"*4\r\n$4\r\nname\r\n$5\r\nvalue\r\n$4\r\ntype\r\n$6\r\nstring\r\n"],
                     "`COMMAND DOCS` gives no history and no subcommands, and SET's arguments are the key and the value"),
    "hello setname before an error": ([cmd("HELLO", "3", "SETNAME", "n", "junk"), cmd("CLIENT", "GETNAME")],
                                      [b"-ERR Syntax error in HELLO option 'junk'\r\n", b"$-1\r\n"],
                                      "`HELLO` with `SETNAME` sets the name only when the whole command succeeds"),
    "client setinfo": ([cmd("CLIENT", "SETINFO", "lib-name", "x"), cmd("CLIENT", "SETINFO", "lib-name")],
                       [b"+OK\r\n", b"-ERR wrong number of arguments for 'client|setinfo' command\r\n"],
                       "`CLIENT SETINFO` (Redis 7.2) is answered as Redis 7.2 answers it"),
    "client subcommands nvmw does not have": (
        [cmd("CLIENT", "LIST"), cmd("CLIENT", "KILL", "127.0.0.1:1")],
        [b"-ERR unknown subcommand 'LIST'. Try CLIENT HELP.\r\n", b"-ERR unknown subcommand 'KILL'. Try CLIENT HELP.\r\n"],
        "`CLIENT` subcommands nvmw does not have (`LIST`, `KILL`, ...) are unknown subcommands"),
    "client help": ([cmd("CLIENT", "HELP")],
                    [b"*13\r\n+CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
                     b"+GETNAME\r\n+    Return the name of the current connection.\r\n"
                     b"+ID\r\n+    Return the ID of the current connection.\r\n"
                     b"+SETINFO <option> <value>\r\n+    Set client meta attr. Options are:\r\n"
                     b"+    * LIB-NAME: the client lib name.\r\n+    * LIB-VER: the client lib version.\r\n"
                     b"+SETNAME <name>\r\n+    Assign the name <name> to the current connection.\r\n"
                     b"+HELP\r\n+    Prints this help.\r\n"],
                    "`CLIENT HELP` lists the subcommands nvmw has, in Redis's words"),
    "command entries": ([cmd("COMMAND", "INFO", "client|setname")], [b"*1\r\n$-1\r\n"],
                        "`COMMAND INFO client|setname` is a null, and `COMMAND LIST` names no subcommand"),
    "config set and help": ([cmd("CONFIG", "SET", "save", ""), cmd("CONFIG", "RESETSTAT"), cmd("CONFIG", "HELP")],
                            [b"-ERR CONFIG SET is not supported by nvmw (CONFIG GET only)\r\n",
                             b"-ERR CONFIG RESETSTAT is not supported by nvmw (CONFIG GET only)\r\n",
                             b"*5\r\n+CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
                             b"+GET <pattern>\r\n+    Return parameters matching the glob-like <pattern> and their values.\r\n"
                             b"+HELP\r\n+    Prints this help.\r\n"],
                            "`CONFIG SET`, `RESETSTAT` and `REWRITE` are refused"),
    "unknown commands": ([cmd("FLUSHALL", "x")],
                         [b"-ERR unknown command 'FLUSHALL', with args beginning with: 'x' \r\n"],
                         "Redis answers `FLUSHALL x` with a syntax error"),
}
