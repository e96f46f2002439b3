"""Ports for the servers the tests start as child processes, shared by the service test
modules.

A child that binds port 0 itself is started that way (`nvmw serve --port 0 --metrics-port
0`), and says the port it got (on stdout; where it cannot, its sockets in /proc do:
listening_ports()): no other process can take that port. A child
that cannot (nutcracker reads its ports from its configuration; redis-server takes
`--port 0` as "no TCP") is given ports that were free a moment before, and another
process may take one meanwhile (each outgoing connection, a benchmark's say, takes an
ephemeral port): the child then fails to bind, with an error that says nothing of what
the test checks. with_free_ports() starts it again with new ports then, and only then."""
import os
import socket

import pytest

#: strerror(EADDRINUSE), as every child says a port it could not bind was taken.
ADDRESS_IN_USE = "Address already in use"
#: Starts tried before a test fails: a port taken between its pick and the child's bind
#: is rare, and one taken five times in a row says something is wrong with the machine.
ATTEMPTS = 5


class AddressInUse(Exception):
    """A child failed to start because a port picked for it had been taken meanwhile;
    the message is its output."""


def free_ports(count: int = 1, host: str = "127.0.0.1") -> list:
    """`count` distinct ports on `host` that no socket had bound a moment ago (bound at
    once, so no two are the same; released before returning)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    socks = [socket.socket(family) for _ in range(count)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def listening_ports(pid: int) -> set:
    """The TCP ports process `pid` listens on (IPv4 and IPv6; none once it has exited),
    from /proc: where a child listens, by its own sockets, which a socket of another
    process on the same port cannot pass for (a connection to the port could reach it)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:  # closed meanwhile
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    except OSError:  # the process has exited
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:  # exited, or no IPv6
            continue
        for row in rows:
            fields = row.split()  # sl local_address rem_address st ... inode
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def start_failed(output: str) -> None:
    """For a child that failed to start: AddressInUse when its `output` says a port was
    taken (start it again on others), else a test failure with the output."""
    if ADDRESS_IN_USE in output:
        raise AddressInUse(output)
    pytest.fail(f"the child failed to start:\n{output}")


def with_free_ports(start, count: int = 1, host: str = "127.0.0.1", attempts: int = ATTEMPTS):
    """start(*ports) with `count` ports from free_ports(count, host), and again with new
    ones each time it raises AddressInUse, at most `attempts` starts in all. Returns what
    start returned; any other failure of start is the test's."""
    for _ in range(attempts):
        try:
            return start(*free_ports(count, host))
        except AddressInUse as e:
            taken = e
    pytest.fail(f"each of {attempts} starts found a port taken by another process; the last said:\n{taken}")
