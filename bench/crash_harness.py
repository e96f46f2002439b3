"""Crash harness for the pmem engine through the Python API: a forked child drives a
`nvmw.Middleware` on one pool with sync and async puts and removes (values 10 B to
3 MB) and reports every operation before it starts and when it is acknowledged; the
parent SIGKILLs it at a random moment, reopens the pool and checks every key against
what was acknowledged. Counts acknowledged writes verified, lost (an acknowledged
state missing after the kill) and torn (a value that is no state the key ever had);
lost and torn must be 0. The C++ crash test (tests/cpp/engine/crash_test.cc) runs 50
cycles on every test run; this runs longer campaigns.

    python3 bench/crash_harness.py [--cycles 1000] [--seed 1] [--dir /dev/shm] [--json OUT]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time

os.environ.setdefault("PMEM_IS_PMEM_FORCE", "1")  # before libpmem loads: tmpfs flushes by CPU

import nvmw  # noqa: E402

KEYS = 24
LARGE_KEYS = 4  # keys below this get 1-3 MB values


def value_for(key: int, version: int, length: int) -> bytes:
    seed = hashlib.blake2b(b"%d/%d/%d" % (key, version, length), digest_size=64).digest()
    return (seed * (length // 64 + 1))[:length]


def child(pool: str, fd: int, seed: int, first_version: int) -> None:
    rng = random.Random(seed)
    mw = nvmw.Middleware(pool, interactive_threads=2, batch_threads=1, pool_size=512 << 20)
    lock = threading.Lock()
    busy = set()  # keys with an operation in flight (at most one each)

    def send(line: str) -> None:
        os.write(fd, (line + "\n").encode())  # < PIPE_BUF: never interleaved

    send("R")
    version = first_version
    while True:
        key = rng.randrange(KEYS)
        with lock:
            if key in busy:
                continue
            busy.add(key)
        version += 1
        remove = rng.random() < 0.1
        if key < LARGE_KEYS:
            length = rng.randint(1 << 20, 3 << 20)
        else:
            length = rng.choice([rng.randint(10, 200), rng.randint(200, 70000)])
        k = b"key-%d" % key
        if remove:
            send(f"B {key} {version} -1")
        else:
            send(f"B {key} {version} {length}")
        if rng.random() < 0.5:  # sync
            if remove:
                mw.remove(k)
            else:
                mw.put(k, value_for(key, version, length))
            send(f"A {key} {version}")
            with lock:
                busy.discard(key)
        else:  # async: acknowledged when the future completes
            fut = mw.submit("remove", k) if remove else mw.submit(
                "put", k, value_for(key, version, length))

            def done(f, key=key, version=version):
                f.result()
                send(f"A {key} {version}")
                with lock:
                    busy.discard(key)
            fut.add_done_callback(done)


def run(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="nvmw-crash-", dir=args.dir)
    pool = os.path.join(tmp, "crash.pool")
    acked = {k: None for k in range(KEYS)}  # key -> (version, length) or None (absent)
    counts = {"cycles": 0, "acknowledged": 0, "verified_keys": 0, "in_flight_at_kill": 0,
              "in_flight_committed": 0, "lost": 0, "torn": 0, "wrong_count": 0}
    version = 0
    t0 = time.time()
    for cycle in range(args.cycles):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                child(pool, w, rng.randrange(1 << 30), version)
            finally:
                os._exit(1)
        os.close(w)
        stream = os.fdopen(r, "r")
        in_flight = {}  # key -> (version, length or -1)
        kill_after = rng.randrange(40)
        seen = 0
        ready = False
        for line in stream:
            parts = line.split()
            if parts[0] == "R":
                ready = True
            elif parts[0] == "B":
                in_flight[int(parts[1])] = (int(parts[2]), int(parts[3]))
            elif parts[0] == "A":
                key = int(parts[1])
                ver, length = in_flight.pop(key)
                acked[key] = None if length < 0 else (ver, length)
                counts["acknowledged"] += 1
                seen += 1
            if ready and seen >= kill_after:
                break
        time.sleep(rng.random() * 0.003)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        for line in stream:  # what the child wrote before it died
            parts = line.split()
            if parts and parts[0] == "B":
                in_flight[int(parts[1])] = (int(parts[2]), int(parts[3]))
            elif parts and parts[0] == "A":
                key = int(parts[1])
                ver, length = in_flight.pop(key)
                acked[key] = None if length < 0 else (ver, length)
                counts["acknowledged"] += 1
        stream.close()
        version += 1_000_000

        eng = nvmw.open_engine("pmem", pool, create_if_missing=False)
        present = 0
        for key in range(KEYS):
            got = eng.get(b"key-%d" % key)
            allowed = [acked[key]]
            if key in in_flight:
                counts["in_flight_at_kill"] += 1
                ver, length = in_flight[key]
                allowed.append(None if length < 0 else (ver, length))
            matched, match = False, None
            for state in allowed:
                expect = None if state is None else value_for(key, state[0], state[1])
                if got == expect:
                    matched, match = True, state
                    break
            if not matched:
                if args.verbose:
                    print(f"cycle {cycle} key {key}: got {None if got is None else len(got)} "
                          f"bytes, allowed {allowed}", file=sys.stderr)
                # Same length as a state it may hold but other bytes: torn. Anything
                # else (missing, or no state it ever had): the acknowledged state is lost.
                if got is not None and any(s is not None and len(got) == s[1] for s in allowed):
                    counts["torn"] += 1
                else:
                    counts["lost"] += 1
            else:
                if key in in_flight and match != acked[key]:
                    counts["in_flight_committed"] += 1
                acked[key] = match
                counts["verified_keys"] += 1
            if got is not None:
                present += 1
        if eng.count() != present:
            counts["wrong_count"] += 1
        del eng
        counts["cycles"] += 1
        if args.progress and (cycle + 1) % args.progress == 0:
            print(json.dumps({"progress": cycle + 1, **counts}), file=sys.stderr, flush=True)
    counts["seconds"] = round(time.time() - t0, 1)
    counts["ok"] = counts["lost"] == 0 and counts["torn"] == 0 and counts["wrong_count"] == 0
    try:
        os.unlink(pool)
        os.rmdir(tmp)
    except OSError:
        pass
    return counts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=1000, help="kill/reopen/verify cycles (default 1000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                   help="directory for the pool (default /dev/shm)")
    p.add_argument("--progress", type=int, default=0, help="print counts every N cycles")
    p.add_argument("--verbose", action="store_true", help="print every mismatch")
    p.add_argument("--json", default=None, help="also write the result to this file")
    args = p.parse_args()
    result = {"machine_cores": os.cpu_count(), "seed": args.seed, **run(args)}
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
