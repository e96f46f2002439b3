"""`nvmw serve` against redis-server 7.0.15, reply for reply: both get the same raw RESP bytes
over fresh connections, and for every case of CORPUS the replies must be byte-identical
(string commands and their argument errors, binary and empty keys and values, 1 MB values,
the connection commands, RESP3 nulls, inline and pipelined requests, QUIT, protocol errors).
Where the replies differ on purpose (the list in docs/server.md, "the replies differ only in
these"), DIFFERENCES (vs_redis.py) pins nvmw's exact reply, checks that Redis's is another,
and that the docs still describe it: neither the server nor the list can drift without a
failing test.
Protected mode is compared too, with a client of this host's own address on an interface
other than loopback.

Replies are read by parsing RESP frames, never by waiting. Keys are named after their case,
and every write either server accepts is accepted by the other, so the cases can run in any
order (DBSIZE included). redis-server is installed by scripts/setup.sh; a missing one fails."""
import os
import re
import shutil
import socket
import tempfile

import pytest

from ports import with_free_ports
from vs_redis import DIFFERENCES, DOCS, Reader, cmd, comparable, pair, start_redis, stop_all

CLOSED = object()  # a step: the server closes the connection here
MB = bytes(range(256)) * 4096  # 1 MiB holding every byte value, NUL and CR LF included


def pipe(*requests: bytes) -> tuple:
    """Several requests sent in one write, then their replies read."""
    return b"".join(requests), len(requests)


def exchange(port: int, steps: list) -> list:
    """Opens a fresh connection, sends each step in turn and reads its replies: a step is one
    request (one reply), a pipe() (several), or CLOSED (the server must close the connection)."""
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        r = Reader(s)
        for step in steps:
            if step is CLOSED:
                out.append(b"<closed>" if r.closed() else b"<open>")
                continue
            payload, n = step if isinstance(step, tuple) else (step, 1)
            s.sendall(payload)
            out.extend(r.frame() for _ in range(n))
    return [comparable(f) for f in out]


@pytest.fixture(scope="module")
def ports():
    """(redis-server's port, nvmw serve's port): nvmw on a 64 MiB pmem pool on /dev/shm."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="nvmw-test-", dir=base) as d:
        with pair(nvmw_args=("--engine", "pmem", "--path", os.path.join(d, "t.pool"), "--pool-mb", "64")) as ports_:
            yield ports_

CORPUS = {
    "set get": [cmd("SET", "sg", "v"), cmd("GET", "sg"), cmd("SET", "sg", "w"), cmd("GET", "sg"), cmd("GET", "sg?")],
    "names in any case": [cmd("set", "nc", "v"), cmd("gEt", "nc"), cmd("Del", "nc"), cmd("exists", "nc")],
    "del exists": [cmd("MSET", "de1", "1", "de2", "2"), cmd("EXISTS", "de1", "de1", "de2", "de3"),
                   cmd("DEL", "de1", "de2", "de3"), cmd("DEL", "de1"), cmd("EXISTS", "de1", "de2"),
                   cmd("SET", "de1", "v"), cmd("DEL", "de1", "de1")],
    "mset mget": [cmd("MSET", "mm1", "a", "mm2", "", "mm1", "b"), cmd("MGET", "mm1", "mm?", "mm2"),
                  cmd("MGET", "mm?")],
    "wrong arity": [cmd("GET"), cmd("GET", "a", "b"), cmd("SET", "a"), cmd("DEL"), cmd("EXISTS"), cmd("MGET"),
                    cmd("MSET"), cmd("MSET", "a"), cmd("MSET", "a", "1", "b"), cmd("PING", "a", "b"), cmd("ECHO"),
                    cmd("ECHO", "a", "b"), cmd("SELECT"), cmd("DBSIZE", "x")],
    "set syntax error": [cmd("SET", "ss", "v", "junk"), cmd("GET", "ss")],
    "unknown command": [cmd("NOSUCH"), cmd("NOSUCH", "a", "b c"), cmd("GETX", "k")],
    "unknown command: the arguments listed": [cmd("NOSUCH", *["y" * 50] * 4), cmd("NOSUCH", "y" * 126, "zz", "w"),
                                              cmd("NOSUCH", *["a"] * 100), cmd("N" * 300, "x" * 300),
                                              cmd(b"GET\x00x", b"a\x00b", "c\r\nd"), cmd("NOSUCH", "", "x")],
    "binary keys and values": [cmd("SET", b"b\x00k\r\ney", b"\x00\r\n\xff"), cmd("GET", b"b\x00k\r\ney"),
                               cmd("GET", b"b\x00k"), cmd("MGET", b"b\x00k\r\ney", b"b"),
                               cmd("EXISTS", b"b\x00k\r\ney")],
    "empty values": [cmd("SET", "ev", ""), cmd("GET", "ev"), cmd("MGET", "ev", "ev"), cmd("EXISTS", "ev")],
    "1 MB values": [cmd("SET", "big", MB), cmd("GET", "big"), cmd("MSET", "big2", MB[::-1], "big3", MB),
                    cmd("MGET", "big3", "big?", "big2"), cmd("DEL", "big", "big2", "big3")],
    "keys that cannot be stored": [cmd("SET", "cs", "v"), cmd("GET", ""), cmd("MGET", "", "cs", ""),
                                   cmd("EXISTS", "", "cs"), cmd("DEL", "cs", ""), cmd("DEL", ""),
                                   cmd("GET", b"k" * 65537), cmd("EXISTS", b"k" * 65537)],
    "the longest key": [cmd("SET", b"l" * 65536, "v"), cmd("GET", b"l" * 65536), cmd("DEL", b"l" * 65536)],
    "ping echo": [cmd("PING"), cmd("PING", "hi"), cmd("PING", ""), cmd("ECHO", b"a\x00\r\nb"), cmd("ECHO", "")],
    "select": [cmd("SELECT", "0"), cmd("SELECT", "00"), cmd("SELECT", "-0"), cmd("SELECT", "+0"),
               cmd("SELECT", " 0"), cmd("SELECT", "x"), cmd("SELECT", "99999999999999999999"),
               cmd("SELECT", "16"), cmd("SELECT", "-1"), cmd("SELECT", "2147483647"), cmd("SELECT", "2147483648"),
               cmd("SELECT", "-2147483649"), cmd("GET", "sg?")],
    "dbsize after writes": [cmd("DBSIZE"), cmd("MSET", "db1", "1", "db2", "2", "db3", "3"), cmd("DBSIZE"),
                            cmd("SET", "db1", "again"), cmd("DBSIZE"), cmd("DEL", "db1", "db2", "db3"), cmd("DBSIZE")],
    "hello": [cmd("HELLO"), cmd("HELLO", "2"), cmd("HELLO", "03"), cmd("HELLO", "x"), cmd("HELLO", "3"),
              cmd("HELLO", "2")],
    "resp3 nulls": [cmd("HELLO", "3"), cmd("SET", "r3", "v"), cmd("GET", "r3?"), cmd("MGET", "r3", "r3?"),
                    cmd("GET", ""), cmd("DEL", "r3"), cmd("EXISTS", "r3"), cmd("PING"),
                    cmd("COMMAND", "INFO", "nosuch")],
    "resp3 replies": [cmd("HELLO", "3", "SETNAME", "c3"), cmd("CLIENT", "GETNAME"), cmd("PING", "m"),
                      cmd("ECHO", ""), cmd("CONFIG", "GET", "appendonly"), cmd("SELECT", "00")],
    "command info of unknown names": [cmd("COMMAND", "INFO", "nosuch"), cmd("COMMAND", "INFO", "nosuch", "")],
    "client name": [cmd("CLIENT", "GETNAME"), cmd("CLIENT", "SETNAME", "n1"), cmd("CLIENT", "GETNAME"),
                    cmd("CLIENT", "SETNAME", "a b"), cmd("CLIENT", "GETNAME")],
    "client subcommands: errors": [cmd("CLIENT", "SETNAME"), cmd("CLIENT", "SETNAME", "a", "b"), cmd("client", "Setname"),
                                   cmd("CLIENT", "GETNAME", "x"), cmd("CLIENT", "ID", "x"), cmd("CLIENT", "NOSUCH"),
                                   cmd("client", "nosuch", "x"), cmd("CLIENT", ""), cmd("CLIENT", b"a\x00b"),
                                   cmd("CLIENT", "y" * 200), cmd("CLIENT", b"a\r\nb"), cmd("CLIENT", "HELP", "x"), cmd("CLIENT", "GETNAME")],
    "command subcommands: errors": [cmd("COMMAND", "COUNT", "x"), cmd("COMMAND", "HELP", "x"), cmd("COMMAND", "LIST", "x"),
                                    cmd("COMMAND", "LIST", "FILTERBY"), cmd("COMMAND", "LIST", "FILTERBY", "PATTERN"),
                                    cmd("COMMAND", "LIST", "FILTERBY", "PATTERN", "g*", "x"),
                                    cmd("COMMAND", "LIST", "FILTERBY", "NAME", "get"),
                                    cmd("COMMAND", "LIST", "FILTERBY", "MODULE", "m", "FILTERBY", "ACLCAT", "read"),
                                    cmd("COMMAND", "NOSUCH"), cmd("COMMAND", ""), cmd("COMMAND", "GETKEYS", "get"),
                                    cmd("COMMAND", b"a\x00b"), cmd("COMMAND", "x" * 200), cmd("COMMAND", b"a\r\nb")],
    "command list filtered": [cmd("COMMAND", "LIST", "FILTERBY", "PATTERN", "get"),
                              cmd("COMMAND", "LIST", "filterby", "pattern", "GeT"),
                              cmd("COMMAND", "LIST", "FILTERBY", "PATTERN", "nosuch*"),
                              cmd("COMMAND", "LIST", "FILTERBY", "PATTERN", "[!e]cho"),
                              cmd("COMMAND", "LIST", "FILTERBY", "MODULE", "m"),
                              cmd("COMMAND", "LIST", "FILTERBY", "ACLCAT", "@read"),
                              cmd("COMMAND", "LIST", "FILTERBY", "ACLCAT", "nosuch")],
    "command getkeysandflags": [cmd("COMMAND", "GETKEYSANDFLAGS", "get", "k"), cmd("COMMAND", "GETKEYSANDFLAGS", "set", "k", "v"),
                                cmd("COMMAND", "GETKEYSANDFLAGS", "SET", "k", "v", "nx", "Get"),
                                cmd("COMMAND", "GETKEYSANDFLAGS", "set", "k", "v", b"get\x00x"),
                                cmd("COMMAND", "GETKEYSANDFLAGS", "del", "a", "b"), cmd("COMMAND", "GETKEYSANDFLAGS", "exists", "a"),
                                cmd("COMMAND", "GETKEYSANDFLAGS", "mget", "a", "b"),
                                cmd("COMMAND", "GETKEYSANDFLAGS", "mset", "a", "1", "b", "2"),
                                cmd("COMMAND", "GETKEYSANDFLAGS", "get"), cmd("COMMAND", "GETKEYSANDFLAGS", "ping", "x"),
                                cmd("COMMAND", "GETKEYSANDFLAGS", "nosuch", "x"), cmd("HELLO", "3"),
                                cmd("COMMAND", "GETKEYSANDFLAGS", "get", "k"), cmd("COMMAND", "GETKEYSANDFLAGS", "set", "k", "v", "get"),
                                cmd("COMMAND", "GETKEYSANDFLAGS", "exists", "a", "b")],
    "command docs": [cmd("COMMAND", "DOCS", "get"), cmd("COMMAND", "DOCS", "mget", "nosuch", "DEL", "get", "get"),
                     cmd("COMMAND", "DOCS", "nosuch"), cmd("COMMAND", "DOCS", "nosuch", ""),
                     cmd("COMMAND", "DOCS", "mset", "ping", "echo", "select", "dbsize", "quit", "time", "mget"),
                     cmd("HELLO", "3"), cmd("COMMAND", "DOCS", "get", "mset", "Ping", "nosuch"),
                     cmd("COMMAND", "DOCS", "nosuch")],
    "command help": [cmd("COMMAND", "HELP"), cmd("command", "help")],
    "command info: entries without tips or key specs": [
        cmd("COMMAND", "INFO", "echo", "select", "quit", "auth", "hello"), cmd("HELLO", "3"),
        cmd("COMMAND", "INFO", "ECHO", "Select", "quit", "auth", "hello", "nosuch"),
        cmd("COMMAND", "LIST", "FILTERBY", "PATTERN", "get"), cmd("COMMAND", "GETKEYS", "get", "k")],
    "command getkeys": [cmd("COMMAND", "GETKEYS", "get", "k"), cmd("COMMAND", "GETKEYS", "GET", "k", "x"),
                        cmd("COMMAND", "GETKEYS", "mset", "a", "1", "b", "2"), cmd("COMMAND", "GETKEYS", "mset", "a", "1", "b"),
                        cmd("COMMAND", "GETKEYS", "del", "a", "b", "c"), cmd("COMMAND", "GETKEYS", "ping", "x"),
                        cmd("COMMAND", "GETKEYS", "nosuch", "k"), cmd("COMMAND", "GETKEYS", "set", "k")],
    "config get": [cmd("CONFIG", "GET", "appendonly"), cmd("CONFIG", "GET", "save"), cmd("CONFIG", "GET")],
    "config get names": [cmd("CONFIG", "GET", "APPENDONLY"), cmd("CONFIG", "GET", "Save"),
                         cmd("CONFIG", "GET", "appendonly", "APPENDONLY"), cmd("CONFIG", "GET", b"sav\x00e"),
                         cmd("CONFIG", "GET", "\\save"), cmd("CONFIG", "GET", "appendonl")],
    "config get patterns": [cmd("CONFIG", "GET", "[!p]rotected-mode"), cmd("CONFIG", "GET", "*-threads"),
                            cmd("CONFIG", "GET", "sav[e"), cmd("CONFIG", "GET", "[]s]ave"), cmd("CONFIG", "GET", "s\\ave*"),
                            cmd("CONFIG", "GET", "time?ut"), cmd("CONFIG", "GET", "io-thread[s-a]"),
                            cmd("CONFIG", "GET", "sa[^x]e"), cmd("CONFIG", "GET", "timeout\\"),
                            cmd("CONFIG", "GET", b"sa\x00*"),
                            cmd("CONFIG", "GET", "SAVE", "sav*", "s?ve")],
    "config subcommands: errors": [cmd("CONFIG", "FOO"), cmd("CONFIG", "foo", "x"), cmd("CONFIG", "HELP", "x"),
                                   cmd("CONFIG", "SET", "save"), cmd("CONFIG", "RESETSTAT", "x"),
                                   cmd("CONFIG", "REWRITE", "x"), cmd("CONFIG", "GET"), cmd("CONFIG"),
                                   cmd("CONFIG", b"a\x00b"), cmd("CONFIG", "y" * 200)],
    "auth without a password": [cmd("AUTH", "x"), cmd("AUTH", "default", "x"),
                                cmd("HELLO", "2", "AUTH", "default", "x")],
    "pipelined": [pipe(cmd("SET", "pl", "1"), cmd("GET", "pl"), cmd("GETX"), cmd("DEL", "pl"), cmd("GET", "pl"),
                       cmd("MSET", "pl"), cmd("PING"), cmd("ECHO", MB)), pipe(*[cmd("EXISTS", "pl")] * 100),
                  (b"*0\r\n*-1\r\n" + cmd("PING"), 1)],  # empty arrays are skipped
    "inline": [pipe(b"SET inl v\r\n", b"GET inl\r\n", b"  EXISTS   inl  inl\n", b"DEL inl\r\n"),
               b"\r\n\r\nPING\n", pipe(b'ECHO ""\r\n', b'ECHO "a b\\x41\\n"\r\n', b"ECHO 'it\\'s'\r\n", b"GET\r\n")],
    "inline: vertical tab and form feed": [b"ECHO a\x0bb\r\n", b"ECHO a\x0cb c\r\n", b"\x0b ECHO \x0c\x0ba\tb\r\n",
                                           b'ECHO "a"\x0bb\r\n', b"ECHO \x0cx\x0c\r\n"],
    "quit": [cmd("SET", "q", "v"), (cmd("QUIT") + cmd("DEL", "q"), 1), CLOSED],  # the DEL is not run
    "quit with an argument": [cmd("QUIT", "x"), CLOSED],
    "inline quit": [b"quit\r\n", CLOSED],
    "protocol error: not a bulk": [cmd("SET", "pe1", "v"), b"*2\r\n+GET\r\n", CLOSED],
    "protocol error: bad length": [b"*x\r\n", CLOSED],
    "protocol error: bad bulk length": [b"*1\r\n$-5\r\n", CLOSED],
    "protocol error: unbalanced quotes": [b'GET "pe\r\n', CLOSED],
}


@pytest.mark.parametrize("name", CORPUS)
def test_replies_are_byte_identical(ports, name):
    redis_port, nvmw_port = ports
    want = exchange(redis_port, CORPUS[name])
    got = exchange(nvmw_port, CORPUS[name])
    assert got == want


def test_command_info_without_names_lists_every_command(ports):
    """As COMMAND does: as many entries as COMMAND COUNT says (nvmw's table is smaller)."""
    for port in ports:
        count, info = exchange(port, [cmd("COMMAND", "COUNT"), cmd("COMMAND", "INFO")])
        assert info.startswith(b"*%s\r\n" % count[1:-2]), (port, count, info[:40])


def parse(frame: bytes):
    """A RESP2 frame as Python values: bulks and simple strings as bytes, errors as Exception."""
    def value(pos):
        end = frame.index(b"\r\n", pos)
        kind, head, nxt = frame[pos:pos + 1], frame[pos + 1:end], end + 2
        if kind == b"+":
            return head, nxt
        if kind == b"-":
            return Exception(head.decode()), nxt
        if kind == b":":
            return int(head), nxt
        if kind == b"$":
            n = int(head)
            return (None, nxt) if n < 0 else (frame[nxt:nxt + n], nxt + n + 2)
        assert kind == b"*", frame[pos:pos + 40]
        items = []
        for _ in range(max(int(head), 0)):
            item, nxt = value(nxt)
            items.append(item)
        return (None if int(head) < 0 else items), nxt
    out, end = value(0)
    assert end == len(frame)
    return out


def test_command_entries_as_redis(ports):
    """Name, arity, flags, key positions and ACL categories of every command nvmw has and
    Redis has too are Redis's (tips, key specs and subcommands are not given)."""
    redis_port, nvmw_port = ports
    names = parse(exchange(nvmw_port, [cmd("COMMAND", "LIST")])[0])
    ours = dict(zip(names, parse(exchange(nvmw_port, [cmd("COMMAND", "INFO", *names)])[0])))
    theirs = dict(zip(names, parse(exchange(redis_port, [cmd("COMMAND", "INFO", *names)])[0])))
    assert {n for n, e in theirs.items() if e is None} == {b"nvmw.class", b"nvmw.stats"}
    for name, entry in ours.items():
        assert entry[7:] == [[], [], []], name
        if theirs[name] is not None:
            assert entry[:7] == theirs[name][:7], name


def test_command_docs_as_redis(ports):
    """COMMAND DOCS gives, for every command nvmw has and Redis has too, Redis's summary,
    since, group, complexity and arguments (what redis-cli shows as help and hints), but
    SET's options, which nvmw refuses; no history and no subcommands (documented). Without
    names, every command, as many as COMMAND COUNT says."""
    redis_port, nvmw_port = ports
    names = parse(exchange(nvmw_port, [cmd("COMMAND", "LIST")])[0])
    ours = parse(exchange(nvmw_port, [cmd("COMMAND", "DOCS", *names)])[0])
    theirs = parse(exchange(redis_port, [cmd("COMMAND", "DOCS", *names)])[0])
    ours, theirs = dict(zip(ours[::2], ours[1::2])), dict(zip(theirs[::2], theirs[1::2]))
    assert set(ours) == set(names) and set(theirs) == set(names) - {b"nvmw.class", b"nvmw.stats"}
    for name, doc in theirs.items():
        fields = dict(zip(doc[::2], doc[1::2]))
        want = {k: v for k, v in fields.items() if k not in (b"history", b"subcommands")}
        if name == b"set":
            want[b"arguments"] = want[b"arguments"][:2]  # key and value
        got = dict(zip(ours[name][::2], ours[name][1::2]))
        assert list(got) == list(want) and got == want, name
    for name in (b"nvmw.class", b"nvmw.stats"):
        assert [k for k in ours[name][::2]][:4] == [b"summary", b"since", b"group", b"complexity"], name
    count, docs = exchange(nvmw_port, [cmd("COMMAND", "COUNT"), cmd("COMMAND", "DOCS")])
    assert docs.startswith(b"*%d\r\n$3\r\nget\r\n" % (2 * int(count[1:-2]))), docs[:40]


@pytest.mark.parametrize("filterby", [(), ("PATTERN", "*"), ("PATTERN", "?et"), ("PATTERN", "[gs]et"),
                                      ("PATTERN", "[^g]et"), ("PATTERN", "m*"), ("PATTERN", "*S*"),
                                      ("PATTERN", "c[o-z]*"), ("PATTERN", "[z-a]*"), ("PATTERN", "GE\\T"),
                                      ("PATTERN", "[]g]et"), ("PATTERN", "get["), ("PATTERN", "[ge"),
                                      ("PATTERN", "*.*"), ("ACLCAT", "connection"), ("ACLCAT", "Read"),
                                      ("ACLCAT", "string"), ("ACLCAT", "slow")])
def test_command_list_as_redis(ports, filterby):
    """COMMAND LIST [FILTERBY ...] names the commands nvmw has of those Redis names (Redis
    lists more, subcommands too, in an order of its own); nvmw.* only for patterns."""
    redis_port, nvmw_port = ports
    everything = set(parse(exchange(nvmw_port, [cmd("COMMAND", "LIST")])[0]))
    steps = [cmd("COMMAND", "LIST", *(("FILTERBY",) + filterby if filterby else ()))]
    ours = parse(exchange(nvmw_port, steps)[0])
    assert len(ours) == len(set(ours))
    theirs = set(parse(exchange(redis_port, steps)[0]))
    assert {n for n in ours if not n.startswith(b"nvmw.")} == theirs & everything


def test_keyspace_hits_and_misses_as_redis(ports):
    """INFO's keyspace_hits and keyspace_misses move as Redis's: one per key GET, MGET and
    EXISTS look up (a key named twice counts twice), none for SET and DEL."""
    steps = [cmd("SET", "ks1", "v"), cmd("GET", "ks1"), cmd("GET", "ks?"), cmd("MGET", "ks1", "ks?", "ks1", "ks?"),
             cmd("EXISTS", "ks1", "ks?", "ks1"), cmd("DEL", "ks1", "ks?"), cmd("GET", ""), cmd("MSET", "ks2", "w"),
             cmd("DEL", "ks2")]
    moved = []
    for port in ports:
        def counts():
            info = parse(exchange(port, [cmd("INFO", "stats")])[0]).decode()
            return [int(re.search(rf"\r\n{k}:(\d+)\r\n", info).group(1)) for k in ("keyspace_hits", "keyspace_misses")]
        before = counts()
        exchange(port, steps)
        moved.append([a - b for a, b in zip(counts(), before)])
    assert moved[0] == moved[1] == [5, 5]


CONFIG_PATTERNS = [("*",), ("max*",), ("*-threads",), ("[ps]ort",), ("[!p]ort",), ("[^p]ort",), ("P*",),
                   ("*MODE",), ("??rt",), ("\\p*",), ("p\\*",), ("[z-a]ort",), ("[a-\\z]ort",), ("p[o",),
                   ("bin?",), ("*o*",), ("maxmemory*",), ("PORT",), ("port", "PORT", "p*"), ("p*", "PORT"),
                   ("save", "appendonly", "save"), ("*", "*"), ("max*", "*clients"), (b"sa*\x00x",),
                   (b"*\x00*",), ("[",), ("*[",), ("\\",), ("",), ("[\\]]",)]


@pytest.mark.parametrize("patterns", CONFIG_PATTERNS)
def test_config_get_as_redis(ports, patterns):
    """CONFIG GET answers, of the parameters nvmw has, those Redis answers and under the
    same names (Redis has more, and its order is its own); the values are Redis's but
    for those of a different server (port, maxclients) and databases (documented)."""
    redis_port, nvmw_port = ports
    everything = parse(exchange(nvmw_port, [cmd("CONFIG", "GET", "*")])[0])
    known = {n.lower() for n in everything[::2]}
    step = [cmd("CONFIG", "GET", *patterns)]
    ours, theirs = parse(exchange(nvmw_port, step)[0]), parse(exchange(redis_port, step)[0])
    ours_d = dict(zip(ours[::2], ours[1::2]))
    assert len(ours_d) == len(ours) // 2
    theirs_d = {n: v for n, v in zip(theirs[::2], theirs[1::2]) if n.lower() in known}
    assert ours_d.keys() == theirs_d.keys()
    for name in ours_d:
        if name.lower() not in (b"port", b"maxclients", b"databases"):
            assert ours_d[name] == theirs_d[name], name


@pytest.mark.parametrize("name", DIFFERENCES)
def test_documented_differences(ports, name):
    steps, nvmw_reply, docs_words = DIFFERENCES[name]
    redis_port, nvmw_port = ports
    got = exchange(nvmw_port, steps)
    assert got == nvmw_reply
    assert exchange(redis_port, steps) != got, "nvmw answers as Redis now: drop the difference from docs/server.md"
    with open(DOCS, encoding="utf-8") as f:
        assert docs_words in " ".join(f.read().split())


def test_info_keyspace_as_redis():
    """INFO keyspace, byte for byte, on servers of their own: on an empty store the section
    is its header alone, db0's line comes with the first key and goes with the last."""
    with pair() as (redis_port, nvmw_port):
        steps = [cmd("INFO", "keyspace"), cmd("SET", "ik", "v"), cmd("INFO", "keyspace"), cmd("DEL", "ik"),
                 cmd("INFO", "Keyspace")]
        got, want = exchange(nvmw_port, steps), exchange(redis_port, steps)
        assert got[0] == b"$12\r\n# Keyspace\r\n\r\n"
        assert got == want


def test_redis_server_starts_again_on_another_port_when_its_was_taken():
    # Another process takes the port between its pick and redis-server's bind (a socket of
    # this test here; an outgoing connection of another program alike): redis-server
    # stops at start, and it is started again on a new port.
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        pytest.fail("redis-server is not installed: scripts/setup.sh installs it (Debian package redis-server)")
    procs: list = []
    starts: list = []
    with socket.socket() as thief:
        def start_one(port: int) -> int:
            if not starts:
                thief.bind(("127.0.0.1", port))
                thief.listen()
            starts.append(port)
            return start_redis(procs, redis_server, "127.0.0.1", port)
        try:
            port = with_free_ports(start_one)
            assert len(starts) == 2 and len(procs) == 1, (starts, procs)
            assert exchange(port, [cmd("PING")]) == [b"+PONG\r\n"]
        finally:
            stop_all(procs)


def host_address() -> str:
    """This machine's IPv4 address on an interface other than loopback (see
    test_serve_inputs.host_address): a client of it from here is not on loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # a UDP connect sends nothing
            address = s.getsockname()[0]
    except OSError as e:
        pytest.fail(f"this host has no IPv4 address besides loopback to test protected mode with: {e}")
    if address.startswith("127.") or address == "0.0.0.0":
        pytest.fail(f"this host has no IPv4 address besides loopback to test protected mode with ({address})")
    return address


def test_protected_mode_as_redis():
    """Bound to 0.0.0.0 with no password (protected mode, both servers' default): a client
    of another address gets one -DENIED line and is closed, counted in rejected_connections;
    loopback clients are served. The line's words differ (documented)."""
    host = host_address()
    with pair(bind="0.0.0.0") as (redis_port, nvmw_port):
        denied = {}
        for name, port in (("redis", redis_port), ("nvmw", nvmw_port)):
            with socket.create_connection((host, port), timeout=10) as s:
                r = Reader(s)
                denied[name] = r.frame()
                assert r.closed(), name
            assert denied[name].startswith(b"-DENIED ") and denied[name].endswith(b"\r\n"), denied[name]
            ping, stats = exchange(port, [cmd("PING"), cmd("INFO", "stats")])
            assert ping == b"+PONG\r\n", name
            assert b"\r\nrejected_connections:1\r\n" in stats, (name, stats)
        assert b"--protected-mode no" in denied["nvmw"] and denied["nvmw"] != denied["redis"]
        with open(DOCS, encoding="utf-8") as f:
            assert "the `-DENIED` line names nvmw's ways out" in " ".join(f.read().split())
