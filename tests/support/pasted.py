"""A command kit printed, run as a user pastes it: through ``sh -c``, with `kit` on PATH being this checkout's kit
(a shim that runs ``python -m kit`` with the test's interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def pasted(command: str, shim_dir: Path, *, env: Mapping[str, str], cwd: Path,
           timeout: float) -> subprocess.CompletedProcess[str]:
    """``command`` run by ``sh -c`` in ``cwd``, with ``env`` over the test's environment and ``shim_dir`` (made if
    missing) holding the `kit` first on PATH."""
    shim_dir.mkdir(exist_ok=True)
    (shim_dir / "kit").write_text(f'#!/bin/sh\nexec {sys.executable} -m kit "$@"\n')
    (shim_dir / "kit").chmod(0o755)
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False,
                          env={**os.environ, **env, "PATH": f"{shim_dir}:{os.environ['PATH']}"})
