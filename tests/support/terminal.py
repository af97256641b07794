"""A process started as from a terminal, for the tests that Ctrl-C it or hang it up.

A process started from a background job (`make test &`, some CI runners) inherits SIGINT *ignored*, one started
under `nohup` SIGHUP ignored, and an ignored signal stays ignored across exec: kit then keeps it ignored (as a
shell's `kit run &` or `nohup kit run` asks), and the signal a test sends is lost (a clean clone run under nohup:
`kit archive` hung up finished its archive and exited 0). Python's own handler here (not SIG_IGN) is reset to
SIG_DFL in the child by exec."""

from __future__ import annotations

import signal
import subprocess
from typing import Any

JOB_CONTROL = (signal.SIGINT, signal.SIGHUP)  # what `cmd &` and `nohup cmd` start ignored


def popen_as_from_a_terminal(argv: list[str], **kwargs: Any) -> subprocess.Popen[str]:
    """``subprocess.Popen(argv, text=True, **kwargs)`` with SIGINT and SIGHUP at their default dispositions in the
    child."""
    old = {sig: signal.signal(sig, signal.default_int_handler) for sig in JOB_CONTROL}
    try:
        return subprocess.Popen(argv, text=True, **kwargs)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
