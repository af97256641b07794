"""kit's load generator: concurrency levels against an OpenAI-style streaming endpoint.

The parent side (this package, imported by the rest of kit) never imports locust, gevent or
geventhttpclient: ``import locust`` monkey-patches the whole process and crashes when ``requests``,
``urllib3`` or ``docker`` came first. Locust runs in driver subprocesses (``python -m kit.load.driver``),
each in its own process group, killed on errors, ``KeyboardInterrupt`` and ``should_stop``.

The levels of a run's cells run in one ``LoadSession`` (``kit.load.session``): its driver processes start
(and import Locust) once and run one level after another, cell after cell::

    with LoadSession(processes=1) as load:        # drivers start here, e.g. while the server starts
        for spec in specs:
            result = load.run_level(spec, out_dir, on_progress=..., should_stop=...)

``run_level(spec, out_dir)`` is the same for a single level (a session of one level).

Each level writes two files into ``out_dir``:

``records.jsonl`` — one JSON object per recorded request, appended and flushed as each request ends::

    arm, repeat, level ...   the spec's tags, copied into every record
    rid                      unique within the level: "w<process>-<ticket>", e.g. "w0-17"; also sent to
                             the server as the X-Request-Id header
    worker                   index of the driver process that sent it
    t_start_ns               time.perf_counter_ns() just before the request's bytes were written (after
                             any connection set-up; compare only within one worker; on Linux it is
                             CLOCK_MONOTONIC)
    wall_start               time.time() at the same moment
    ttft_ns                  first chunk carrying non-empty content, relative to t_start_ns; null if none
    chunk_ns                 arrival of every content-carrying chunk, ns relative to t_start_ns
                             (chunk_ns[0] == ttft_ns); chunks taken from the socket in one read share
                             one timestamp
    e2e_ns                   end of the response (or of the failure), relative to t_start_ns
    usage_completion_tokens  from the final usage chunk (asked for as the spec's ``dialect`` says:
    usage_prompt_tokens      stream_options.include_usage for sglang); null when the server sent none
    client_tokens            content chunks counted by the client (= len(chunk_ns))
    status                   HTTP status; 0 when no response arrived
    error                    null, or a short string ("http 500: ...", "connect: connection refused",
                             "connection closed mid-stream", "timeout after 600 s", ...)
    usage_flag               null, or why the server's usage count cannot be true (kit.files.bounds): not
                             an integer in 0..2^31 (then usage_completion_tokens is null), below
                             client_tokens, or above output_tokens; the request is still ok
    sched_ns                 open loop: when it was due, ns after the level's start (kit.load.arrivals);
                             null in a closed loop
    late_ns                  the client's own lateness: sent minus due (due: the scheduled time, or when a
                             user became free; closed loop: when the user took the request)
    queue_ns                 open loop: due with every user busy (the cap): the wait until one freed; null closed

Everything a server sends is bounded per request (kit.files.bounds): the response head (64 KiB), what is read of an
error body (4 KiB), one SSE line (256 KiB) and the events of one response (4 per token asked + 64); a request
that goes beyond one ends with an error naming it ("response head over 64 KiB", "SSE line over 256 KiB",
"over 128 SSE events for max_tokens 16"), and the request timeout holds on every path; the other requests go on.

A stream ends at ``data: [DONE]``, or at the end of the body after an event with a non-null ``finish_reason``
(``transformers serve`` sends no [DONE]); a body that ends before either is an error ("stream ended without
[DONE] or a finish_reason"), and so is an event after ``[DONE]`` ("an SSE event after [DONE]": its token would
be timed). SSE lines may end in LF, CRLF or CR alone, as the SSE spec allows. A request is ok when
``status == 200``, ``error`` is null and it got at least one content chunk. HTTP errors are records, not exceptions.
Warm-up requests (sent first, at the same concurrency) are not recorded.
The order of lines is the order of completion (per process; merged for several processes).

``client.json`` — the client's self-monitoring per process (CPU time and share of one core, a 10 ms
scheduling-lag probe with p50/p99/max and first-vs-last-third trend, inter-chunk gap median and the share of
near-zero gaps, tokens/s, CPU µs per token) and the verdict ``client_bound`` with its reasons
(``kit.load.assess``): a level where the client could not keep up must never look clean.

Failures: ``run_level`` raises ``LoadError`` when the level cannot run (bad spec, https, nothing listens
at ``base_url``, every warm-up request failed) or a driver process dies or stalls; the message names the
process and quotes its last stderr lines, kept in ``out_dir/.driver/`` (removed after a clean level).
``should_stop`` returning True ends the level early: the drivers are killed and the result comes back with
``stopped=True`` and partial records. ``on_progress`` gets ``Progress`` at most about four times a second.

Several processes: ``processes=0`` picks ``ceil(concurrency / 256)`` capped at (usable cores - 1, min 1);
``N`` splits users, budget and warm-up over N independent driver processes (each its own Locust
``LocalRunner`` and records part, merged line by line into ``records.jsonl`` while the level runs). They
all finish their warm-up, then start the level at one absolute moment the parent sends with its signal
(CLOCK_MONOTONIC; ``client.json``'s ``start_ns`` and each process's ``t0_ns`` and ``start_skew_ns``).
Independent processes were chosen over Locust's master/worker mode because per-request data then never passes
through one master's event loop and ZeroMQ (a bottleneck of its own at high token rates), a crashed process is seen
at once by its exit code, and nothing is lost at the stop (a worker does not flush its last report).

When requests go out (``arrivals``, docs/arrivals.md): closed loop (each user sends its next request when its
last one ended), or open loop (``arrival`` poisson / gamma at ``rate``, at most ``concurrency`` in flight), each
request sent at its scheduled time; ``duration_s`` makes a level time-limited, ``window="steady"`` spreads the
closed-loop users' starts and writes the steady-state window into ``client.json``.

Modules: ``spec`` (LevelSpec, LevelResult, Progress, checks), ``arrivals`` (schedules, pure), ``session``
(LoadSession), ``_level`` (one level over driver processes, ``client.json``), ``_procs`` (one driver process),
``messages`` (the JSON lines between them), ``assess`` and ``selfstats`` (pure), ``prompts`` and ``sse`` (pure,
both sides);
``driver``, ``driver_phase``, ``driver_stream`` and ``driver_monitor`` run only in the driver process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kit.load.session import LoadSession
from kit.load.spec import LevelResult, LevelSpec, Progress, auto_processes, process_count, usable_cores

__all__ = ["LevelResult", "LevelSpec", "LoadSession", "Progress", "auto_processes", "process_count", "run_level",
           "usable_cores"]


def run_level(spec: LevelSpec, out_dir: Path, *, on_progress: Callable[[Progress], None] | None = None,
              should_stop: Callable[[], bool] | None = None) -> LevelResult:
    """Run one level in a session of its own; see the module docstring for what lands in ``out_dir``."""
    with LoadSession(processes=0) as session:
        return session.run_level(spec, out_dir, on_progress=on_progress, should_stop=should_stop)
