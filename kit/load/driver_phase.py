"""Driver-process side (imported only inside ``python -m kit.load.driver``): the tickets of one phase (warm-up or
level) and its counters, including when its requests were due and sent (``kit.load.arrivals``)."""

from __future__ import annotations

import locust  # noqa: F401  (first: gevent monkey-patching, see kit.load.driver)

# isort: split
import time
from array import array
from collections import deque

from gevent.event import Event

from kit.load.driver_monitor import RecordWriter

perf_ns = time.perf_counter_ns


class Budget:
    """Shared tickets of one phase; gevent runs in one thread, so no lock. With a ``deadline`` (perf ns; a
    time-limited level) no ticket is handed out after it, and the phase ends when the requests in flight end.

    Each ``release`` notes when a user became free (its request's end); the next ``take`` gets the oldest such
    moment as ``freed_ns`` (None for a user's first ticket): when the slot it takes became free, whatever the
    client did between that end, the release and this take. Open loop, a ticket due before its slot was freed
    waited for the cap (queue); the time from the later of the two to its send is the client's own lateness."""

    def __init__(self) -> None:
        self.left = 0
        self.next = 0
        self.inflight = 0
        self.deadline: int | None = None
        self.finished = Event()
        self.freed: deque[int] = deque()
        self.freed_ns: int | None = None  # of the ticket the last take() handed out

    def reset(self, n: int, deadline: int | None = None) -> None:
        self.left, self.next, self.inflight, self.deadline = n, 0, 0, deadline
        self.freed.clear()
        self.finished.clear()
        if n == 0:
            self.finished.set()

    def take(self) -> int | None:
        if self.deadline is not None and self.left > 0 and perf_ns() >= self.deadline:
            self.left = 0
            if self.inflight == 0:
                self.finished.set()
        if self.left <= 0:
            return None
        self.left -= 1
        self.inflight += 1
        self.freed_ns = self.freed.popleft() if self.freed else None
        ticket = self.next
        self.next += 1
        return ticket

    def release(self, at: int | None = None) -> None:
        """A user is free again: ``at`` is when its request ended (perf ns; None: now, nothing was sent)."""
        self.freed.append(perf_ns() if at is None else at)
        self.inflight -= 1
        if self.left <= 0 and self.inflight == 0:
            self.finished.set()


class Phase:
    """Counters of the current phase (warm-up or level) and where its records go."""

    def __init__(self, name: str, rid_prefix: str, index_offset: int, sink: RecordWriter | None,
                 tags: dict[str, str | int]) -> None:
        self.name = name
        self.t0 = perf_ns()
        self.rid_prefix = rid_prefix
        self.index_offset = index_offset
        self.sink = sink
        self.tags = tags
        self.ok = 0
        self.errors = 0
        self.out_tokens = 0
        self.usage_tokens = 0
        self.first_error: str | None = None
        self.first_read_lag_ns = array("q")  # per ok request: the client's own delay on its first chunk
        self.clock_offset_ns = time.time_ns() - perf_ns()  # CLOCK_REALTIME - perf_counter
        # when requests go out (kit.load.arrivals): the open-loop due times of this process's tickets (ns after
        # t0) with their global request indices, else None (closed loop: a user sends when its last one ended)
        self.schedule: list[int] | None = None
        self.indices: list[int] | None = None
        self.late_ns = array("q")     # per sent request: sent - due (the client's own lateness)
        self.queue_ns = array("q")    # per sent open-loop request: due with every user busy -> a release freed one
        self.e2e_sum_ns = 0           # over ok requests (the warm-up's mean E2E sets the ramp)
        self.first_send_ns: int | None = None
        self.last_send_ns: int | None = None
        self.users_spawned = 0        # users given a start index (their order in the stagger)
        self.users_started = 0
        self.ramp_end_ns: int | None = None  # when the last user sent its first request (closed loop)
        self.stagger_ns = 0           # closed loop, steady window: user k's first request waits k * stagger_ns
        self.unsent = 0               # open loop, time-limited: due requests not sent by the deadline
        self.deadline: int | None = None
        self.go = Event()             # set when the level's clock (t0) starts: open-loop users wait for it
        self.go.set()
