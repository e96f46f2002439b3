"""`nvmw serve` and redis-server side by side, one run, same machine, same clients.

Both servers run at once on loopback ports. Each round runs every measurement on one
server and at once on the other (the order alternates from round to round), so the two
figures a ratio compares are taken seconds apart and background load on a shared machine
falls on both. For every goal the per-round ratio (nvmw over Redis, or a server's
co-located run over its own alone run) is recorded; the report gives its median over
`--rounds` rounds and its min-max spread (`ratios`), whether the goal holds on the median
and in every round (`goals_met`), the load average at the start and end of every round
(`round_loads`) and of the run, and the median round of each server (`summary`).

  (a) redis-benchmark, 128 B SET and GET, 50 clients: ops/s and p99, and the CPU time
      per request of the server and of redis-benchmark.
  (b) co-location: interactive 128 B SETs (redis-benchmark, `--inter-clients` clients) alone,
      then while `--batch-clients` connections (redis-py threads of this script) SET 800 KB
      values from 1 s before the interactive run until after it: the interactive p99 and
      ops/s in both cases, and the batch SET/s over the interactive run.
  (c) 800 KB GET throughput, 20 clients, over `--big-keys` stored values.

nvmw serves a pmem pool on /dev/shm (PMEM_IS_PMEM_FORCE=1: cache-line flushes, every
acknowledged SET durable in the pool) with the server's defaults, and the rounds begin
once it has moved the pool to 2 MiB pages (it does so in the background after the open;
`--serve-arg=--no-huge-pages` measures it on 4 KiB pages; `nvmw_pool_pages` in the report); Redis runs with
persistence off (`--save "" --appendonly no`), its fastest configuration, unless
`--redis-persistence` asks for its append-only file on the same tmpfs as nvmw's pool
(`aof-always`: fsync before every reply, so that an acknowledged SET survives a crash as
nvmw's does; `aof-everysec`: Redis's recommended setting, up to a second lost). nvmw's classes
come from the size rule (no client here sends NVMW.CLASS): 128 B SETs are interactive,
800 KB SETs batch. Progress (each round's ratios) goes to stderr. `--only` runs a part of
the measurements (the goals of the others are left out of the report); `--batch-nice`
and `--serve-arg` change nvmw's configuration.

    python bench/serve_vs_redis.py --rounds 7 --out bench/results-serve.json
    python bench/serve_vs_redis.py --only b --rounds 5 --batch-nice 10
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import platform
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from _report import emit

VALUE_BIG = 800 * 1024

# --redis-persistence: redis-server arguments, and how the report names the configuration.
REDIS_PERSISTENCE = {
    "none": (("--appendonly", "no"), "redis-server --save '' --appendonly no (no persistence)"),
    "aof-always": (("--appendonly", "yes", "--appendfsync", "always"),
                   "redis-server --save '' --appendonly yes --appendfsync always (AOF on /dev/shm, "
                   "fsync before every reply)"),
    "aof-everysec": (("--appendonly", "yes", "--appendfsync", "everysec"),
                     "redis-server --save '' --appendonly yes --appendfsync everysec (AOF on /dev/shm)"),
}


#: strerror(EADDRINUSE), as redis-server logs a port it could not bind.
ADDRESS_IN_USE = "Address already in use"
#: Starts of redis-server tried before giving up: a port taken between its pick and the
#: server's bind is rare, and one taken five times in a row says something is wrong.
REDIS_ATTEMPTS = 5


def free_port() -> int:
    """A port no socket on loopback had bound a moment ago (another process may take it
    before whoever it is given binds it: start_redis tries again then)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _drain(stream) -> None:
    """Reads `stream` to its end, dropping what it reads, and closes it."""
    with stream:
        while stream.read1(65536):
            pass


def start_nvmw(cmd: list, env: dict, timeout: float = 120.0) -> tuple:
    """Starts `nvmw serve` (`cmd`, with `--port 0`: the server binds a port of its own, which
    no other process can take) and returns (port, process) once it listens, the port read
    from its "listening on" line; its later output is read and dropped, so that it never
    blocks on a full pipe."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text, deadline = b"", time.monotonic() + timeout
    while (m := re.search(rb"listening on [\d.]+:(\d+)", text)) is None:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            proc.kill()
            proc.wait()
            proc.stdout.close()
            raise RuntimeError(f"nvmw serve did not start in {timeout:g} s: {text.decode(errors='replace')}")
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            proc.wait()
            proc.stdout.close()
            raise RuntimeError(f"nvmw serve exited at start ({proc.returncode}): {text.decode(errors='replace')}")
        text += chunk
    threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
    return int(m.group(1)), proc


def start_redis(argv, log: str, timeout: float = 120.0) -> tuple:
    """Starts redis-server (`argv(port)`, logging to the file `log`) and returns (port,
    process) once it accepts connections. redis-server takes `--port 0` as "no TCP", so it
    is given a port that was free a moment before; when another process took it meanwhile
    (the server exits, its log says so), it is started again on a new one, at most
    REDIS_ATTEMPTS starts in all."""
    for _ in range(REDIS_ATTEMPTS):
        port = free_port()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(log)  # redis-server appends: only this start's lines
        proc = subprocess.Popen(argv(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open(log, errors="replace") as f:
                    said = f.read()
            except FileNotFoundError:
                said = ""
            if "Ready to accept connections" in said:  # logged once it has bound the port
                return port, proc
            if proc.poll() is not None:
                if ADDRESS_IN_USE in said:
                    break
                raise RuntimeError(f"redis-server exited at start ({proc.returncode}): {said}")
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"redis-server did not start in {timeout:g} s: {said}")
            time.sleep(0.1)
    raise RuntimeError(f"each of {REDIS_ATTEMPTS} starts of redis-server found its port taken by another "
                       f"process; the last said: {said}")


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        sys.exit(f"{tool} is not installed: scripts/setup.sh installs it")
    return path


def pool_pages(pid: int, pool: str) -> dict:
    """How the server process maps its pool file: KiB mapped, KiB of it on 2 MiB pages."""
    out = {"mapped_kib": 0, "huge_kib": 0}
    inside = False
    try:
        with open(f"/proc/{pid}/smaps") as fh:
            for line in fh:
                head = line.split(" ", 1)[0]
                if "-" in head and all(c in "0123456789abcdef-" for c in head):
                    inside = line.rstrip("\n").endswith(pool)
                elif inside and line.startswith("Size:"):
                    out["mapped_kib"] += int(line.split()[1])
                elif inside and line.split(":")[0] in ("ShmemPmdMapped", "FilePmdMapped"):
                    out["huge_kib"] += int(line.split()[1])
    except OSError:
        pass
    return out


def wait_huge_pages(pid: int, pool: str, timeout: float) -> dict:
    """Waits (at most `timeout` s) until the server has moved its pool to 2 MiB pages, as
    it does in the background after the open (`nvmw serve --huge-pages`, the default), so
    that the rounds measure the server as it runs from then on. Stops early when the
    share stops growing (a kernel or filesystem that cannot, or --no-huge-pages)."""
    start = time.monotonic()
    last, still = -1, 0
    while time.monotonic() - start < timeout:
        pages = pool_pages(pid, pool)
        if pages["mapped_kib"] and pages["huge_kib"] >= pages["mapped_kib"]:
            break
        still = still + 1 if pages["huge_kib"] == last else 0
        if still >= 20:  # 2 s without progress
            break
        last = pages["huge_kib"]
        time.sleep(0.1)
    pages = pool_pages(pid, pool)
    pages["waited_s"] = round(time.monotonic() - start, 1)
    return pages


def bench(port: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen([need("redis-benchmark"), "-p", str(port), "--csv", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def results(proc: subprocess.Popen, timeout: float = 900.0) -> dict:
    """{test: {"ops_per_s", "p50_ms", "p99_ms", "avg_ms"}} from redis-benchmark's CSV."""
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed ({proc.returncode}): {err.strip()}")
    rows = {}
    for row in csv.DictReader(io.StringIO(out)):
        rows[row["test"]] = {"ops_per_s": float(row["rps"]), "avg_ms": float(row["avg_latency_ms"]),
                             "p50_ms": float(row["p50_latency_ms"]), "p99_ms": float(row["p99_latency_ms"])}
    if not rows or re.search(r"\berr", err, re.I):
        raise RuntimeError(f"redis-benchmark reported no results or errors: {out} {err}")
    return rows


def run(port: int, *args: str) -> dict:
    return results(bench(port, *args))


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_with_cpu(port: int, pid: int, test: str, n: int, *args: str) -> dict:
    """One redis-benchmark test, with the CPU time per request of the server (all its
    threads) and of redis-benchmark (the only child reaped meanwhile): on 2 cores the
    two share the machine, so ops/s follows whichever costs more per request."""
    import resource

    server0, client0 = process_cpu_s(pid), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = run(port, "-t", test, "-n", str(n), *args)[test.upper()]
    elapsed = time.monotonic() - t0
    server1, client1 = process_cpu_s(pid), resource.getrusage(resource.RUSAGE_CHILDREN)
    client_s = (client1.ru_utime - client0.ru_utime) + (client1.ru_stime - client0.ru_stime)
    return dict(r, server_cpu_us_per_op=round(1e6 * (server1 - server0) / n, 2),
                client_cpu_us_per_op=round(1e6 * client_s / n, 2),
                server_cpu_util=round((server1 - server0) / elapsed, 2),
                client_cpu_util=round(client_s / elapsed, 2))


class BatchLoad:
    """`clients` connections, each SETting 800 KB values to random keys of `keys` until stopped."""

    def __init__(self, port: int, clients: int, keys: int):
        import threading

        self.port, self.keys = port, keys
        self.done = [0] * clients
        self.errors = [0] * clients
        self.halt = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(clients)]

    def _run(self, i: int) -> None:
        import random

        import redis

        r = redis.Redis(host="127.0.0.1", port=self.port, protocol=2, socket_timeout=120)
        value = os.urandom(VALUE_BIG)
        rng = random.Random(i)
        while not self.halt.is_set():
            try:
                r.set(f"key:{rng.randrange(self.keys):012d}", value)
                self.done[i] += 1
            except redis.RedisError:
                self.errors[i] += 1
        r.close()

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def count(self) -> int:
        return sum(self.done)

    def stop(self) -> int:
        self.halt.set()
        for t in self.threads:
            t.join()
        return sum(self.errors)


def fill_big_keys(port: int, n: int) -> None:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port, protocol=2, socket_timeout=120)
    value = os.urandom(VALUE_BIG)
    for lo in range(0, n, 20):
        pipe = r.pipeline(transaction=False)
        for k in range(lo, min(n, lo + 20)):
            pipe.set(f"key:{k:012d}", value)
        pipe.execute()
    r.close()


def median_round(rounds: list, key) -> dict:
    """The round whose `key` is the median (a real round, not a mix of rounds)."""
    ordered = sorted(rounds, key=key)
    return ordered[(len(ordered) - 1) // 2]


def colocation(port: int, args) -> dict:
    """(b) on one server: the interactive run alone, then beside the batch load."""
    inter_args = ("-t", "set", "-n", str(args.inter_n), "-c", str(args.inter_clients), "-d", "128",
                  "-r", "100000")
    t0 = time.monotonic()
    alone = run(port, *inter_args)["SET"]
    inter_s = time.monotonic() - t0
    # Batch: `--batch-clients` connections SET 800 KB values in a loop, started 1 s before
    # the interactive run and stopped after it; its rate is counted over the interactive
    # run only (acknowledged SETs / its duration).
    batch = BatchLoad(port, args.batch_clients, args.big_keys)
    batch.start()
    time.sleep(1.0)
    c0, t0 = batch.count(), time.monotonic()
    together = run(port, *inter_args)["SET"]
    inter_together_s = time.monotonic() - t0
    batch_sets = batch.count() - c0
    errors = batch.stop()
    return {"interactive_alone": alone, "interactive_colocated": together,
            "batch": {"ops_per_s": round(batch_sets / inter_together_s, 1),
                      "sets_during_interactive": batch_sets, "errors": errors},
            "interactive_alone_s": round(inter_s, 2), "interactive_colocated_s": round(inter_together_s, 2)}


def round_ratios(a: dict, b: dict, c: dict) -> dict:
    """The figures the goals compare, for one round (nvmw against Redis measured back to
    back in that round, and each server's co-located run against its own alone run); a
    measurement not run (empty) gives no ratios."""
    out = {}
    if a:
        n_a, r_a = a["nvmw"], a["redis"]
        for t in ("set", "get"):
            out[f"a_{t}_ops_nvmw_over_redis"] = n_a[t]["ops_per_s"] / r_a[t]["ops_per_s"]
            out[f"a_{t}_p99_nvmw_over_redis"] = n_a[t]["p99_ms"] / r_a[t]["p99_ms"] if r_a[t]["p99_ms"] else None
            out[f"a_{t}_server_cpu_nvmw_over_redis"] = (n_a[t]["server_cpu_us_per_op"] / r_a[t]["server_cpu_us_per_op"]
                                                        if r_a[t]["server_cpu_us_per_op"] else None)
    if b:
        n_b, r_b = b["nvmw"], b["redis"]
        for n, x in (("nvmw", n_b), ("redis", r_b)):
            ia, it = x["interactive_alone"], x["interactive_colocated"]
            out[f"b_{n}_p99_colocated_over_alone"] = it["p99_ms"] / ia["p99_ms"] if ia["p99_ms"] else None
            out[f"b_{n}_ops_colocated_over_alone"] = it["ops_per_s"] / ia["ops_per_s"]
        out["b_batch_nvmw_over_redis"] = (n_b["batch"]["ops_per_s"] / r_b["batch"]["ops_per_s"]
                                          if r_b["batch"]["ops_per_s"] else None)
    if c:
        out["c_get_800KB_nvmw_over_redis"] = c["nvmw"]["ops_per_s"] / c["redis"]["ops_per_s"]
    return {k: (round(v, 3) if v is not None else None) for k, v in out.items()}


def spread(values: list) -> dict:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "rounds": values}
    return {"median": round(statistics.median(vals), 3), "min": min(vals), "max": max(vals), "rounds": values}


def measure(servers: dict, pids: dict, args) -> dict:
    """Rounds of (a), (b), (c); within a round each measurement runs on one server and
    then at once on the other (the order alternates from round to round), so the two
    figures a ratio compares are taken seconds apart and background load that comes and
    goes falls on both."""
    names = list(servers)
    out = {n: {"a": [], "b": [], "c": []} for n in names}
    ratios, loads = [], []
    # (c)'s keys: the names redis-benchmark -r uses, each set to an 800 KB value (the
    # batch load of (b) overwrites them with values of the same size).
    for n in names:
        fill_big_keys(servers[n], args.big_keys)
    parts = set(args.only or "abc")
    for rnd in range(args.rounds):
        order = names if rnd % 2 == 0 else names[::-1]
        load0 = os.getloadavg()[0]
        a, b, c = {}, {}, {}
        # (a) 128 B SET, then GET, 50 clients; one redis-benchmark per test and server,
        # so that each test's CPU time per request is its own.
        if "a" in parts:
            a = {n: {} for n in names}
            small = ("-c", "50", "-d", "128", "-r", "100000")
            for t in ("set", "get"):
                for n in order:
                    a[n][t] = run_with_cpu(servers[n], pids[n], t, args.small_n, *small)
        # (b) co-location, (c) 800 KB GETs.
        if "b" in parts:
            b = {n: colocation(servers[n], args) for n in order}
        if "c" in parts:
            for n in order:
                c[n] = run(servers[n], "-t", "get", "-n", str(args.big_get_n), "-c", "20",
                           "-r", str(args.big_keys))["GET"]
        for n in names:
            for part, got in (("a", a), ("b", b), ("c", c)):
                if got:
                    out[n][part].append(got[n])
        ratios.append(round_ratios(a, b, c))
        loads.append({"round": rnd, "order": order, "load_avg_1m_start": round(load0, 2),
                      "load_avg_1m_end": round(os.getloadavg()[0], 2)})
        print(f"round {rnd + 1}/{args.rounds} (load {load0:.2f} -> {os.getloadavg()[0]:.2f}): "
              + json.dumps(ratios[-1]), file=sys.stderr, flush=True)
    summary = {}
    for n in names:
        summary[n] = {}
        if "a" in parts:
            a = median_round(out[n]["a"], lambda x: x["set"]["ops_per_s"] + x["get"]["ops_per_s"])
            summary[n].update({"a_set_128B": a["set"], "a_get_128B": a["get"]})
        if "b" in parts:
            b = median_round(out[n]["b"], lambda x: x["interactive_colocated"]["p99_ms"])
            ia, it = b["interactive_alone"], b["interactive_colocated"]
            summary[n].update({
                "b_interactive_alone": ia, "b_interactive_colocated": it, "b_batch_set_800KB": b["batch"],
                "b_p99_colocated_over_alone": round(it["p99_ms"] / ia["p99_ms"], 3) if ia["p99_ms"] else None,
                "b_ops_colocated_over_alone": round(it["ops_per_s"] / ia["ops_per_s"], 3),
            })
        if "c" in parts:
            c = median_round(out[n]["c"], lambda x: x["ops_per_s"])
            summary[n]["c_get_800KB"] = dict(c, mb_per_s=round(c["ops_per_s"] * VALUE_BIG / 1e6, 1))
    per_round = {k: spread([r[k] for r in ratios]) for k in ratios[0]}
    return {"summary": summary, "ratios": per_round, "round_loads": loads, "rounds": out}


def goals(ratios: dict) -> dict:
    """Each goal judged on the median over the rounds of its per-round ratio, and on every
    round (`..._every_round`: the goal held in the worst round too)."""
    def holds(v, op: str, bound: float) -> bool:
        return v is not None and (v >= bound if op == ">=" else v <= bound)

    checks = {
        "a_set_ops_ge_redis": ("a_set_ops_nvmw_over_redis", ">=", 1.0),
        "a_get_ops_ge_redis": ("a_get_ops_nvmw_over_redis", ">=", 1.0),
        "a_set_p99_le_redis": ("a_set_p99_nvmw_over_redis", "<=", 1.0),
        "a_get_p99_le_redis": ("a_get_p99_nvmw_over_redis", "<=", 1.0),
        "b_colocated_p99_le_2x_alone": ("b_nvmw_p99_colocated_over_alone", "<=", 2.0),
        "b_colocated_ops_ge_0.8x_alone": ("b_nvmw_ops_colocated_over_alone", ">=", 0.8),
        "b_batch_set_ge_redis": ("b_batch_nvmw_over_redis", ">=", 1.0),
        "c_get_800KB_ge_redis": ("c_get_800KB_nvmw_over_redis", ">=", 1.0),
    }
    out = {}
    for goal, (k, op, bound) in checks.items():
        if k not in ratios:
            continue
        worst = ratios[k]["min"] if op == ">=" else ratios[k]["max"]
        out[goal] = holds(ratios[k]["median"], op, bound)
        out[goal + "_every_round"] = holds(worst, op, bound)
    return out


def version(cmd: list) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--small-n", type=int, default=100_000, help="(a) requests per test")
    ap.add_argument("--inter-n", type=int, default=200_000, help="(b) interactive SETs")
    ap.add_argument("--inter-clients", type=int, default=4)
    ap.add_argument("--batch-clients", type=int, default=20)
    ap.add_argument("--big-keys", type=int, default=200, help="(b, c) distinct 800 KB keys")
    ap.add_argument("--big-get-n", type=int, default=4000, help="(c) 800 KB GETs")
    ap.add_argument("--controller", default="fixed:15,15", help="nvmw serve --controller")
    ap.add_argument("--io-threads", type=int, default=None, help="nvmw serve --io-threads")
    ap.add_argument("--batch-nice", type=int, default=None,
                    help="nvmw serve --batch-nice (default: the server's own)")
    ap.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for nvmw serve (repeatable), e.g. --serve-arg=--no-batch-io-idle")
    ap.add_argument("--redis-persistence", choices=tuple(REDIS_PERSISTENCE), default="none",
                    help="Redis's durability: none (default: no persistence, its fastest), or its "
                         "append-only file fsynced before every reply (aof-always) or every second "
                         "(aof-everysec), in the same tmpfs directory as nvmw's pool")
    ap.add_argument("--only", choices=("a", "b", "c"), action="append", default=None,
                    help="run only these measurements (repeatable; default: all three); the goals of "
                         "the others are reported as not measured")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args()
    need("redis-benchmark")
    redis_server = need("redis-server")

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="nvmw-serve-bench-", dir="/dev/shm") as d:
        log = os.path.join(d, "redis.log")
        rport, redis_proc = start_redis(lambda port: [
            redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            *REDIS_PERSISTENCE[args.redis_persistence][0], "--dir", d, "--logfile", log], log)
        env = dict(os.environ, PMEM_IS_PMEM_FORCE="1")
        cmd = [sys.executable, "-m", "nvmw", "serve", "--port", "0", "--engine", "pmem", "--path",
               os.path.join(d, "serve.pool"), "--pool-mb", "2048", "--controller", args.controller]
        if args.io_threads:
            cmd += ["--io-threads", str(args.io_threads)]
        if args.batch_nice is not None:
            cmd += ["--batch-nice", str(args.batch_nice)]
        cmd += args.serve_arg
        try:
            nport, nvmw_proc = start_nvmw(cmd, env)
        except BaseException:
            redis_proc.send_signal(signal.SIGTERM)
            redis_proc.wait(timeout=60)
            raise
        try:
            pool_at_start = wait_huge_pages(nvmw_proc.pid, os.path.join(d, "serve.pool"), timeout=300)
            print(f"nvmw's pool: {pool_at_start['huge_kib'] >> 10} of {pool_at_start['mapped_kib'] >> 10} MiB "
                  f"on 2 MiB pages after {pool_at_start['waited_s']} s", file=sys.stderr)
            result = measure({"nvmw": nport, "redis": rport}, {"nvmw": nvmw_proc.pid, "redis": redis_proc.pid}, args)
        finally:
            pool_at_end = pool_pages(nvmw_proc.pid, os.path.join(d, "serve.pool"))
            for p in (nvmw_proc, redis_proc):
                p.send_signal(signal.SIGTERM)
            nvmw_rc, redis_rc = nvmw_proc.wait(timeout=300), redis_proc.wait(timeout=60)
    import nvmw

    commit = version(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD"])
    report = {
        "machine": {"cores": os.cpu_count(), "load_avg_1_5_15_before": [round(x, 2) for x in load_before],
                    "load_avg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
                    "python": platform.python_version(), "kernel": platform.release()},
        "versions": {"nvmw": nvmw.__version__, "nvmw_commit": commit, "redis_server": version([redis_server, "--version"]),
                     "redis_benchmark": version([need("redis-benchmark"), "--version"])},
        "config": {"nvmw": f"nvmw serve --engine pmem (pool on /dev/shm, PMEM_IS_PMEM_FORCE=1) --controller "
                           f"{args.controller}" + (f" --io-threads {args.io_threads}" if args.io_threads else "")
                           + (f" --batch-nice {args.batch_nice}" if args.batch_nice is not None else "")
                           + "".join(f" {a}" for a in args.serve_arg)
                           + " (otherwise the defaults: 1 batch loop under SCHED_IDLE"
                           + (", batch workers at nice 19)" if args.batch_nice is None else ")"),
                   "redis": REDIS_PERSISTENCE[args.redis_persistence][1],
                   "rounds": args.rounds, "parts": sorted(set(args.only or "abc")), "small_n": args.small_n, "inter_n": args.inter_n,
                   "inter_clients": args.inter_clients, "batch_clients": args.batch_clients,
                   "big_keys": args.big_keys, "big_get_n": args.big_get_n, "value_big_bytes": VALUE_BIG},
        "exit_codes": {"nvmw": nvmw_rc, "redis": redis_rc},
        # KiB of nvmw's pool mapping, and of it on 2 MiB pages, when the rounds began
        # (after waiting for the server's background move) and when they ended.
        "nvmw_pool_pages": {"start": pool_at_start, "end": pool_at_end},
        **result,
    }
    report["goals_met"] = goals(report["ratios"])
    emit(report, args.out, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
