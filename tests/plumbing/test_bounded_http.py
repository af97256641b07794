"""One bounded request to a server under test (kit.plumbing.net.request: readiness, /server_info, the quality check,
the expert pass's controls), against real sockets served by a thread here that answers as a hostile server would:
an endless body, a head dripped one line a second, a body dripped byte by byte, JSON nested a thousand deep. Each is
ended within its time and bytes (the old readiness probe read an endless /health whole: 8.7 GB in 45 s)."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kit.plumbing.net import http_get, request
from kit.runtime import ServerSpec
from kit.runtime.server_info import read_server_info


def _serve(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def loop() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            def one(c: socket.socket = conn) -> None:
                try:
                    c.recv(65536)
                    answer(c)
                except OSError:
                    pass
                finally:
                    c.close()
            threading.Thread(target=one, daemon=True).start()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join()
    srv.close()


def endless_body(c: socket.socket) -> None:
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
    block = b"x" * 65536
    end = time.monotonic() + 30
    while time.monotonic() < end:
        c.sendall(block)


def dripped_head(c: socket.socket) -> None:
    c.sendall(b"HTTP/1.1 200 OK\r\n")
    for i in range(60):
        c.sendall(b"X-Slow-%d: 1\r\n" % i)
        time.sleep(0.5)


def dripped_body(c: socket.socket) -> None:
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(1000):
        c.sendall(b"x")
        time.sleep(0.05)


def deep_json(c: socket.socket) -> None:
    body = b'{"a":' + b"[" * 950 + b"]" * 950 + b"}"
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    gens: list[Iterator[str]] = []

    def start(answer: Callable[[socket.socket], None]) -> str:
        g = _serve(answer)
        gens.append(g)
        return next(g)

    yield start
    for g in gens:
        next(g, None)


@pytest.mark.parametrize("answer", [dripped_head, dripped_body], ids=["head", "body"])
def test_a_dripped_answer_ends_at_the_deadline(serve: Callable[..., str], answer: Callable[[socket.socket], None]
                                               ) -> None:
    url = serve(answer)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="within 1 s"):
        request(url + "/health", timeout=1.0, max_bytes=4096)
    took = time.monotonic() - t0
    assert 0.9 < took < 6.0, took  # each read came within the socket timeout; only the deadline ends it
    assert http_get(url + "/health", timeout=1.0) is None


def test_an_endless_body_is_read_to_its_bound_only(serve: Callable[..., str]) -> None:
    url = serve(endless_body)
    tracemalloc.start()
    status, body = request(url + "/health", timeout=10.0, max_bytes=64 * 1024)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert status == 200 and len(body) == 64 * 1024 + 1  # one byte over: the caller sees it was larger
    assert peak < 8 << 20, peak


def test_server_info_nested_a_thousand_deep_is_an_error_in_its_file(serve: Callable[..., str], tmp_path: Path) -> None:
    url = serve(deep_json)  # the old reader: RecursionError in its redaction, the run's 'internal error', exit 1
    spec = ServerSpec(name="t", arm="a", command=["x"], env={}, secret_env={}, host="127.0.0.1",
                      port=int(url.rsplit(":", 1)[1]), readiness_path="/health", ready_timeout_s=1, stop_grace_s=1,
                      log_path=tmp_path / "server.log", labels={})
    got = read_server_info(spec, "/server_info")
    assert got.error is not None and "nested deeper than 64" in got.error and got.info is None
