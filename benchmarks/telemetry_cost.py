"""The sampler's cost per scrape of a vLLM-sized exposition (many histograms), measured, not assumed.

    python benchmarks/telemetry_cost.py [--scrapes 50]

Serves, with prometheus_client's own HTTP server, 40 histograms of 20 buckets over 2 label sets plus gauges named
as vLLM names them (about 1,900 samples, 200 KB), and times kit.telemetry.prom.scrape over it: wall and CPU of the
scraping thread per scrape, and the response size.
"""

from __future__ import annotations

import argparse
import statistics
import time

from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

from kit.plumbing.net import free_port
from kit.telemetry.prom import scrape


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--scrapes", type=int, default=50)
    n = p.parse_args().scrapes
    reg = CollectorRegistry()
    buckets = [0.001 * 2 ** i for i in range(20)]
    for i in range(40):
        h = Histogram(f"vllm:metric_{i}_seconds", "h", ["model_name", "engine"], buckets=buckets, registry=reg)
        for e in ("0", "1"):
            for v in range(30):
                h.labels("m", e).observe(0.01 * v)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        g = Gauge(name, "g", ["model_name", "engine"], registry=reg)
        g.labels("m", "0").set(7)
    port = free_port()
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    url = f"http://127.0.0.1:{port}/metrics"
    walls, cpus = [], []
    got = None
    for _ in range(n):
        w0, c0 = time.perf_counter(), time.thread_time()
        got = scrape(url, timeout_s=5, max_bytes=8 << 20, max_parsed=200_000, max_series=512)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.thread_time() - c0)
    server.shutdown()
    assert got is not None
    cpu = statistics.median(cpus)
    print(f"{n} scrapes of {got.parsed} samples ({len(got.series)} kept): wall median "
          f"{1e3 * statistics.median(walls):.1f} ms (the server shares this process), CPU of the scraping thread "
          f"median {1e3 * cpu:.1f} ms per scrape (at 1 Hz: {100 * cpu:.2f} % of a core)")


if __name__ == "__main__":
    main()
