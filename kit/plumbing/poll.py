"""One poll loop: call a check until it answers or a deadline passes.

Every wait in kit (readiness, clean GPUs, free ports, a process group gone, a container removed) is
this loop with its own check, interval and deadline, so a deadline is always on the monotonic clock
and the check always runs at least once, also after the deadline when the first call was late.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Deadline:
    """A point on the monotonic clock."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.at


def poll_until(check: Callable[[], T], deadline: Deadline | float, *, interval: float = 0.02,
               backoff: float = 1.0, max_interval: float = 1.0) -> T:
    """Call ``check`` until it returns something truthy or ``deadline`` (a Deadline, or seconds from now)
    passes; return its last answer (falsy on time-out). Ticks keep their rhythm: a slow check does not
    push the next one back by its own duration. With ``backoff`` > 1 the interval grows up to
    ``max_interval``. Exceptions from ``check`` propagate (a check that sees a dead server raises)."""
    end = deadline if isinstance(deadline, Deadline) else Deadline.after(deadline)
    delay = interval
    while True:
        tick = time.monotonic()
        answer = check()
        if answer or end.passed():
            return answer
        time.sleep(max(0.0, min(tick + delay, end.at) - time.monotonic()))
        delay = min(delay * backoff, max_interval)
