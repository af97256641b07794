"""A /metrics exposition whose counts overflow when summed over label sets (two engines each at 1e308; review 2 found
it raised OverflowError out of ``scrape`` and killed the sampler thread, telemetry.json saying 0 samples and 0 errors)
is a ScrapeError of that tick, and the sampler records every tick. A tick that fails in a way kit did not foresee is
counted too, and sampling goes on. A real HTTP server (http.server) serves the exposition."""

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


def test_an_overflowing_sum_is_a_scrape_error(url: str) -> None:
    with pytest.raises(ScrapeError, match="not a finite number"):
        scrape(url, timeout_s=2.0, max_bytes=1 << 20, max_parsed=1000, max_series=100)


def test_the_sampler_records_every_tick_of_a_hostile_server(url: str) -> None:
    got: list[object] = []
    with LevelSampler(url, [], got.append, limits=Limits(interval_s=0.1, scrape_timeout_s=0.5)) as s:
        time.sleep(0.6)
    assert s.result is not None
    assert s.result.samples >= 3 and s.result.metrics_errors == s.result.samples, s.result
    assert "vllm:num_requests_running" in (s.result.first_metrics_error or "") and s.result.stopped_early is None
    assert len(got) == s.result.samples


def test_a_tick_that_fails_unforeseen_is_counted_and_sampling_goes_on(url: str) -> None:
    class Flaky:
        """A GPU probe (kit.nvml.GpuProbe's methods) whose reads raise an error kit does not expect."""

        def init(self) -> None:
            pass

        def device_count(self) -> int:
            return 1

        def shutdown(self) -> None:
            pass

        def __getattr__(self, name: str) -> object:
            def boom(*args: object) -> object:
                raise ZeroDivisionError("unforeseen")
            return boom

    got: list[object] = []
    with LevelSampler(None, [0], got.append, probe=Flaky,  # type: ignore[arg-type]
                      limits=Limits(interval_s=0.1, scrape_timeout_s=0.5)) as s:
        time.sleep(0.6)
    assert s.result is not None and s.result.stopped_early is None
    assert s.result.samples >= 3 and s.result.metrics_errors == s.result.samples
    assert "ZeroDivisionError: unforeseen" in (s.result.first_metrics_error or "")
