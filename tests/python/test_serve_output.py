"""The server's output cap against one MGET over many large values: a raw-socket client
sends it with a small max_output_bytes and reads nothing at first; the MGET pauses
between keys while the connection's queued output is at the cap, so the most reply
bytes the connection ever held (stats()["output_peak_bytes"]) stays within the cap
plus one value. Then the whole reply is read and checked byte for byte."""
import socket
import time

from nvmw.lab.service import serving

CAP = 1 << 20
VALUE_BYTES = 256 * 1024
VALUES = 64  # 16 MiB: many times the cap, more than the socket buffers hold
# The cap, one value, and the array and bulk headers queued with the value that crosses it.
BOUND = CAP + VALUE_BYTES + 4096


def command(*args: bytes) -> bytes:
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def bulk(v: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(v), v)


def read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        assert chunk, f"connection closed after {got} of {n} bytes"
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def wait_until(cond, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_mget_over_large_values_holds_at_most_the_cap_plus_one_value():
    values = [bytes((j * 31 + i * 7 + 1) & 0xFF for j in range(256)) * (VALUE_BYTES // 256) for i in range(VALUES)]
    keys = [b"mv-%d" % i for i in range(VALUES)]
    with serving(engine="memory", port=0, window_s=0.2, max_output_bytes=CAP) as svc:
        with socket.create_connection(("127.0.0.1", svc.port), timeout=60) as setup:
            for k, v in zip(keys, values):
                setup.sendall(command(b"SET", k, v))
                assert read_exactly(setup, 5) == b"+OK\r\n"
        assert svc.server_stats()["output_peak_bytes"] < CAP
        with socket.create_connection(("127.0.0.1", svc.port), timeout=60) as c:
            # A fixed receive buffer: most of the reply stays queued at the server.
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
            c.sendall(command(b"MGET", *keys) + command(b"PING"))
            assert wait_until(lambda: svc.server_stats()["output_peak_bytes"] >= CAP)
            assert svc.server_stats()["output_peak_bytes"] <= BOUND
            want = b"*%d\r\n" % VALUES + b"".join(bulk(v) for v in values) + b"+PONG\r\n"
            assert read_exactly(c, len(want)) == want
        stats = svc.server_stats()
        assert stats["output_peak_bytes"] <= BOUND, stats
        assert stats["output_buffer_closes"] == 0
