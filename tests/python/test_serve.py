"""`nvmw serve` with real clients: redis-py (sync and asyncio), redis-cli, redis-benchmark,
promtool on the metrics, twemproxy in front of two servers, SIGTERM drain, SIGKILL during
SETs with a restart on the same pool, and 1,000 connect/disconnect cycles at flat RSS.

Every server is a `python -m nvmw serve` child on an ephemeral port (never 6379). The
system tools are installed by scripts/setup.sh; a missing one fails its test and says so."""
import asyncio
import json
import os
import queue
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import nvmw
from ports import listening_ports, start_failed, with_free_ports

redis = pytest.importorskip("redis", reason="redis-py is installed by scripts/setup.sh")
import redis.asyncio  # noqa: E402

START_TIMEOUT_S = 60.0


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: scripts/setup.sh installs it (Debian packages redis-server, "
                    "redis-tools, nutcracker, prometheus)")
    return path


def child_env() -> dict:
    """The child imports the same nvmw as this test (package dir and dev core)."""
    env = dict(os.environ, PMEM_IS_PMEM_FORCE="1", PYTHONUNBUFFERED="1")
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(nvmw.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def plain_client(port: int) -> "redis.Redis":
    """A client that sends only data commands: twemproxy closes the connection on the
    CLIENT SETINFO that redis-py sends at connect by default."""
    kw = dict(host="127.0.0.1", port=port, socket_timeout=30, protocol=2)
    try:
        return redis.Redis(driver_info=None, **kw)
    except TypeError:  # redis-py before 7: no driver_info
        return redis.Redis(lib_name=None, lib_version=None, **kw)


class Served:
    """One `nvmw serve` child process; `port` is the one it printed."""

    def __init__(self, *args: str):
        self.args = ["--port", "0", "--window", "0.2", *args]
        self.proc = subprocess.Popen([sys.executable, "-m", "nvmw", "serve", *self.args], env=child_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.output: list = []
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()
        self.port = None
        self.metrics_port = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.port is None:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                pytest.fail(f"nvmw serve did not start: {''.join(self.output)}")
            if line is None:
                pytest.fail(f"nvmw serve exited at start ({self.proc.wait()}): {''.join(self.output)}")
            m = re.search(r"listening on [\d.]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        if "--metrics-port" in args:
            line = self.lines.get(timeout=10)
            self.metrics_port = int(re.search(r"metrics on http://[\d.]+:(\d+)/", line).group(1))

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)
        self.lines.put(None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def client(self, **kw) -> "redis.Redis":
        kw.setdefault("protocol", 2)
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=30, **kw)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            return r.read().decode()

    def terminate(self, timeout: float = 120.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=timeout)
        self._close()
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close()

    def _close(self) -> None:
        self._pump_thread.join(timeout=30)
        self.proc.stdout.close()

    def text(self) -> str:
        return "".join(self.output)


@pytest.fixture(scope="module")
def served():
    s = Served("--engine", "memory", "--metrics-port", "0")
    yield s
    assert s.terminate() == 0, s.text()


def metric(text: str, name: str, **labels) -> float:
    """The value of one sample of the exposition text."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if m and m.group(1) == name:
            got = ",".join(sorted((m.group(2) or "{}")[1:-1].split(","))) if m.group(2) else ""
            if got == want:
                return float(m.group(3))
    raise KeyError(f"{name}{{{want}}} not in the metrics")


# --- redis-py --------------------------------------------------------------------------


def test_commands_through_redis_py(served):
    r = served.client()
    assert r.ping() is True
    assert r.echo(b"hello") == b"hello"
    assert r.set("k1", "v1") is True
    assert r.get("k1") == b"v1"
    assert r.get("missing-key") is None
    assert r.exists("k1", "missing-key", "k1") == 2
    assert r.mset({"m1": b"a", "m2": b"b", "m3": b""}) is True
    assert r.mget(["m1", "missing-key", "m2", "m3"]) == [b"a", None, b"b", b""]
    assert r.delete("m1", "m2", "missing-key") == 2
    assert r.mget(["m1", "m2"]) == [None, None]
    assert r.dbsize() >= 2  # k1, m3 (other tests of this module share the server)
    assert r.select(0) is True
    info = r.info()
    assert isinstance(info, dict) and info
    with pytest.raises(redis.ResponseError):
        r.set("k1", "v2", ex=10)  # expiry is not supported: a clear error, not silently ignored
    with pytest.raises(redis.ResponseError):
        r.set("k1", "v2", nx=True)
    assert r.get("k1") == b"v1"
    r.close()


def test_info_through_redis_py():
    """The INFO fields monitoring tools read (redis-cli --stat, redis_exporter-style
    scrapers, redis-py's info()), with this server's own values. A server of its own: its
    first INFO is the one before the commands, so instantaneous_ops_per_sec covers them."""
    served = Served("--engine", "memory")
    try:
        r = served.client()
        assert r.set("info-hit", "v") is True
        before = r.info("stats")
        assert r.get("info-hit") == b"v" and r.get("info-miss") is None
        assert r.mget("info-hit", "info-miss", "info-hit") == [b"v", None, b"v"]
        assert r.exists("info-hit", "info-miss") == 1
        assert r.delete("info-miss") == 0  # not a lookup, as in Redis
        stats = r.info("stats")
        assert stats["keyspace_hits"] - before["keyspace_hits"] == 4
        assert stats["keyspace_misses"] - before["keyspace_misses"] == 3
        assert stats["total_commands_processed"] - before["total_commands_processed"] == 6
        assert stats["instantaneous_ops_per_sec"] > 0  # these commands, over the time since the INFO before them
        assert stats["expired_keys"] == 0 and stats["evicted_keys"] == 0  # no expiry, no eviction
        info = r.info()
        assert info["process_id"] == served.pid
        assert info["tcp_port"] == served.port
        assert info["executable"] == os.readlink(f"/proc/{served.pid}/exe")
        assert info["config_file"] == ""
        assert re.fullmatch(r"[0-9a-f]{40}", str(info["run_id"]))
        assert info["uptime_in_days"] == info["uptime_in_seconds"] // 86400
        assert info["io_threads_active"] == 0  # as Redis with one io thread: a flag, not a count
        assert info["connected_clients"] == 1 and info["blocked_clients"] == 0
        assert info["maxclients"] == int(r.config_get("maxclients")["maxclients"])
        assert info["used_memory"] > 0 and info["used_memory_rss"] == info["used_memory"]
        assert info["used_memory_human"] == f"{info['used_memory'] / 2**20:.2f}M"
        assert info["maxmemory"] == 0 and info["maxmemory_policy"] == "noeviction"
        assert info["total_connections_received"] == 1 and info["rejected_connections"] == 0
        assert info["total_commands_processed"] > stats["total_commands_processed"]
        assert info["db0"] == {"keys": r.dbsize(), "expires": 0, "avg_ttl": 0}
        r.close()
    finally:
        rc = served.terminate()
    assert rc == 0, served.text()


def test_keys_the_store_cannot_hold(served):
    """An empty key cannot be stored: reads see no such key (as Redis does for a key never
    set), and an MSET naming one is refused whole, writing none of its pairs."""
    r = served.client()
    assert r.set("e1", b"v") is True
    assert r.get("") is None
    assert r.mget(["e1", ""]) == [b"v", None]
    assert r.exists("e1", "") == 1
    assert r.delete("e1", "") == 1
    assert r.get("e1") is None
    with pytest.raises(redis.ResponseError, match="empty key"):
        r.set("", b"v")
    with pytest.raises(redis.ResponseError, match="empty key"):
        r.mset({"e2": b"1", "": b"2", "e3": b"3"})
    assert r.mget(["e2", "e3"]) == [None, None]
    r.close()


def test_a_default_redis_py_client_connects(served):
    """redis-py's own defaults (it asks for RESP3 with HELLO 3 first) work too."""
    r = redis.Redis(host="127.0.0.1", port=served.port, socket_timeout=30)
    assert r.ping() is True
    assert r.set("default-client", b"v") is True and r.get("default-client") == b"v"
    r.close()


def test_binary_and_large_values(served):
    r = served.client()
    binary = bytes(range(256)) * 4 + b"\r\n$3\r\n*1\r\n\x00"
    key = b"bin\x00\r\n\xffkey"
    r.set(key, binary)
    assert r.get(key) == binary
    big = os.urandom(800 * 1024)  # the thesis's batch block size
    r.set("big", big)
    assert r.get("big") == big
    assert r.mget(["big", key]) == [big, binary]
    r.close()


def test_pipelining(served):
    r = served.client()
    pipe = r.pipeline(transaction=False)
    for n in range(2000):
        pipe.set(f"p{n}", f"value-{n}")
    assert pipe.execute() == [True] * 2000
    pipe = r.pipeline(transaction=False)
    for n in range(2000):
        pipe.get(f"p{n}")
    assert pipe.execute() == [f"value-{n}".encode() for n in range(2000)]
    r.close()


def test_asyncio_clients(served):
    async def main():
        clients = [redis.asyncio.Redis(host="127.0.0.1", port=served.port, protocol=2) for _ in range(8)]
        try:
            await asyncio.gather(*(c.set(f"a{i}-{n}", f"{i}:{n}") for i, c in enumerate(clients)
                                   for n in range(50)))
            values = await asyncio.gather(*(c.get(f"a{i}-{n}") for i, c in enumerate(clients)
                                            for n in range(50)))
            assert values == [f"{i}:{n}".encode() for i in range(8) for n in range(50)]
            assert await clients[0].ping() is True
        finally:
            for c in clients:
                await c.aclose()
    asyncio.run(main())


def test_request_class_reaches_the_middleware(served):
    """NVMW.CLASS batch makes small SETs batch requests: the batch count in the metrics grows."""
    r = served.client()
    before = metric(served.metrics(), "nvmw_request_latency_seconds_count", **{"class": "batch"})
    assert r.execute_command("NVMW.CLASS", "batch") in (b"OK", "OK", True)
    for n in range(200):
        r.set(f"batch-{n}", b"x")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        after = metric(served.metrics(), "nvmw_request_latency_seconds_count", **{"class": "batch"})
        if after >= before + 200:
            break
        time.sleep(0.1)
    assert after >= before + 200
    r.execute_command("NVMW.CLASS", "interactive")
    with pytest.raises(redis.ResponseError):
        r.execute_command("NVMW.CLASS", "bulk")
    stats = r.execute_command("NVMW.STATS")
    assert stats
    r.close()


def test_batch_connections_get_their_own_loop():
    """With --batch-io-threads, connections sending 800 KB values move to the batch loop and
    keep working with redis-py (pipelined too); the interactive connection stays."""
    s = Served("--engine", "memory", "--batch-io-threads", "1", "--batch-io-idle")
    try:
        inter = s.client()
        assert inter.execute_command("NVMW.CLASS", "interactive") in (b"OK", "OK", True)
        bulk = [s.client() for _ in range(3)]
        values = {f"blob-{i}": os.urandom(800 * 1024) for i in range(6)}
        for n, (k, v) in enumerate(values.items()):
            assert bulk[n % 3].set(k, v) is True
            assert inter.set(f"small-{n}", b"x") is True
        pipe = bulk[0].pipeline(transaction=False)
        for k, v in values.items():
            pipe.set(k + "-again", v)
            pipe.get(k)
        assert pipe.execute() == [x for v in values.values() for x in (True, v)]
        assert inter.mget([f"small-{n}" for n in range(6)]) == [b"x"] * 6
        assert bulk[1].get("blob-0-again") == values["blob-0"]
        server = json.loads(inter.execute_command("NVMW.STATS"))["server"]
        assert server["batch_moves"] == 3
        assert server["connections_current"] == 4
        for r in (inter, *bulk):
            r.close()
    finally:
        assert s.terminate() == 0, s.text()


def thread_niceness(pid: int) -> dict:
    """{thread name: the niceness values of the process's threads of that name} (/proc)."""
    out: dict = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                text = fh.read()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        out.setdefault(name, set()).add(int(fields[16]))  # field 19 of stat: nice
    return out


@pytest.mark.parametrize("args, added", [((), 19), (("--batch-nice", "0"), 0), (("--batch-nice", "5"), 5)])
def test_batch_workers_run_at_the_batch_niceness(args, added):
    """The batch workers add --batch-nice (default 19) to the server's niceness; the
    network loop and the interactive workers keep the server's own."""
    s = Served("--engine", "memory", *args)
    try:
        r = s.client()
        assert r.set("blob", os.urandom(800 * 1024)) is True  # run by a batch worker
        base = os.getpriority(os.PRIO_PROCESS, s.pid)
        want = min(19, base + added)
        deadline = time.monotonic() + 30
        while True:  # every worker sets its niceness as it starts
            nice = thread_niceness(s.pid)
            if nice.get("nvmw-batch") == {want} or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert nice.get("nvmw-batch") == {want}, nice
        assert nice["nvmw-io0"] == {base}
        assert nice["nvmw-inter"] == {base}
        r.close()
    finally:
        assert s.terminate() == 0, s.text()


def test_auth():
    s = Served("--engine", "memory", "--password", "s3cret")
    try:
        # retry=None: redis-py retries a refused handshake with back-off (about 4 s, against
        # Redis too); the answers, not the retries, are under test.
        r = s.client(retry=None)
        with pytest.raises((redis.exceptions.AuthenticationError, redis.ResponseError), match="(?i)auth"):
            r.get("k")
        with pytest.raises((redis.exceptions.AuthenticationError, redis.ResponseError)):
            r.execute_command("AUTH", "wrong")
        ok = s.client(password="s3cret")
        assert ok.set("k", "v") is True and ok.get("k") == b"v"
        ok.close()
        r.close()
        wrong = s.client(password="wrong", retry=None)
        with pytest.raises(redis.exceptions.AuthenticationError):
            wrong.ping()
        wrong.close()
    finally:
        assert s.terminate() == 0, s.text()


@pytest.mark.parametrize("flag", [None, "--no-group-commit"])
def test_group_commit_on_and_off_store_every_set(shm_dir, flag, capsys):
    """Group commit (the default: the SETs of one turn of the loop made durable together)
    and --no-group-commit both store every SET of concurrent pipelining clients on a pmem
    pool, and keep them across a restart; --help names the option."""
    from nvmw.cli import main

    with pytest.raises(SystemExit) as e:
        main(["serve", "--help"])
    assert e.value.code == 0
    assert "--group-commit" in capsys.readouterr().out
    pool = os.path.join(shm_dir, "group.pool")
    args = ["--engine", "pmem", "--path", pool, "--pool-mb", "64"] + ([flag] if flag else [])
    s = Served(*args)
    errors: list = []

    def client(t: int) -> None:
        try:
            r = s.client()
            for round_ in range(5):
                pipe = r.pipeline(transaction=False)
                for n in range(100):
                    pipe.set(f"g{t}-{n}", f"{round_}-{t}-{n}")
                    pipe.get(f"g{t}-{n}")
                replies = pipe.execute()
                want = [x for n in range(100) for x in (True, f"{round_}-{t}-{n}".encode())]
                if replies != want:
                    errors.append((t, round_))
            r.close()
        except Exception as exc:  # reported by the main thread
            errors.append((t, repr(exc)))

    try:
        threads = [threading.Thread(target=client, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors
        r = s.client()
        assert r.dbsize() == 800
        r.close()
    finally:
        assert s.terminate() == 0, s.text()
    again = Served("--engine", "pmem", "--path", pool, "--pool-mb", "64")
    try:
        r = again.client()
        keys = [f"g{t}-{n}" for t in range(8) for n in range(100)]
        assert r.mget(keys) == [f"4-{k[1:]}".encode() for k in keys]
        r.close()
    finally:
        assert again.terminate() == 0, again.text()


# --- the Redis tools ---------------------------------------------------------------------


def test_redis_cli(served):
    cli = tool("redis-cli")

    def run(*words: str) -> str:
        out = subprocess.run([cli, "-p", str(served.port), *words], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert run("PING") == "PONG"
    assert run("SET", "cli-key", "cli value") == "OK"
    assert run("GET", "cli-key") == "cli value"
    assert run("EXISTS", "cli-key") == "1"
    assert run("DEL", "cli-key") == "1"
    assert run("GET", "cli-key") == ""
    assert int(run("DBSIZE")) >= 0


def test_redis_cli_stat(served):
    """redis-cli --stat, read for two rows: keys, clients and requests from INFO."""
    r = served.client()
    assert r.set("stat-key", "v") is True
    keys = r.dbsize()
    proc = subprocess.Popen([tool("redis-cli"), "-p", str(served.port), "--stat", "-i", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rows = []
    try:
        while len(rows) < 2:
            assert select.select([proc.stdout], [], [], 60)[0], "redis-cli --stat printed nothing"
            line = proc.stdout.readline()
            assert line, f"redis-cli --stat ended: {rows}"
            if re.match(r"\d", line):
                rows.append(line.split())
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        proc.stdout.close()
    for row in rows:
        assert int(row[0]) == keys and re.fullmatch(r"[\d.]+[BKMG]", row[1]), row
        assert int(row[2]) >= 2 and int(row[3]) == 0, row  # this test's two clients, none blocked
    assert int(rows[1][4]) > int(rows[0][4]), rows  # requests: its own INFO at least
    r.close()


def test_redis_benchmark(served):
    bench = tool("redis-benchmark")
    out = subprocess.run([bench, "-p", str(served.port), "-t", "set,get", "-n", "2000", "-c", "10", "-d", "128",
                          "-r", "1000", "--csv"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {line.split(",")[0].strip('"'): line for line in out.stdout.splitlines() if line.startswith('"')}
    assert "SET" in rows and "GET" in rows, out.stdout
    assert "error" not in (out.stdout + out.stderr).lower()
    r = served.client()
    assert r.dbsize() > 0
    r.close()


def test_metrics_pass_promtool(served):
    promtool = tool("promtool")
    r = served.client()
    r.set("promtool", b"x" * 100)
    time.sleep(0.5)  # at least one window with requests
    text = served.metrics()
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    for family in ("nvmw_request_latency_seconds", "nvmw_throughput_ops_per_second", "nvmw_queue_length",
                   "nvmw_thread_limit", "nvmw_sla_latency_met", "nvmw_rejected_requests_total",
                   "nvmw_server_commands_total", "nvmw_server_connections"):
        assert f"# TYPE {family} " in text, family
    assert "# TYPE nvmw_server_output_peak_bytes gauge" in text  # a high-water mark
    for q in ("0.5", "0.99", "0.999"):
        assert metric(text, "nvmw_request_latency_seconds", quantile=q, **{"class": "interactive"}) >= 0
    assert metric(text, "nvmw_thread_limit", **{"class": "interactive"}) == 15  # fixed:15,15
    assert metric(text, "nvmw_server_commands_total") > 0
    assert metric(text, "nvmw_server_connections") >= 1
    r.close()


def start_twemproxy(conf, servers: list, port: int, stats_port: int) -> subprocess.Popen:
    """nutcracker in front of `servers` (ports on loopback), listening on `port`, its stats
    on `stats_port` (both on loopback), once it accepts connections; its configuration in
    `conf`, its log beside it. Both ports are in the configuration, not picked by it:
    AddressInUse when one was taken meanwhile."""
    nutcracker = tool("nutcracker")
    log = conf.with_suffix(".log")
    log.unlink(missing_ok=True)  # nutcracker appends: only this start's lines
    conf.write_text(f"nvmw:\n  listen: 127.0.0.1:{port}\n  redis: true\n  hash: murmur\n"
                    f"  distribution: ketama\n  server_retry_timeout: 1000\n  server_failure_limit: 3\n"
                    f"  servers:\n" + "".join(f"   - 127.0.0.1:{p}:1\n" for p in servers))
    proxy = subprocess.Popen([nutcracker, "-c", str(conf), "-o", str(log), "-a", "127.0.0.1", "-s", str(stats_port)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def output() -> str:
        out = proxy.stdout.read()
        proxy.stdout.close()
        return out + (log.read_text(errors="replace") if log.exists() else "")

    # Its own sockets, not a connection to the port: another process's socket there would
    # take one, and nutcracker stops at start when a port is taken.
    deadline = time.monotonic() + 20
    while not {port, stats_port} <= listening_ports(proxy.pid):
        if proxy.poll() is not None:
            start_failed(output())
        if time.monotonic() >= deadline:
            proxy.kill()
            proxy.wait()
            pytest.fail(f"nutcracker did not start in 20 s:\n{output()}")
        time.sleep(0.05)
    return proxy


def twemproxy(conf, servers: list) -> tuple:
    """start_twemproxy() on free ports, started again on others while one was taken:
    (its port, the process)."""
    return with_free_ports(lambda port, stats_port: (port, start_twemproxy(conf, servers, port, stats_port)),
                           count=2)


def stop_twemproxy(proxy) -> None:
    """Stop a twemproxy() process (None: it never started)."""
    if proxy is not None:
        proxy.terminate()
        proxy.wait(timeout=30)
        proxy.stdout.close()


@pytest.mark.parametrize("which", ["listen", "stats"])
def test_twemproxy_starts_again_on_other_ports_when_one_was_taken(tmp_path, which):
    # Another process takes one of the ports between its pick and nutcracker's bind (a
    # socket of this test here; an outgoing connection of another program alike):
    # nutcracker stops at start, and it is started again on new ports.
    a = Served("--engine", "memory")
    starts: list = []
    proxy = None
    with socket.socket() as thief:
        def start(port: int, stats_port: int) -> tuple:
            if not starts:
                thief.bind(("127.0.0.1", port if which == "listen" else stats_port))
                thief.listen()
            starts.append((port, stats_port))
            return port, start_twemproxy(tmp_path / "nutcracker.yml", [a.port], port, stats_port)
        try:
            port, proxy = with_free_ports(start, count=2)
            assert len(starts) == 2, starts
            r = plain_client(port)
            assert r.set("through", "twemproxy") is True
            ra = a.client()
            assert ra.get("through") == b"twemproxy"
            for c in (r, ra):
                c.close()
        finally:
            stop_twemproxy(proxy)
            assert a.terminate() == 0, a.text()


def test_twemproxy_spreads_keys_over_two_servers(tmp_path):
    a, b = Served("--engine", "memory"), Served("--engine", "memory")
    proxy = None
    try:
        proxy_port, proxy = twemproxy(tmp_path / "nutcracker.yml", [a.port, b.port])
        r = plain_client(proxy_port)
        keys = [f"user:{n}" for n in range(200)]
        for k in keys:
            assert r.set(k, f"v-{k}") is True
        assert [r.get(k) for k in keys] == [f"v-{k}".encode() for k in keys]
        assert r.mget(keys) == [f"v-{k}".encode() for k in keys]
        ra, rb = a.client(), b.client()
        on_a = {k for k in keys if ra.get(k) is not None}
        on_b = {k for k in keys if rb.get(k) is not None}
        assert on_a and on_b, (f"twemproxy put {len(on_a)} keys on {a.port} and {len(on_b)} on {b.port} "
                               f"(proxy {proxy_port})")
        assert on_a.isdisjoint(on_b) and on_a | on_b == set(keys)
        assert ra.dbsize() + rb.dbsize() == len(keys)
        for c in (r, ra, rb):
            c.close()
    finally:
        stop_twemproxy(proxy)
        assert a.terminate() == 0, a.text()
        assert b.terminate() == 0, b.text()


# --- lifetime: drain, crash, connections ---------------------------------------------------


class Writer(threading.Thread):
    """SETs unique keys until the connection fails; remembers every acknowledged one."""

    def __init__(self, port: int, tag: str, value_bytes: int = 512):
        super().__init__(daemon=True)
        self.port, self.tag, self.value_bytes = port, tag, value_bytes
        self.acked: dict = {}

    def run(self) -> None:
        try:
            r = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=30, protocol=2)
            n = 0
            while True:
                key = f"{self.tag}:{n}"
                value = (f"{key}|".encode() * (self.value_bytes // 8 + 1))[: self.value_bytes]
                r.set(key, value)
                self.acked[key] = value
                n += 1
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return
        except redis.ResponseError:  # refused while draining
            return


def wait_for_acks(writers: list, each: int, timeout: float = 60.0) -> None:
    """Until every writer has `each` acknowledged SETs: the stop then lands among the SETs
    of all of them, however slowly a loaded machine lets them start."""
    deadline = time.monotonic() + timeout
    while not all(len(w.acked) >= each for w in writers):
        assert all(w.is_alive() for w in writers), "a writer stopped before the server did"
        assert time.monotonic() < deadline, f"acknowledged SETs after {timeout:.0f} s: " \
                                            f"{[len(w.acked) for w in writers]}"
        time.sleep(0.01)


def check_acked(port: int, writers: list) -> int:
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=60, protocol=2)
    acked = {k: v for w in writers for k, v in w.acked.items()}
    keys = list(acked)
    got = []
    for i in range(0, len(keys), 500):
        got += r.mget(keys[i:i + 500])
    lost = [k for k, v in zip(keys, got) if v != acked[k]]
    r.close()
    assert not lost, f"{len(lost)} of {len(keys)} acknowledged SETs lost, e.g. {lost[:3]}"
    return len(keys)


def test_sigterm_drains_and_keeps_every_acknowledged_set(shm_dir):
    pool = os.path.join(shm_dir, "drain.pool")
    s = Served("--engine", "pmem", "--path", pool, "--pool-mb", "256")
    writers = [Writer(s.port, f"w{i}") for i in range(4)]
    for w in writers:
        w.start()
    wait_for_acks(writers, each=20)
    assert s.terminate() == 0, s.text()
    assert "drained" in s.text()
    for w in writers:
        w.join(timeout=30)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=2).close()  # no longer listening
    again = Served("--engine", "pmem", "--path", pool, "--pool-mb", "256")
    try:
        assert check_acked(again.port, writers) > 0
    finally:
        assert again.terminate() == 0, again.text()


def test_sigkill_during_sets_loses_no_acknowledged_set(shm_dir):
    pool = os.path.join(shm_dir, "kill.pool")
    s = Served("--engine", "pmem", "--path", pool, "--pool-mb", "256")
    writers = [Writer(s.port, f"k{i}", value_bytes=size) for i, size in enumerate((64, 512, 4096, 100_000))]
    for w in writers:
        w.start()
    wait_for_acks(writers, each=5)
    s.kill()  # SIGKILL
    for w in writers:
        w.join(timeout=30)
    again = Served("--engine", "pmem", "--path", pool, "--pool-mb", "256")
    try:
        assert check_acked(again.port, writers) == sum(len(w.acked) for w in writers)
    finally:
        assert again.terminate() == 0, again.text()


def test_sigkill_during_group_commits_loses_no_acknowledged_set(shm_dir):
    # Every turn gathers (--group-min-ready 1): the SETs of several connections are made
    # durable together, and the kill lands among such groups.
    pool = os.path.join(shm_dir, "kill-groups.pool")
    s = Served("--engine", "pmem", "--path", pool, "--pool-mb", "256", "--group-min-ready", "1")
    writers = [Writer(s.port, f"g{i}", value_bytes=64 + 100 * i) for i in range(8)]
    for w in writers:
        w.start()
    r = s.client()
    deadline = time.monotonic() + 30
    while json.loads(r.execute_command("NVMW.STATS"))["server"]["grouped_sets"] < 200:
        assert time.monotonic() < deadline, "no SETs were committed in groups"
        time.sleep(0.05)
    r.close()
    s.kill()  # SIGKILL
    for w in writers:
        w.join(timeout=30)
    again = Served("--engine", "pmem", "--path", pool, "--pool-mb", "256")
    try:
        assert check_acked(again.port, writers) == sum(len(w.acked) for w in writers)
    finally:
        assert again.terminate() == 0, again.text()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def test_connect_disconnect_cycles_keep_rss_flat():
    s = Served("--engine", "memory")
    try:
        def cycles(n: int) -> None:
            for i in range(n):
                if i % 2:
                    r = s.client()
                    assert r.set(f"c{i % 10}", b"v" * 100) is True
                    r.close()
                else:
                    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
                        c.sendall(b"*1\r\n$4\r\nPING\r\n")
                        assert c.recv(64) == b"+PONG\r\n"

        cycles(100)  # warm up: allocator arenas, thread caches
        before = rss_bytes(s.pid)
        cycles(1000)
        time.sleep(0.5)
        grown = rss_bytes(s.pid) - before
        assert grown < 20 * 1024 * 1024, f"RSS grew {grown / 1e6:.1f} MB over 1,000 connections"
        r = s.client()
        assert r.execute_command("NVMW.STATS")
        r.close()
    finally:
        assert s.terminate() == 0, s.text()
