"""SIGTERM during `kit archive`: was the default action (exit 143, no message), leaving a hidden
``.NAME.tmp-PID-N`` file beside the output; now it ends as Ctrl-C does (exit 130, "interrupted") and the temp
file is removed. A real `kit archive` process, signalled while it writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.terminal import popen_as_from_a_terminal

from kit.bundle import Bundle, sign_provenance
from kit.signing import SigningKey

pytestmark = pytest.mark.slow  # gzip level 9 of 256 MiB: a few seconds


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_kit_archive_leaves_no_temp_file(bundle: Bundle, tmp_path: Path, sig: signal.Signals,
                                                         runner: SigningKey) -> None:
    with open(bundle.root / "cells" / "big.bin", "wb") as f:  # enough bytes to be caught while writing
        f.write(os.urandom(1 << 20) * 256)
    bundle.remove_provenance()  # signed again with it: kit archive writes only what its provenance signed
    sign_provenance(bundle, runner, predicate={})
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # as from a terminal: under `nohup make test` a plain child would start with SIGHUP ignored, and kit keeps it so
    proc = popen_as_from_a_terminal([sys.executable, "-m", "kit", "archive", str(bundle.root), "-o",
                                     str(out_dir / "b.tar.gz")], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 60
    while not any(out_dir.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert proc.poll() is None, "kit archive ended before it could be signalled"
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "interrupted" in out and "Traceback" not in out, out
    assert list(out_dir.iterdir()) == []
