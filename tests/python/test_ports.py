"""ports.with_free_ports: a child given a port that another process took after it was
picked is started again on a new one; any other failure to start is the test's, at once.
ports.listening_ports: where a child listens, by its own sockets."""
import os
import socket
import subprocess
import sys

import pytest

from ports import ATTEMPTS, free_ports, listening_ports, start_failed, with_free_ports

# A child that listens on the port it is given, as nutcracker and redis-server do: it
# says "listening" once bound, and stops with Python's error (EADDRINUSE's text) if it
# cannot bind.
LISTENER = """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
sys.stdin.read()
"""


def start_listener(port: int, code: str = LISTENER) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code, str(port)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    if line != "listening\n":
        output = line + proc.stdout.read()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
        start_failed(output)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.stdin.close()  # its read returns: it exits
    assert proc.wait(timeout=60) == 0
    proc.stdout.close()


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(8)
    assert len(set(ports)) == 8
    socks = [socket.socket() for _ in ports]
    try:
        for s, port in zip(socks, ports):
            s.bind(("127.0.0.1", port))
    finally:
        for s in socks:
            s.close()


def test_a_port_taken_before_the_child_binds_it_is_replaced():
    starts: list = []
    with socket.socket() as thief:
        def start(port: int) -> tuple:
            if not starts:  # another process takes the port between its pick and the child's bind
                thief.bind(("127.0.0.1", port))
                thief.listen()
            starts.append(port)
            return port, start_listener(port)

        port, proc = with_free_ports(start)
        try:
            assert len(starts) == 2 and starts[1] == port != starts[0], starts
            with socket.create_connection(("127.0.0.1", port), timeout=30):
                pass
        finally:
            stop(proc)


def test_another_failure_to_start_is_not_retried():
    starts: list = []

    def start(port: int) -> subprocess.Popen:
        starts.append(port)
        return start_listener(port, LISTENER.replace("s.listen()", "sys.exit('no listening today')"))

    with pytest.raises(pytest.fail.Exception, match="no listening today"):
        with_free_ports(start)
    assert len(starts) == 1


def test_a_port_taken_at_every_start_fails_after_the_last():
    starts: list = []
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", 0))
        thief.listen()
        taken = thief.getsockname()[1]

        def start(port: int) -> subprocess.Popen:
            starts.append(port)
            return start_listener(taken)

        with pytest.raises(pytest.fail.Exception, match=f"(?s)each of {ATTEMPTS} starts found a port taken.*"
                                                        "Address already in use"):
            with_free_ports(start)
    assert len(starts) == ATTEMPTS


def test_listening_ports_are_the_process_own():
    # A child listening on a port it picked, beside a socket of this process listening
    # too: only the child's port is the child's; none once it has exited.
    code = LISTENER.replace('print("listening", flush=True)', 'print("listening", s.getsockname()[1], flush=True)')
    with socket.socket() as mine:
        mine.bind(("127.0.0.1", 0))
        mine.listen()
        proc = subprocess.Popen([sys.executable, "-c", code, "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            words = proc.stdout.readline().split()
            assert words[0] == "listening", words
            assert listening_ports(proc.pid) == {int(words[1])}
            assert mine.getsockname()[1] in listening_ports(os.getpid())
        finally:
            stop(proc)
        assert listening_ports(proc.pid) == set()
