"""How bench/serve_vs_redis.py (and the bench scripts that import it) start their servers:
`nvmw serve` on a port it binds itself (`--port 0`), redis-server on a picked port and
again on a new one when another process took it between the pick and the bind; in both
cases the port returned is one the server's own process listens on."""
import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest

import nvmw
from ports import listening_ports

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import serve_vs_redis  # noqa: E402


def redis_argv(tmp_path):
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        pytest.fail("redis-server is not installed: scripts/setup.sh installs it (Debian package redis-server)")
    log = str(tmp_path / "redis.log")
    return (lambda port: [redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", str(tmp_path), "--logfile", log]), log


def nvmw_env() -> dict:
    pythonpath = [os.path.dirname(os.path.dirname(nvmw.__file__)), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in pythonpath if p))


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)


@pytest.fixture
def taken():
    """A port another process's socket listens on (this one's, to the server started)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_redis_given_a_taken_port_is_started_again_on_another(tmp_path, taken, monkeypatch):
    picks = iter([taken])
    free_port = serve_vs_redis.free_port
    monkeypatch.setattr(serve_vs_redis, "free_port", lambda: next(picks, None) or free_port())
    argv, log = redis_argv(tmp_path)
    port, proc = serve_vs_redis.start_redis(argv, log)
    try:
        assert port != taken
        assert port in listening_ports(proc.pid)  # redis-server's own socket, not another's
    finally:
        assert stop(proc) == 0


def test_redis_whose_ports_are_all_taken_is_an_error_saying_so(tmp_path, taken, monkeypatch):
    monkeypatch.setattr(serve_vs_redis, "free_port", lambda: taken)
    argv, log = redis_argv(tmp_path)
    with pytest.raises(RuntimeError, match=f"each of {serve_vs_redis.REDIS_ATTEMPTS} starts of redis-server "
                                           "found its port taken by another process"):
        serve_vs_redis.start_redis(argv, log)


def test_nvmw_serve_listens_on_the_port_it_reports():
    port, proc = serve_vs_redis.start_nvmw([sys.executable, "-m", "nvmw", "serve", "--port", "0", "--engine",
                                            "memory", "--log-windows", "--window", "0.1"], nvmw_env())
    try:
        assert listening_ports(proc.pid) == {port}
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"PING\r\n")
            assert c.recv(16) == b"+PONG\r\n"
    finally:
        assert stop(proc) == 0


def test_nvmw_serve_that_fails_to_start_is_an_error_with_its_output():
    with pytest.raises(RuntimeError, match=r"nvmw serve exited at start \(2\): .*--port"):
        serve_vs_redis.start_nvmw([sys.executable, "-m", "nvmw", "serve", "--port", "-1"], nvmw_env())
