"""Chaos run against `nvmw serve`: well-formed pipelines mixed with garbage, half-sent
commands, connections dropped before their replies, slow readers and metrics scrapes
(some of them garbage too), then SIGTERM while all of that goes on, then a restart on
the same pool that reads every key back.

Each client thread owns its keys, so it knows what each key may hold: the value of its
last acknowledged SET or MSET (or nothing after an acknowledged DEL), plus the values
of writes it sent whose connection ended before their reply. Those may land at any
later moment, since no reply ordered them; they stay possible. Checked:

* every reply to a well-formed command is what the command should answer, and every
  GET and MGET value is one the key may hold;
* the server exits with status 0 after SIGTERM, and prints no sanitizer report and no
  traceback;
* after the restart every key holds a value it may hold: no acknowledged write lost,
  no value torn;
* at least one metrics scrape succeeded, and each successful one held nvmw metrics.

Run with `--asan-core DIR` to load an AddressSanitizer build of the core (the module
`scripts/test.sh` builds in build/asan/py) in the server:

    python3 bench/server_chaos.py [--seeds 1 2 3] [--seconds 20] [--asan-core build/asan/py] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Value sizes of the writes: small ones stay on the interactive path, 70 KB and more go
# to the batch path under the size rule (threshold 64 KiB).
SIZES = (1, 128, 4096, 70_000, 300_000, 800 * 1024)
KEYS = 24  # per client thread
MISC = (["PING"], ["ECHO", "hi"], ["NVMW.CLASS", "batch"], ["NVMW.CLASS", "interactive"],
        ["NVMW.CLASS", "auto"], ["NVMW.STATS"], ["INFO"], ["DBSIZE"], ["SELECT", "0"],
        ["CLIENT", "SETNAME", "chaos"], ["CLIENT", "GETNAME"], ["HELLO", "3"], ["HELLO", "2"],
        ["COMMAND", "DOCS", "GET"], ["SET", "k"], ["GET"], ["NOSUCH"], ["SET", "k", "v", "EX", "-5"],
        ["SET", "k", "v", "PX", "abc"], ["SELECT", "1"])


def encode(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Error(str):
    """An error reply (-ERR ...)."""


class Conn:
    """A raw RESP2/RESP3 client connection."""

    def __init__(self, port: int, timeout: float = 30.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError("connection closed by the server")
        self.buf += data

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"_":
            return None
        if kind in (b"+", b":", b",", b"#"):
            return rest.decode()
        if kind == b"-":
            return Error(rest.decode())
        if kind in (b"$", b"="):
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind in (b"*", b"~", b">"):
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        if kind == b"%":
            items = {}
            for _ in range(int(rest)):
                key = self.reply()
                items[tuple(key) if isinstance(key, list) else key] = self.reply()
            return items
        raise ValueError(f"not a RESP reply: {line[:80]!r}")

    def close(self) -> None:
        self.sock.close()


def value_for(client: int, key: int, seq: int, size: int) -> bytes:
    head = b"%d:%d:%d:" % (client, key, seq)
    return (head * (size // len(head) + 1))[:max(size, len(head))]


class Client(threading.Thread):
    def __init__(self, index: int, port: int, stop: threading.Event, terminating: threading.Event,
                 seed: int):
        super().__init__(daemon=True, name=f"chaos-{index}")
        self.index, self.port, self.stop, self.terminating = index, port, stop, terminating
        self.rng = random.Random(seed)
        self.seq = 0
        self.acked = {k: None for k in range(KEYS)}      # last acknowledged state (None: absent)
        self.pending = {k: set() for k in range(KEYS)}   # sent, reply not read yet
        self.ghosts = {k: set() for k in range(KEYS)}    # sent, connection ended before the reply
        self.errors: list[str] = []
        self.counts: dict[str, int] = {}

    def key(self, k: int) -> str:
        return f"c{self.index}:k{k}"

    def allowed(self, k: int) -> set:
        return {self.acked[k]} | self.pending[k] | self.ghosts[k]

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def run(self) -> None:
        actions = ((0.70, self.session), (0.78, self.garbage), (0.86, self.half_sent),
                   (0.92, self.slow_reader), (1.00, self.connect_and_leave))
        while not self.stop.is_set():
            x = self.rng.random()
            action = next(f for limit, f in actions if x < limit)
            try:
                action()
            except (OSError, EOFError):
                # After SIGTERM connections are refused or closed: expected. Before it,
                # only the connections this client dropped on purpose end early.
                self.count("connection ended after SIGTERM" if self.terminating.is_set()
                           else "connection dropped by the client")

    # -- well-formed traffic ---------------------------------------------------------------
    def session(self) -> None:
        conn = Conn(self.port)
        try:
            for _ in range(self.rng.randint(1, 6)):
                self.pipeline(conn)
                if self.stop.is_set():
                    return
            if self.rng.random() < 0.3:
                conn.send(encode("QUIT"))
                self.expect("QUIT", conn.reply(), "OK")
        finally:
            conn.close()

    def write(self, k: int, value) -> None:
        self.pending[k].add(value)

    def pipeline(self, conn: Conn) -> None:
        rng = self.rng
        cmds = []
        for _ in range(rng.randint(1, 12)):
            x, k = rng.random(), rng.randrange(KEYS)
            if x < 0.35:
                self.seq += 1
                cmds.append(("SET", k, value_for(self.index, k, self.seq, rng.choice(SIZES))))
            elif x < 0.60:
                cmds.append(("GET", k))
            elif x < 0.66:
                cmds.append(("DEL", k))
            elif x < 0.70:
                cmds.append(("EXISTS", k))
            elif x < 0.75:
                cmds.append(("MGET", [rng.randrange(KEYS) for _ in range(rng.randint(1, 5))]))
            elif x < 0.79:
                pairs = []
                for _ in range(rng.randint(1, 3)):
                    kk = rng.randrange(KEYS)
                    self.seq += 1
                    pairs.append((kk, value_for(self.index, kk, self.seq, rng.choice(SIZES[:4]))))
                cmds.append(("MSET", pairs))
            else:
                cmds.append(("MISC", rng.choice(MISC)))
        wire = []
        for cmd in cmds:
            op = cmd[0]
            if op == "SET":
                wire.append(encode("SET", self.key(cmd[1]), cmd[2]))
                self.write(cmd[1], cmd[2])
            elif op in ("GET", "DEL", "EXISTS"):
                wire.append(encode(op, self.key(cmd[1])))
                if op == "DEL":
                    self.write(cmd[1], None)
            elif op == "MGET":
                wire.append(encode("MGET", *[self.key(k) for k in cmd[1]]))
            elif op == "MSET":
                args = []
                for kk, v in cmd[1]:
                    args += [self.key(kk), v]
                    self.write(kk, v)
                wire.append(encode("MSET", *args))
            else:
                wire.append(encode(*cmd[1]))
        data = b"".join(wire)
        if rng.random() < 0.3 and len(data) > 8:  # in pieces, cut anywhere
            cuts = sorted(rng.sample(range(1, len(data)), 4)) + [len(data)]
            start = 0
            for cut in cuts:
                conn.send(data[start:cut])
                start = cut
        else:
            conn.send(data)
        unanswered = list(cmds)
        try:
            if rng.random() < 0.05:
                conn.close()  # leave without reading a reply
                raise EOFError("dropped by the client")
            while unanswered:
                self.check(unanswered[0], conn.reply())
                unanswered.pop(0)
        except (OSError, EOFError):
            for cmd in unanswered:  # may still land, at any later moment
                if cmd[0] in ("SET", "DEL"):
                    self.ghost(cmd[1], cmd[2] if cmd[0] == "SET" else None)
                elif cmd[0] == "MSET":
                    for kk, v in cmd[1]:
                        self.ghost(kk, v)
            raise

    def ghost(self, k: int, value) -> None:
        self.pending[k].discard(value)
        self.ghosts[k].add(value)

    def settle(self, k: int, value) -> None:
        self.pending[k].discard(value)
        self.acked[k] = value

    def expect(self, what: str, got, want) -> bool:
        if got != want:
            self.errors.append(f"{what}: {str(got)[:80]} (expected {want})")
            return False
        return True

    def check(self, cmd, reply) -> None:
        op = cmd[0]
        if op == "SET":
            if self.expect(f"SET {self.key(cmd[1])}", reply, "OK"):
                self.settle(cmd[1], cmd[2])
                self.count("SET acknowledged")
        elif op == "MSET":
            if self.expect("MSET", reply, "OK"):
                for kk, v in cmd[1]:
                    self.settle(kk, v)
        elif op == "DEL":
            if reply in ("0", "1"):
                self.settle(cmd[1], None)
            else:
                self.errors.append(f"DEL {self.key(cmd[1])}: {reply!r}")
        elif op == "EXISTS":
            if reply not in ("0", "1"):
                self.errors.append(f"EXISTS {self.key(cmd[1])}: {reply!r}")
        elif op == "GET":
            if isinstance(reply, Error) or reply not in self.allowed(cmd[1]):
                self.errors.append(f"GET {self.key(cmd[1])}: {str(reply)[:60]} is no value it may hold")
            else:
                self.count("GET checked")
        elif op == "MGET":
            if not isinstance(reply, list) or len(reply) != len(cmd[1]):
                self.errors.append(f"MGET: {str(reply)[:80]}")
                return
            for k, v in zip(cmd[1], reply):
                if v not in self.allowed(k):
                    self.errors.append(f"MGET {self.key(k)}: {str(v)[:60]} is no value it may hold")
        elif cmd[1] == ["PING"]:
            self.expect("PING", reply, "PONG")

    # -- misbehaviour ----------------------------------------------------------------------
    def garbage(self) -> None:
        conn = Conn(self.port, timeout=2)
        try:
            blob = bytes(self.rng.randrange(256) for _ in range(self.rng.choice((1, 10, 100, 5000))))
            if self.rng.random() < 0.5:
                blob = b"*3\r\n$3\r\nSET\r\n" + blob
            conn.send(blob)
            try:
                while conn.sock.recv(65536):
                    pass
            except OSError:
                pass  # the server may wait for more: the timeout ends it
            self.count("garbage sent")
        finally:
            conn.close()

    def half_sent(self) -> None:
        conn = Conn(self.port)
        try:
            size = self.rng.choice((200_000, 800 * 1024, 3 << 20))
            key = b"half:%d" % self.index
            conn.send(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, size)
                      + b"x" * self.rng.randrange(size))
            self.count("half-sent SET")
        finally:
            conn.close()

    def slow_reader(self) -> None:
        conn = Conn(self.port)
        try:
            conn.send(encode("MGET", *[self.key(self.rng.randrange(KEYS)) for _ in range(30)]) * 3)
            time.sleep(self.rng.random() * 0.5)
            conn.sock.recv(1000)
            self.count("slow reader")
        finally:
            conn.close()

    def connect_and_leave(self) -> None:
        Conn(self.port).close()
        self.count("connect and leave")


def scraper(port: int, terminating: threading.Event, seed: int, tally: dict) -> None:
    rng = random.Random(seed)
    while not terminating.is_set():  # after SIGTERM a scrape may be cut off: not counted
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                good = rng.random() < 0.7
                sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n" if good
                             else bytes(rng.randrange(256) for _ in range(rng.choice((3, 100, 9000)))))
                data = b""
                while len(data) < 1 << 20:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            if good and not terminating.is_set():
                ok = data.startswith(b"HTTP/1.0 200") and b"nvmw_server_commands_total" in data
                tally["scrapes good" if ok else "scrapes wrong"] += 1
        except OSError:
            pass  # garbage the server waits on, or a scrape after SIGTERM
        time.sleep(0.02)


def server_env(asan_core: str | None) -> dict:
    env = dict(os.environ, PMEM_IS_PMEM_FORCE="1")
    if asan_core:
        # This checkout's Python package, with the instrumented core from `asan_core`.
        env["PYTHONPATH"] = os.path.join(ROOT, "python")
        cxx = os.environ.get("CXX", "c++")
        libs = [subprocess.check_output([cxx, f"-print-file-name={lib}"], text=True).strip()
                for lib in ("libasan.so", "libstdc++.so")]
        env.update(LD_PRELOAD=" ".join(libs), NVMW_DEV_CORE_DIR=os.path.abspath(asan_core),
                   ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
                   UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    return env


def start_server(args: list[str], env: dict) -> tuple[subprocess.Popen, int, int]:
    """Starts `nvmw serve` on ports it picks itself (a port chosen here and handed over
    could be taken by another process in between); returns it with its port and its
    metrics port, read from the lines it prints once it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "nvmw", "serve", "--port", "0", "--metrics-port", "0",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first, second = proc.stdout.readline(), proc.stdout.readline()
    match = re.search(r"listening on [\d.]+:(\d+)", first)
    metrics = re.search(r"metrics on http://[\d.]+:(\d+)/metrics", second)
    if match is None or metrics is None:
        proc.kill()
        raise RuntimeError(f"the server did not start: {first!r} {second!r} {proc.stderr.read()[-2000:]}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
    return proc, int(match.group(1)), int(metrics.group(1))


def run(seed: int, seconds: float, clients: int, asan_core: str | None, pool_dir: str) -> dict:
    rng = random.Random(seed)
    controller = rng.choice(("fixed:2,1", "fixed:15,15", "none", "aimd", "gradient"))
    layout = rng.choice(([], ["--batch-io-threads", "0"], ["--no-batch-io-idle"]))
    if rng.random() < 0.25:
        layout = layout + ["--device", "optane-1dimm"]  # the emulated device's waits in the path
    pool = os.path.join(pool_dir, f"nvmw-chaos-{os.getpid()}-{seed}.pool")
    args = ["--path", pool, "--pool-mb", "512", "--window", "0.2", "--io-threads", "2",
            "--max-bulk-bytes", str(4 << 20), *layout]
    env = server_env(asan_core)
    report = {"seed": seed, "seconds": seconds, "clients": clients, "controller": controller,
              "server_args": layout, "asan": bool(asan_core)}
    try:
        proc, port, metrics_port = start_server(["--controller", controller, *args], env)
        stop, terminating = threading.Event(), threading.Event()
        threads = [Client(i, port, stop, terminating, seed * 1000 + i) for i in range(clients)]
        tally = {"scrapes good": 0, "scrapes wrong": 0}
        scrape = threading.Thread(target=scraper, args=(metrics_port, terminating, seed, tally), daemon=True)
        for t in threads + [scrape]:
            t.start()
        time.sleep(seconds)
        terminating.set()
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        try:
            report["exit_status"] = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            report["exit_status"] = "did not exit within 120 s of SIGTERM"
        report["drain_s"] = round(time.monotonic() - t0, 2)
        stop.set()
        for t in threads + [scrape]:
            t.join(timeout=60)
        stderr = proc.stderr.read()
        report["server_problems"] = [line for line in stderr.splitlines()
                                     if re.search(r"Sanitizer|runtime error|Traceback", line)][:20]
        counts: dict[str, int] = dict(tally)
        for t in threads:
            for k, v in t.counts.items():
                counts[k] = counts.get(k, 0) + v
        report["counts"] = counts
        report["client_errors"] = [e for t in threads for e in t.errors][:20]

        # Every key read back after a restart on the same pool.
        proc, port, _ = start_server(["--controller", "fixed:2,1", *args[:4]], env)
        wrong = []
        conn = Conn(port)
        for t in threads:
            for k in range(KEYS):
                conn.send(encode("GET", t.key(k)))
                value = conn.reply()
                if value not in t.allowed(k):
                    wrong.append(f"{t.key(k)}: {str(value)[:60]}")
        conn.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        report["keys_checked_after_restart"] = clients * KEYS
        report["keys_wrong_after_restart"] = wrong[:20]
    finally:
        if os.path.exists(pool):
            os.remove(pool)
    report["ok"] = (report.get("exit_status") == 0 and not report["server_problems"]
                    and not report["client_errors"] and not report["keys_wrong_after_restart"]
                    and counts["scrapes good"] > 0 and counts["scrapes wrong"] == 0)
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--seconds", type=float, default=20.0, help="traffic before SIGTERM, per seed")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--asan-core", metavar="DIR", help="directory of an AddressSanitizer build of nvmw._core")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where the pool files go (default /dev/shm)")
    ap.add_argument("--json", metavar="OUT", help="also write the report here")
    args = ap.parse_args()
    runs = []
    for seed in args.seeds:
        r = run(seed, args.seconds, args.clients, args.asan_core, args.dir or ".")
        runs.append(r)
        c = r["counts"]
        print(f"seed {seed}: {'ok' if r['ok'] else 'FAILED'}; controller {r['controller']} {r['server_args']}; "
              f"{c.get('SET acknowledged', 0)} SETs acknowledged, {c.get('GET checked', 0)} GETs checked, "
              f"{c['scrapes good']} scrapes; exit {r['exit_status']} {r['drain_s']} s after SIGTERM; "
              f"{r['keys_checked_after_restart']} keys read back, {len(r['keys_wrong_after_restart'])} wrong",
              flush=True)
        for problem in r["server_problems"] + r["client_errors"] + r["keys_wrong_after_restart"]:
            print("   ", problem)
    report = {"command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), "runs": runs,
              "ok": all(r["ok"] for r in runs)}
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(json.dumps(report, indent=2) + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
