"""Another kit process, as the gates and `kit clean` must see one: a real process (``sleep``, the ``other_kit``
fixture of tests/conftest.py) and the labels kit would put on its containers, its run lock in another lock
directory (``labels_of``)."""

from __future__ import annotations

import subprocess

from kit.plumbing.procs import start_ticks
from kit.runtime.records import boot_id, pid_namespace


def labels_of(p: subprocess.Popen[bytes], **changed: str) -> dict[str, str]:
    """A container's labels as a kit process ``p`` would set them, its run lock in another lock directory."""
    labels = {"kit.managed": "1", "kit.run": "run-a", "kit.pid": str(p.pid), "kit.start_ticks": str(start_ticks(p.pid)),
              "kit.boot": boot_id() or "", "kit.pidns": pid_namespace() or "", "kit.lock_dir": "/elsewhere/locks"}
    return {**labels, **changed}
