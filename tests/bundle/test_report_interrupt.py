"""`kit report` of a finished bundle removes its provenance, re-renders and re-signs. Was: SIGTERM (or Ctrl-C) in
between killed it there, leaving a complete bundle with no provenance: `kit verify` failed ("never signed") and
`kit report` refused to run again (exit 9). Now the signals wait until the bundle is re-signed: exit 130, and the
bundle verifies. A real `kit report` process, signalled while its provenance is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.terminal import popen_as_from_a_terminal

from kit.bundle import Bundle, verify_bundle
from kit.signing import SigningKey, user_trust_file

pytestmark = pytest.mark.slow  # a kit process rendering every plot: a few seconds


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_kit_report_waits_for_the_new_provenance(bundle: Bundle, runner: SigningKey,
                                                                  sig: signal.Signals) -> None:
    trust = user_trust_file()
    trust.parent.mkdir(parents=True, exist_ok=True)
    trust.write_text(f'runner namespaces="kit-bundle" {runner.public_line()}\n')
    verify_bundle(bundle.root, [])
    prov = bundle.root / "provenance.dsse.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = popen_as_from_a_terminal([sys.executable, "-m", "kit", "report", str(bundle.root), "--key", str(runner.path)],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while prov.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not prov.exists(), "the report never removed its provenance (or ended before it could be signalled)"
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "interrupted" in out and "Traceback" not in out, out
    assert prov.is_file()
    verify_bundle(bundle.root, [])  # sealed again: every file, summary recomputed
