"""Review 2: a /metrics exposition whose counts overflow when summed over label sets (two engines each at 1e308)
makes ``math.fsum`` in ``kit.telemetry.prom.quantities`` raise OverflowError, outside parse()'s try: it escapes
``scrape`` (which promises a ScrapeError for anything that breaks), kills the sampler thread with a traceback on
stderr, and the level's telemetry.json says 0 samples and 0 errors, as if nothing had been tried.
A real HTTP server (http.server) serves the exposition."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import pytest

from kit.telemetry.prom import ScrapeError, scrape
from kit.telemetry.sampler import LevelSampler, Limits

BODY = (b"# TYPE vllm:num_requests_running gauge\n"
        b'vllm:num_requests_running{engine="0"} 1e308\n'
        b'vllm:num_requests_running{engine="1"} 1e308\n')


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    srv.shutdown()
    srv.server_close()


@pytest.mark.xfail(strict=True, raises=OverflowError, reason="review2: fsum overflow escapes scrape()")
def test_an_overflowing_sum_is_a_scrape_error(url: str) -> None:
    with pytest.raises(ScrapeError):
        scrape(url, timeout_s=2.0, max_bytes=1 << 20, max_parsed=1000, max_series=100)


@pytest.mark.xfail(strict=True, reason="review2: the sampler thread dies; telemetry.json records 0 samples, 0 errors")
def test_the_sampler_records_every_tick_of_a_hostile_server(url: str) -> None:
    got: list[object] = []
    with LevelSampler(url, [], got.append, limits=Limits(interval_s=0.1, scrape_timeout_s=0.5)) as s:
        time.sleep(0.6)
    assert s.result is not None
    assert s.result.samples + s.result.metrics_errors >= 3
