"""Measure kit's load generator against a server whose token timing is known.

    .venv/bin/python benchmarks/loadgen.py [--levels 64,256,512,1024] [--waves 5] [--out DIR]
                                           [--priority normal|nice|realtime] [--processes N]

For each concurrency level it starts ``benchmarks/sse_server.py`` (fixed TTFT and inter-token gap; it logs
the instant it wrote every token, keyed by the request's X-Request-Id), runs one ``kit.load.run_level``
against it and joins the client's records with the server's log, request by request:

- achieved output tok/s (client tokens / level wall time) against the ideal C * N / (TTFT + (N-1) * ITL);
- TTFT error per request: the client's TTFT minus the server's (first token written - request parsed),
  split into the send delay (request written -> parsed by the server: the client's send path, but also
  the server's own intake queue when C requests arrive at once) and the first-chunk read lag (client
  only);
- ITL error per gap: the client's gap minus the server's gap between the same two tokens;
- read lag per chunk: client arrival minus server write (both CLOCK_MONOTONIC on one host);
- the client's CPU time per received token (all driver processes, from client.json), and whether the
  level was flagged client-bound.

A second table checks the guardrails against that truth: per level the client's own TTFT p99 error (server
wrote the first token -> the client read it), the ITL p99 error, what kit saw itself (first-chunk read lag
from kernel receive timestamps, lag probe, CPU average and 0.5 s window peak) and its flags
(``client_bound``, ``ttft_client_bound``, timing warning). A level with either error above 5 ms must be
flagged ("MISSED" otherwise), one with both below 2 ms clean ("false alarm" otherwise). Keep the raw
output in ``benchmarks/results/loadgen-<date>.txt``.

With two or more usable cores the server is pinned to core 0 and the client (this process and the driver
processes it starts) to core 1, as in the shared anchor measurements. The table also shows how much CPU
other processes on the machine used meanwhile ("others' CPU", in cores) and the host's steal time: on a
shared box they, not the client, can set the tails; ``--priority realtime`` (root) takes them out.
Results land in ``--out`` (``results/loadgen-bench`` by default): ``results.json`` plus, per level, the
records, ``client.json`` and the server's log.

``--overhead`` measures instead kit's own time around the load: the levels (default 1,4,16,64, with
``--waves`` recorded requests per user and one warm-up request per user) run against one server, first
each through ``run_level`` (drivers started per level), then through one ``LoadSession``, then through
a session whose drivers started during a (simulated, 2 s) server start-up. It prints, per path, the time
outside the levels' load walls, split into the warm-ups and the rest (driver start, Locust import,
teardown, files).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kit.load import LevelResult, LevelSpec, LoadSession, run_level  # noqa: E402

SERVER = ROOT / "benchmarks" / "sse_server.py"


def start_server(log: Path, ttft_ms: float, itl_ms: float, cpu: int) -> tuple[subprocess.Popen[str], int]:
    cmd = [sys.executable, str(SERVER), "--port", "0", "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
           "--log", str(log), "--cpu", str(cpu)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("LISTENING"):
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    return proc, int(line.split()[1])


def stop_server(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def pct(values: list[float] | np.ndarray, q: float) -> float:
    arr = np.asarray(values, dtype=float)
    return float(np.percentile(arr, q)) if arr.size else float("nan")


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


def join(records: list[dict[str, Any]], server: list[dict[str, Any]]) -> dict[str, Any]:
    by_rid = {s["rid"]: s for s in server}
    ttft_err, itl_err, lag, cl_gaps, srv_gaps, srv_ttft = [], [], [], [], [], []
    send_delay, first_lag = [], []
    matched = 0
    for r in records:
        s = by_rid.get(r["rid"])
        if s is None or r["error"] is not None or not r["chunk_ns"]:
            continue
        c = np.asarray(r["chunk_ns"], dtype=np.int64) + r["t_start_ns"]
        w = np.asarray(s["send_ns"], dtype=np.int64)
        if len(c) != len(w):
            continue
        matched += 1
        srv_ttft.append((w[0] - s["arrival_ns"]) / 1e6)
        ttft_err.append((r["ttft_ns"] - (w[0] - s["arrival_ns"])) / 1e6)
        # the TTFT error splits into: request sent -> server has parsed it (client send path plus the
        # server's own intake queue), and first token written -> client read it (client only)
        send_delay.append((s["arrival_ns"] - r["t_start_ns"]) / 1e6)
        first_lag.append((c[0] - w[0]) / 1e6)
        cg, sg = np.diff(c), np.diff(w)
        cl_gaps.append(cg)
        srv_gaps.append(sg)
        itl_err.append((cg - sg) / 1e6)
        lag.append((c - w) / 1e6)
    cg_all, sg_all = _cat(cl_gaps) / 1e6, _cat(srv_gaps) / 1e6
    itl_all, lag_all = _cat(itl_err), _cat(lag)
    return {
        "matched": matched,
        "ttft_err_p50_ms": pct(ttft_err, 50), "ttft_err_p99_ms": pct(ttft_err, 99),
        "server_ttft_p50_ms": pct(srv_ttft, 50),
        "send_delay_p50_ms": pct(send_delay, 50), "send_delay_p99_ms": pct(send_delay, 99),
        "first_read_lag_p50_ms": pct(first_lag, 50), "first_read_lag_p99_ms": pct(first_lag, 99),
        "itl_err_p50_ms": pct(itl_all, 50), "itl_err_p99_ms": pct(itl_all, 99),
        "itl_abs_err_p99_ms": pct(np.abs(itl_all), 99),
        "client_itl_p50_ms": pct(cg_all, 50), "client_itl_p99_ms": pct(cg_all, 99),
        "server_itl_p50_ms": pct(sg_all, 50), "server_itl_p99_ms": pct(sg_all, 99),
        "read_lag_p50_ms": pct(lag_all, 50), "read_lag_p99_ms": pct(lag_all, 99),
        "read_lag_max_ms": float(lag_all.max()) if lag_all.size else float("nan"),
    }


def run_point(conc: int, args: argparse.Namespace, out: Path, server_cpu: int) -> dict[str, Any]:
    level_dir = out / f"c{conc}"
    level_dir.mkdir(parents=True, exist_ok=True)
    slog = level_dir / "server.jsonl"
    slog.unlink(missing_ok=True)
    proc, port = start_server(slog, args.ttft_ms, args.itl_ms, server_cpu)
    sproc = psutil.Process(proc.pid)
    try:
        spec = LevelSpec(base_url=f"http://127.0.0.1:{port}", endpoint="chat", model="fake",
                         concurrency=conc, requests=conc * args.waves, warmup_requests=conc,
                         prompt_tokens=64, output_tokens=args.output_tokens, seed=1,
                         request_timeout_s=120.0, processes=args.processes,
                         tags={"arm": "bench", "repeat": 0, "level": conc})
        cpu0 = sum(sproc.cpu_times()[:2])
        machine0, own0, t0 = psutil.cpu_times(), _own_cpu(), time.monotonic()
        res = run_level(spec, level_dir)
        machine1, own1, window = psutil.cpu_times(), _own_cpu(), time.monotonic() - t0
        server_cpu_s = sum(sproc.cpu_times()[:2]) - cpu0
    finally:
        stop_server(proc)
    client = json.loads(res.client_path.read_text())
    joined = join(load_jsonl(res.records_path), load_jsonl(slog))
    per_req_s = (args.ttft_ms + (args.output_tokens - 1) * args.itl_ms) / 1000
    ideal = conc * args.output_tokens / per_req_s
    cpu_s = sum(w["cpu_s"] for w in client["workers"])
    # CPU that other people's processes used meanwhile (the box is shared), and time stolen by the host
    # (over the whole run_level call: driver start, warm-up and level; the drivers are reaped by then)
    busy = _busy(machine1) - _busy(machine0)
    foreign = busy - (own1 - own0) - server_cpu_s
    return {
        "concurrency": conc, "processes": res.processes, "ok": res.ok, "errors": res.errors,
        "wall_s": res.wall_s, "tok_s": res.out_tokens / res.wall_s, "ideal_tok_s": ideal,
        "pct_ideal": 100 * res.out_tokens / res.wall_s / ideal,
        "cpu_us_per_token": 1e6 * cpu_s / max(res.out_tokens, 1),
        "client_cpu_share": max(w["cpu_share"] for w in client["workers"]),
        "lag_p99_ms": max(w["lag"]["p99_ms"] for w in client["workers"]),
        "near_zero_share": max(w["itl"]["near_zero_share"] or 0 for w in client["workers"]),
        "server_cpu_share": server_cpu_s / max(window, 1e-9),
        "foreign_cpu_share": max(0.0, foreign) / max(window, 1e-9),
        "steal_share": (machine1.steal - machine0.steal) / max(window, 1e-9),
        "cpu_window_peak": max(w.get("cpu_window_share_max") or 0.0 for w in client["workers"]),
        "kit_first_read_p99_ms": max((w.get("first_read") or {}).get("p99_ms") or 0.0 for w in client["workers"]),
        "ttft_client_share_p99_ms": client.get("ttft_client_share_p99_ms"),
        "ttft_client_bound": bool(client.get("ttft_client_bound")),
        "timing_warnings": client.get("timing_warnings") or [],
        "ttft_reasons": client.get("ttft_client_bound_reasons") or [],
        "client_bound": res.client_bound, "reasons": res.client_bound_reasons, **joined,
    }


def _busy(t: Any) -> float:
    return float(t.user + t.nice + t.system + t.irq + t.softirq)


def _own_cpu() -> float:
    """CPU of this process and its children that are gone (the driver processes of finished levels)."""
    me = psutil.Process()
    t = me.cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


def print_table(rows: list[dict[str, Any]]) -> None:
    head = ("C", "tok/s", "ideal", "%", "TTFT err p50/p99", "= send delay p50/p99 + 1st read lag p50/p99",
            "ITL err p50/p99", "|ITL err| p99",
            "read lag p50/p99", "srv ITL p50/p99", "CPU µs/tok", "cli CPU", "lag p99", "~0 gaps", "srv CPU",
            "others' CPU", "steal", "flagged")
    print(" | ".join(head))
    for r in rows:
        print(" | ".join([
            str(r["concurrency"]), f"{r['tok_s']:.0f}", f"{r['ideal_tok_s']:.0f}", f"{r['pct_ideal']:.1f}",
            f"{r['ttft_err_p50_ms']:+.2f}/{r['ttft_err_p99_ms']:+.2f} ms",
            f"{r['send_delay_p50_ms']:.2f}/{r['send_delay_p99_ms']:.2f} + "
            f"{r['first_read_lag_p50_ms']:.2f}/{r['first_read_lag_p99_ms']:.2f} ms",
            f"{r['itl_err_p50_ms']:+.3f}/{r['itl_err_p99_ms']:+.2f} ms", f"{r['itl_abs_err_p99_ms']:.2f} ms",
            f"{r['read_lag_p50_ms']:.2f}/{r['read_lag_p99_ms']:.2f} ms",
            f"{r['server_itl_p50_ms']:.2f}/{r['server_itl_p99_ms']:.2f} ms", f"{r['cpu_us_per_token']:.1f}",
            f"{r['client_cpu_share']:.0%}", f"{r['lag_p99_ms']:.1f} ms", f"{r['near_zero_share']:.1%}",
            f"{r['server_cpu_share']:.0%}", f"{r['foreign_cpu_share']:.0%}", f"{r['steal_share']:.1%}",
            "YES" if r["client_bound"] else "no"]))
    for r in rows:
        for reason in r["reasons"]:
            print(f"  C={r['concurrency']}: {reason}")


def flags(r: dict[str, Any]) -> list[str]:
    out = ["client_bound"] if r["client_bound"] else []
    out += ["ttft_client_bound"] if r["ttft_client_bound"] else []
    out += ["timing_warning"] if r["timing_warnings"] else []
    return out


def print_flag_table(rows: list[dict[str, Any]], hi: float = 5.0, lo: float = 2.0) -> None:
    """The guardrail against the truth: the client's own TTFT p99 error (server wrote the first token ->
    the client read it) and ITL p99 error, beside what the client saw and flagged. A level with either
    error above ``hi`` ms must be flagged; one with both below ``lo`` ms must be clean."""
    print(f"\nguardrail check (flagged when an error > {hi:g} ms, clean when both < {lo:g} ms)")
    print("C | client TTFT p99 err (1st read lag) | ITL p99 err | kit's 1st-read lag p99 | lag probe p99 | "
          "CPU avg | CPU window peak | flags | check")
    for r in rows:
        ttft, itl, f = r["first_read_lag_p99_ms"], r["itl_err_p99_ms"], flags(r)
        if max(ttft, itl) > hi:
            check = "ok (flagged)" if f else "MISSED"
        elif max(ttft, itl) < lo:
            check = "ok (clean)" if not f else "false alarm"
        else:
            check = "between (either is fine)"
        print(f"{r['concurrency']} | {ttft:+.2f} ms | {itl:+.2f} ms | {r['kit_first_read_p99_ms']:.2f} ms | "
              f"{r['lag_p99_ms']:.2f} ms | {r['client_cpu_share']:.0%} | {r['cpu_window_peak']:.0%} | "
              f"{','.join(f) or 'clean'} | {check}")
    for r in rows:
        for reason in r["ttft_reasons"]:
            print(f"  C={r['concurrency']} ttft: {reason}")
        for w in r["timing_warnings"]:
            print(f"  C={r['concurrency']} warning: {w}")


def set_priority(mode: str) -> None:
    if mode == "realtime":
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    elif mode == "nice":
        os.setpriority(os.PRIO_PROCESS, 0, -15)


def overhead_specs(port: int, levels: list[int], waves: int) -> list[LevelSpec]:
    return [LevelSpec(base_url=f"http://127.0.0.1:{port}", endpoint="chat", model="fake", concurrency=c,
                      requests=waves * c, warmup_requests=c, prompt_tokens=32, output_tokens=16, seed=1,
                      request_timeout_s=60.0, processes=1, tags={"arm": "overhead", "repeat": 0, "level": c})
            for c in levels]


def overhead_row(path: str, total_s: float, results: list[LevelResult]) -> dict[str, Any]:
    walls = sum(r.wall_s for r in results)
    warm = sum(w["warmup"]["wall_s"] for r in results for w in json.loads(r.client_path.read_text())["workers"])
    return {"path": path, "total_s": total_s, "level_walls_s": walls, "outside_s": total_s - walls,
            "warmup_s": warm, "kit_s": total_s - walls - warm}


def measure_overhead(args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    levels = [int(x) for x in args.levels.split(",")]
    proc, port = start_server(out / "overhead-server.jsonl", 5.0, 2.0, -1)
    rows = []
    try:
        for rep in range(args.repeats):
            specs = overhead_specs(port, levels, args.waves)
            t0 = time.monotonic()
            res = [run_level(s, out / f"per-level-{rep}" / f"c{s.concurrency}") for s in specs]
            rows.append(overhead_row("run_level per level", time.monotonic() - t0, res))
            t0 = time.monotonic()
            with LoadSession(processes=1) as load:
                res = [load.run_level(s, out / f"session-{rep}" / f"c{s.concurrency}") for s in specs]
            rows.append(overhead_row("LoadSession", time.monotonic() - t0, res))
            with LoadSession(processes=1) as load:
                time.sleep(2.0)  # the server starting: the drivers import Locust meanwhile
                t0 = time.monotonic()
                res = [load.run_level(s, out / f"prestarted-{rep}" / f"c{s.concurrency}") for s in specs]
                load.close()
            rows.append(overhead_row("LoadSession started during server start-up", time.monotonic() - t0, res))
    finally:
        stop_server(proc)
    print(f"levels {levels}, {args.waves} recorded requests per user, 16 tokens; times per cell in s")
    print("path | total | level walls | outside walls | of which warm-ups | kit's own (outside - warm-ups)")
    for r in rows:
        print(f"{r['path']} | {r['total_s']:.2f} | {r['level_walls_s']:.2f} | {r['outside_s']:.2f} | "
              f"{r['warmup_s']:.2f} | {r['kit_s']:.2f}")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", default="64,256,512,1024")
    p.add_argument("--waves", type=int, default=5, help="recorded requests = waves * concurrency")
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=20.0)
    p.add_argument("--output-tokens", type=int, default=256)
    p.add_argument("--processes", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "results" / "loadgen-bench"))
    p.add_argument("--priority", choices=("normal", "nice", "realtime"), default="normal",
                   help="scheduling of the server and the client (inherited by every process started here): "
                        "on a shared box, 'realtime' (SCHED_FIFO 10, needs root; the kernel's RT throttling "
                        "still leaves 5%% to others) keeps other people's processes from setting the numbers")
    p.add_argument("--overhead", action="store_true",
                   help="measure kit's time outside the load walls: per-level drivers vs LoadSession "
                        "(levels default to 1,4,16,64)")
    p.add_argument("--repeats", type=int, default=3, help="with --overhead: rounds of the three paths")
    args = p.parse_args()
    set_priority(args.priority)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.overhead:
        if args.levels == p.get_default("levels"):
            args.levels = "1,4,16,64"
        rows = measure_overhead(args, out)
        (out / "overhead.json").write_text(json.dumps(rows, indent=1))
        return
    server_cpu = -1
    if len(os.sched_getaffinity(0)) >= 2:
        server_cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, set(os.sched_getaffinity(0)) - {server_cpu})  # drivers inherit this
    rows = []
    for conc in (int(x) for x in args.levels.split(",")):
        t = time.time()
        row = run_point(conc, args, out, server_cpu)
        rows.append(row)
        print(f"C={conc}: done in {time.time() - t:.0f} s", file=sys.stderr, flush=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    print(f"priority: {args.priority}; cores: server {server_cpu}, client {sorted(os.sched_getaffinity(0))}")
    print_table(rows)
    print_flag_table(rows)


if __name__ == "__main__":
    main()
