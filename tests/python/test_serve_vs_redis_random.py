"""`nvmw serve` against redis-server 7.0.15 over random command sequences, each a seed's:
GET, SET (plain, and with its options EX PX EXAT PXAT NX XX KEEPTTL GET, in valid and
invalid combinations, with bad numbers), DEL and EXISTS naming a key more than once, MGET
with duplicates, MSET naming a key twice, DBSIZE, SELECT, ECHO, PING and HELLO, names in
any case, some with the wrong number of arguments, over 8 keys (binary ones, a NUL, a
space, CR LF, one that looks like a number, one like a reply) and the empty key, values
from empty to a few hundred KB, pipelined in batches of random sizes, each written whole
or cut at random bytes. Both servers get the same bytes, one connection each, and must answer byte for byte alike, but for the
differences docs/server.md lists (DIFFERENCES, in vs_redis.py): there nvmw's reply must be
the one pinned there, the command ends its batch, and the keys it named (or the database
it selected) are then set on redis-server as nvmw holds them, so the sequence goes on
comparing from the same state. At the end, INFO keyspace must be the same too.

Nothing depends on time: nvmw refuses SET's expiry options, and redis-server's key loses
the TTL they gave it right after (no sleeps, no expiry). A mismatch names the seed, the
batch and the command. More seeds, on one pair of servers (nvmw serve's arguments after
`--`):

    python tests/python/test_serve_vs_redis_random.py FIRST_SEED COUNT [STEPS] [-- ARGS...]
"""
import contextlib
import os
import random
import re
import socket
import sys
import tempfile
import threading

import pytest

from vs_redis import DIFFERENCES, Reader, cmd, comparable, pair

KEYS = [b"k", b"\x00", b" ", b"\r\n", b"0", b"$-1\r\n", b"nx", b"key\xff\x00\r\ntail" * 20]
EMPTY_KEY = b""  # nvmw holds no empty key (documented); Redis does
SET_OPTIONS = [b"ex", b"px", b"exat", b"pxat", b"nx", b"xx", b"keepttl", b"get"]
NUMBERS = [b"100000", b"100000000", b"4102444800", b"4102444800000", b"0", b"-1", b"1.5", b"x", b"",
           b" 100", b"9223372036854775807", b"99999999999999999999", b"01"]
SELECT_ARGS = [b"0", b"1", b"15", b"16", b"-1", b"00", b"-0", b"x", b"", b" 0", b"+0", b"0\x00", b"0x0", b"1e0",
               b"2147483647", b"2147483648", b"-2147483649", b"9223372036854775808"]
BATCH_SIZES = [1, 1, 2, 3, 5, 8, 13, 30]
STEPS = 800  # commands per seed
BIG_SHARE = 0.03  # of the values, those of a few hundred KB
SEEDS = [1, 2, 3, 4, 5, 6]


def _value(rng: random.Random, big: list) -> bytes:
    """Empty, short and reply-like, up to 20 KB, or one of `big`."""
    r = rng.random()
    if r < 0.15:
        return b""
    if r < 0.3:
        return rng.choice([b"0", b"-1", b"$-1\r\n", b"*1\r\n", b"OK", b"\x00", b"\r\n"])
    if r < 0.9:
        return rng.randbytes(rng.randrange(1, 200))
    if r < 1 - BIG_SHARE:
        return rng.randbytes(rng.randrange(200, 20000))
    return rng.choice(big)


def _case(rng: random.Random, name: bytes) -> bytes:
    """A command or option name with some of its letters in the other case."""
    return bytes(c ^ 0x20 if 0x61 <= (c | 0x20) <= 0x7a and rng.random() < 0.3 else c for c in name)


def _key(rng: random.Random) -> bytes:
    return EMPTY_KEY if rng.random() < 0.03 else rng.choice(KEYS)


def _set_options(rng: random.Random) -> list:
    """SET's options: known ones in any case, with good and bad numbers or none, in any
    combination; now and then an unknown one or one with a NUL byte."""
    opts = []
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        r = rng.random()
        if r < 0.08:
            opts.append(rng.choice([b"junk", b"EXX", b"nx\x00", b"ex\x00", b"", b"keepttl\x00x", b"get\x00"]))
            continue
        opt = rng.choice(SET_OPTIONS)
        opts.append(_case(rng, opt))
        if opt in (b"ex", b"px", b"exat", b"pxat") and rng.random() < 0.95:
            opts.append(rng.choice(NUMBERS[:4]) if rng.random() < 0.7 else rng.choice(NUMBERS))
    return opts


def generate(rng: random.Random, big: list) -> list:
    """One command: its arguments."""
    r = rng.random()
    if r < 0.2:
        if rng.random() < 0.03:
            return [b"GET"] + [_key(rng)] * rng.choice([0, 2])  # the wrong number of arguments
        return [_case(rng, b"GET"), _key(rng)]
    if r < 0.45:
        args = [_case(rng, b"SET"), _key(rng), _value(rng, big)]
        if rng.random() < 0.3:
            args += _set_options(rng)
        elif rng.random() < 0.02:
            args = args[:rng.randrange(1, 3)]
        return args
    if r < 0.55:
        return [_case(rng, b"DEL")] + [_key(rng) for _ in range(rng.choice([0, 1, 1, 2, 3, 5]))]
    if r < 0.63:
        keys = [_key(rng) for _ in range(rng.choice([0, 1, 2, 3]))]
        return [_case(rng, b"EXISTS")] + keys + keys[:rng.randrange(len(keys) + 1)]
    if r < 0.73:
        keys = [_key(rng) for _ in range(rng.choice([0, 1, 2, 4]))]
        return [_case(rng, b"MGET")] + keys + keys[:rng.randrange(len(keys) + 1)]
    if r < 0.83:
        args = [_case(rng, b"MSET")]
        for _ in range(rng.choice([1, 1, 2, 3])):
            args += [_key(rng), _value(rng, big)]
        if rng.random() < 0.3:
            args += [args[1], _value(rng, big)]  # a key twice: the last value stays
        if rng.random() < 0.03:
            args.pop()
        return args
    if r < 0.87:
        return [_case(rng, b"DBSIZE")] + ([b"x"] if rng.random() < 0.03 else [])
    if r < 0.91:
        return [_case(rng, b"SELECT")] + ([rng.choice(SELECT_ARGS)] if rng.random() < 0.97 else [])
    if r < 0.96:
        return [_case(rng, b"ECHO")] + ([_value(rng, big)] if rng.random() < 0.97 else rng.choice([[], [b"a", b"b"]]))
    if r < 0.99:
        return [_case(rng, b"PING")] + [_value(rng, big)] * rng.choice([0, 0, 1, 1, 2])
    return [_case(rng, b"HELLO")] + rng.choice([[], [b"2"], [b"3"], [b"3"], [b"4"], [b"x"], [b"3\x00"], [b"02"],
                                                [b"2", b"junk"]])


def difference(args: list):
    """(the DIFFERENCES entry, nvmw's reply, the keys to set on Redis as nvmw holds them,
    whether to select db 0 on Redis again) where docs/server.md says the replies differ,
    else None."""
    name = args[0].lower()
    option = args[3].split(b"\0")[0] if name == b"set" and len(args) > 3 else None  # Redis reads up to a NUL
    if option is not None and option.lower() in SET_OPTIONS:
        refusal = DIFFERENCES["set options"][1][0].replace(b"option NX", b"option " + option.upper())
        return "set options", refusal, [args[1]], False
    writes = args[1:2] if name == b"set" and len(args) == 3 else args[1::2] if name == b"mset" and len(args) % 2 else []
    if EMPTY_KEY in writes:
        return "keys nvmw cannot hold", DIFFERENCES["keys nvmw cannot hold"][1][0], writes, False
    if name == b"select" and len(args) == 2 and args[1] in [b"%d" % i for i in range(1, 16)]:
        return "one database", DIFFERENCES["one database"][1][0], [], True
    if name == b"hello" and len(args) == 2 and args[1] == b"4":
        return "protocol version", DIFFERENCES["protocol version"][1][0], [], False
    return None


class Client:
    """One connection: a batch of requests written from a thread while their replies are
    read here (neither side's buffers fill up with nobody draining them)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = Reader(self.sock)

    def run(self, requests: list, cuts: tuple = ()) -> list:
        """Sends the requests, in one write or cut at the offsets `cuts` (where a request
        may be split), and reads their replies."""
        payload = b"".join(requests)
        bounds = [0, *sorted(c for c in cuts if 0 < c < len(payload)), len(payload)]
        failed = []

        def send():
            try:
                for lo, hi in zip(bounds, bounds[1:]):
                    self.sock.sendall(payload[lo:hi])
            except OSError as e:
                failed.append(e)

        t = threading.Thread(target=send)
        t.start()
        try:
            return [self.reader.frame() for _ in requests]
        finally:
            t.join()
            assert not failed, failed

    def close(self):
        self.sock.close()


def _show(b: bytes, n: int = 120) -> str:
    """b for a message: its first n bytes and its length."""
    return repr(b[:n]) + (f"... ({len(b)} bytes)" if len(b) > n else "")


def _bulk(frame: bytes):
    """A GET reply's value, None for a null."""
    if frame in (b"$-1\r\n", b"_\r\n"):
        return None
    head, _, rest = frame.partition(b"\r\n")
    assert head.startswith(b"$"), frame[:80]
    return rest[:int(head[1:])]


def run_seed(ports: tuple, seed: int, steps: int = STEPS) -> int:
    """Runs seed's sequence on both servers; raises AssertionError at the first reply that
    differs other than as documented. Returns the number of commands sent."""
    rng = random.Random(seed)
    # Values of a few hundred KB, and either side of the size from which a SET is batch work
    # (64 KiB, the middleware's default batch_threshold_bytes).
    big = [rng.randbytes(n) for n in (rng.randrange(100_000, 400_000), 300_000, 65_535, 65_536)]
    redis, nvmw = Client(ports[0]), Client(ports[1])
    try:
        start = [cmd("DEL", *KEYS, EMPTY_KEY), cmd("SELECT", "0")]
        assert redis.run(start)[1] == nvmw.run(start)[1] == b"+OK\r\n"
        sent = 0
        batch_no = 0
        while sent < steps:
            batch, size = [], rng.choice(BATCH_SIZES)
            diff = None
            while len(batch) < size and diff is None:
                batch.append(generate(rng, big))
                diff = difference(batch[-1])  # a documented difference ends its batch
            requests = [cmd(*args) for args in batch]
            nbytes = sum(map(len, requests))
            cuts = tuple(rng.randrange(nbytes) for _ in range(rng.choice([0, 0, 1, 3, 10])))
            try:
                want, got = redis.run(requests, cuts), nvmw.run(requests, cuts)
            except (EOFError, OSError) as e:
                raise AssertionError(f"seed {seed}, batch {batch_no} (#{sent}...): {e!r}") from e
            for i, args in enumerate(batch):
                where = (f"seed {seed}, batch {batch_no}, command {i} of {len(batch)} "
                         f"(#{sent + i}): {[_show(a, 40) for a in args]}")
                if diff is not None and i == len(batch) - 1:
                    name, reply = diff[:2]
                    assert name in DIFFERENCES
                    assert got[i] == reply, f"{where}\n  nvmw:  {_show(got[i])}\n  documented: {_show(reply)}"
                elif args[0].lower() == b"hello":
                    assert comparable(got[i]) == comparable(want[i]), f"{where}\n  nvmw:  {got[i]!r}\n  redis: {want[i]!r}"
                else:
                    assert got[i] == want[i], f"{where}\n  nvmw:  {_show(got[i])}\n  redis: {_show(want[i])}"
            if diff is not None:
                _, _, keys, reselect = diff
                keys = list(dict.fromkeys(keys))
                held = [_bulk(f) for f in nvmw.run([cmd("GET", k) for k in keys])]
                fix = [cmd("SET", k, v) if v is not None else cmd("DEL", k) for k, v in zip(keys, held)]
                if reselect:
                    fix.append(cmd("SELECT", "0"))
                for reply in redis.run(fix):
                    assert reply in (b"+OK\r\n", b":0\r\n", b":1\r\n"), reply
            sent += len(batch)
            batch_no += 1
        # db0's key count, and no key with a TTL left on Redis; under RESP2, where INFO is a
        # bulk string on both (a verbatim string on Redis under RESP3, documented). avg_ttl
        # aside: Redis keeps the average its expiry cycle last sampled after the keys that
        # had a TTL are gone.
        end = [cmd("HELLO", "2"), cmd("INFO", "keyspace")]
        got, want = (re.sub(rb"^\$\d+|avg_ttl=\d+", b"", c.run(end)[1]) for c in (nvmw, redis))
        assert got == want, f"seed {seed}: INFO keyspace after {sent} commands\n  nvmw:  {got}\n  redis: {want}"
        return sent
    finally:
        redis.close()
        nvmw.close()


@contextlib.contextmanager
def servers(nvmw_args: tuple = (), pool_mb: int = 64):
    """A redis-server and an nvmw serve of their own (so that DBSIZE counts the sequence's
    keys alone), nvmw on a pmem pool on /dev/shm: yields their ports."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="nvmw-test-", dir=base) as d:
        pool = ("--engine", "pmem", "--path", os.path.join(d, "t.pool"), "--pool-mb", str(pool_mb))
        with pair(nvmw_args=pool + tuple(nvmw_args)) as ports:
            yield ports


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sequences_as_redis(seed):
    with servers() as ports:
        assert run_seed(ports, seed) >= STEPS


def main(argv: list) -> int:
    args, nvmw_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    first, count = int(args[0]), int(args[1])
    steps = int(args[2]) if len(args) > 2 else STEPS
    sent, failed = 0, []
    with servers(nvmw_args) as ports:
        for seed in range(first, first + count):
            try:
                sent += run_seed(ports, seed, steps)
            except AssertionError as e:
                failed.append(seed)
                print(f"FAILED {e}", flush=True)
    print(f"seeds {first}..{first + count - 1}: {count - len(failed)} passed, {len(failed)} failed "
          f"{failed}; {sent} commands in the seeds that passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
