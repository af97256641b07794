"""A process started as from a terminal, for the tests that Ctrl-C it.

A process started from a background job (`make test &`, `nohup`, some CI runners) inherits SIGINT *ignored*, and
an ignored signal stays ignored across exec: kit then keeps it ignored (as a shell's `kit run &` asks), and a
SIGINT a test sends is lost. Python's own handler here (not SIG_IGN) is reset to SIG_DFL in the child by exec."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def popen_as_from_a_terminal(argv: list[str], **kwargs: Any) -> subprocess.Popen[str]:
    """``subprocess.Popen(argv, text=True, **kwargs)`` with SIGINT at its default disposition in the child."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(argv, text=True, **kwargs)
    finally:
        signal.signal(signal.SIGINT, old)
