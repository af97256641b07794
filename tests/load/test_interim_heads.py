"""A response head below 200 and the connection pool (kit.load.driver_sock.StreamResponse). geventhttpclient gives
the socket back to the pool when any message completes, a 1xx head's too: after a server's ``101 Switching
Protocols`` the socket stayed pooled and the next request on it waited out its timeout (a review: two healthy
requests recorded as 8 s timeouts), and after a ``100 Continue`` it was pooled while the final response was still
being read (and again at its end). Now a 101 ends with its socket closed, a 100 is read through to the final
response, whose socket is pooled once. In its own process: the driver's code is gevent's."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r'''
import gevent.socket
from kit.load.driver_sock import StreamResponse

class Pool:
    def __init__(self): self.calls = []
    def release_socket(self, s): self.calls.append("closed")
    def return_socket(self, s): self.calls.append("pooled")

HEADS = {
    "101": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\ndata: hi\n\n",
    "100": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "200": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
}
for name, head in HEADS.items():
    a, b = gevent.socket.socketpair()
    b.sendall(head)
    pool = Pool()
    try:
        r = StreamResponse(a, pool, block_size=4096, method="POST")
        got = f"{r.status_code} {bytes(r._body_buffer)!r}"
    except Exception as e:
        got = type(e).__name__
    print(name, got, ",".join(pool.calls))
'''


def test_a_1xx_head_never_puts_its_socket_back_early() -> None:
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["101 HTTPParseError closed", "100 200 b'ok' pooled", "200 200 b'ok' pooled"], r.stdout
