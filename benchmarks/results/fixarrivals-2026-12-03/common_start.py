"""Common start and skew of a 4-process open-loop level (poisson 50/s, 200 requests, cap 32) against
benchmarks/sse_server.py on the shared 2-core machine; send times checked as kit verify does."""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from kit.bundle.schedules import send_time_problems
from kit.load import run_level
from kit.load.spec import LevelSpec

srv = subprocess.Popen([sys.executable, "benchmarks/sse_server.py", "--port", "0", "--ttft-ms", "20", "--itl-ms", "5"],
                       stdout=subprocess.PIPE, text=True)
port = int(srv.stdout.readline().split()[1])
try:
    with tempfile.TemporaryDirectory() as d:
        spec = LevelSpec(base_url=f"http://127.0.0.1:{port}", endpoint="chat", model="m", concurrency=32, requests=200,
                         warmup_requests=8, prompt_tokens=8, output_tokens=8, seed=1, request_timeout_s=30.0,
                         processes=4, arrival="poisson", rate=50.0, arrival_seed=3)
        res = run_level(spec, Path(d))
        doc = json.loads(res.client_path.read_text())
        recs = [json.loads(line) for line in res.records_path.read_text().splitlines()]
        ws = doc["workers"]
        print("start_ns", doc["start_ns"])
        for w in ws:
            print(f"worker {w['worker']}: t0 - start {w['t0_ns'] - doc['start_ns']} ns, start_skew {w['start_skew_ns'] / 1e6:.3f} ms, "
                  f"lateness p99 {w['lateness']['p99_ms']} ms, queue max {w['queue']['max_ms']} ms")
        print("send_time_problems", send_time_problems(recs, ws))
        print("client_bound", doc["client_bound"], doc["client_bound_reasons"])
        print("timing_warnings", doc["timing_warnings"])
finally:
    srv.terminate()
