"""``cells/<id>/level-<c>/records.jsonl``: one JSON object per recorded request, appended as each one ends.

Written by the load driver (``kit.load``), read by ``kit.stats``. The hot paths on both sides keep plain dicts;
this TypedDict is their contract. A request is ok when ``status == 200``, ``error`` is null and it got at least
one content chunk; HTTP errors are records, not exceptions. Warm-up requests are not recorded. Lines are in
order of completion (per driver process; merged line by line for several processes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NotRequired

from pydantic import RootModel
from typing_extensions import TypedDict  # pydantic validates it only from typing_extensions on Python 3.11


class Record(TypedDict):
    """One request, as one line of ``records.jsonl``. Times are ns, relative to ``t_start_ns`` unless said."""

    arm: NotRequired[str]
    """The level spec's tags are copied into every record; kit's experiments tag arm, repeat and level."""
    repeat: NotRequired[int]
    level: NotRequired[int]
    rid: str
    """Unique within the level: ``"w<process>-<ticket>"``, e.g. ``"w0-17"``; also sent as the X-Request-Id header."""
    worker: int
    """Index of the driver process that sent it."""
    t_start_ns: int
    """``time.perf_counter_ns()`` just before the request's bytes were written (after any connection set-up);
    compare only within one worker (on Linux it is CLOCK_MONOTONIC)."""
    wall_start: float
    """``time.time()`` at the same moment."""
    ttft_ns: int | None
    """First chunk carrying non-empty content; null if none."""
    chunk_ns: list[int]
    """Arrival of every content-carrying chunk (``chunk_ns[0] == ttft_ns``); chunks taken from the socket in one
    read share one timestamp."""
    e2e_ns: int
    """End of the response (or of the failure)."""
    usage_completion_tokens: int | None
    """From the final usage chunk (``stream_options.include_usage`` is always sent); null when the server sent none."""
    usage_prompt_tokens: int | None
    """Likewise; null when the server sent none."""
    client_tokens: int
    """Content chunks counted by the client (``len(chunk_ns)``)."""
    status: int
    """HTTP status; 0 when no response arrived."""
    error: str | None
    """Null, or a short string ("http 500: ...", "connect: connection refused", "connection closed mid-stream",
    "timeout after 600 s", "response head over 64 KiB", "SSE line over 256 KiB", "over 1088 SSE events for
    max_tokens 256", ...): what the server sent beyond kit's bounds ends the request with such an error."""
    usage_flag: NotRequired[str | None]
    """Null, or why the server's ``usage.completion_tokens`` is not believed (``kit.files.bounds.usage_problem``):
    not an integer in 0..``MAX_USAGE_TOKENS`` (then ``usage_completion_tokens`` is null), below the client's count
    of content events, or above the ``max_tokens`` asked. Such a request is still ok; its timing uses the client's
    count. Absent in records of kits before it."""

    workload_index: NotRequired[int]
    """With a workload (load.dataset): the request's line in ``workload/level-<c>.jsonl`` (what was sent)."""
    max_tokens: NotRequired[int]
    """With a workload: the ``max_tokens`` this request asked for (datasets vary it per request)."""
    prompt_tokens_expected: NotRequired[int | None]
    """With a workload: the prompt tokens its tokenizer counts for the request as sent (chat: templated)."""
    prompt_flag: NotRequired[str | None]
    """With a workload: null, or how ``usage_prompt_tokens`` differs from ``prompt_tokens_expected`` by more than
    one token (``kit.load.prompts.prompt_problem``). Absent without a workload and in records of kits before it."""


    sched_ns: NotRequired[int | None]
    """Open loop (``load.arrival``): when the request was due, ns after the level's start in its worker
    (``kit.load.arrivals``: rebuildable from the seed); null in a closed loop. Absent in records of kits before it."""
    late_ns: NotRequired[int | None]
    """The client's own lateness: sent (``t_start_ns``) minus due, where due is the scheduled time, or, when every
    user was busy then (open loop), the moment a finished request freed one; any delay after that (a busy event
    loop, a late wake-up) is lateness. Closed loop: from when the user took the request."""
    queue_ns: NotRequired[int | None]
    """Open loop: how long the request waited, every user busy (the level's cap), from its scheduled time until a
    finished request freed a user (vLLM's ``client_queue_time``); not in its latency, as in vLLM and sglang. So
    ``t_start_ns - sched_ns - queue_ns - late_ns`` is the worker's ``t0_ns`` (client.json). Null: closed loop."""


def steady_window(workers: Sequence[Mapping[str, object]]) -> Callable[[Mapping[str, object]], bool]:
    """Which records the statistics keep, from ``client.json``'s ``workers``: with a ``window`` (``load.window:
    steady``) a record is kept when it was *sent* inside the window, start <= ``t_start_ns`` <= end (its worker's
    clock), whatever its outcome: the selection is on send time only, never on how long the request took (a rule
    on its end time keeps the fast requests sent late and drops the slow ones, which biases the window's latency
    low, the slower arm's more). The level runs until every request it sent has ended, so each kept one is
    measured; its timeout or failure is an error of the window. A worker without a window (``load.window: all``,
    older kits) keeps every record."""
    windows: dict[object, tuple[int, int]] = {}
    for w in workers:
        win = w.get("window")
        if isinstance(win, Mapping) and isinstance(win.get("start_ns"), int) and isinstance(win.get("end_ns"), int):
            windows[w.get("worker")] = (int(win["start_ns"]), int(win["end_ns"]))

    def keep(rec: Mapping[str, object]) -> bool:
        win = windows.get(rec.get("worker"))
        if win is None:
            return True
        start = rec.get("t_start_ns")
        return isinstance(start, int) and win[0] <= start <= win[1]

    return keep


class RecordLine(RootModel[Record]):
    """One line of ``records.jsonl`` as a model, for ``bundle.schema.json`` and for checking a file."""
