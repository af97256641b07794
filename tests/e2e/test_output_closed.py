"""A reader that goes away mid-run (`kit run M 2>&1 | head -3`): kit ends as a command whose output was closed
does (exit 141, 128 + SIGPIPE, quietly), its run stopped like an interrupt: servers stopped, the bundle
consistent, "interrupted", and `kit run --resume` finishes it. A review saw exit 1, the run "failed" after one
cell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import bundle_of, one_level_manifest, read_json
from support.manifests import manifest_data, write_manifest
from support.ports import free_port

pytestmark = pytest.mark.slow


def test_a_closed_output_stops_the_run_as_an_interrupt_with_141(tmp_path: Path, isolated: dict[str, str]) -> None:
    m = one_level_manifest(tmp_path / "pipe.yaml", free_port(), name="pipe", repeats=2)
    out = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "kit", "run", str(m), "--out", str(out), "--allow-unsigned"],
                            env=isolated, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    for line in proc.stdout:  # as `head` would: read a little, then go away
        if line.startswith(b"bundle: "):
            break
    proc.stdout.close()
    assert proc.wait(timeout=300) == 141
    b = bundle_of(out)
    assert read_json(b / "run.json")["status"] == "interrupted"
    again = subprocess.run([sys.executable, "-m", "kit", "run", "--resume", str(b), "--allow-unsigned"],
                           env=isolated, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert read_json(b / "run.json")["status"] == "complete"


def test_a_reader_gone_at_the_bundle_line_still_leaves_an_interrupted_bundle(tmp_path: Path,
                                                                            isolated: dict[str, str]) -> None:
    """A review: the `bundle:` line was said before the run's try, so a reader gone exactly there (`| head -N`)
    escaped the interrupt's handling: a bundle with no outcome. The events are the boundary here (the line's
    write is where the pipe closes); no server starts."""
    from kit.experiment import RunOptions, run_experiment
    from kit.experiment.options import QuietEvents
    from kit.plumbing.interrupts import OutputClosed

    class GoneAtTheBundleLine(QuietEvents):
        def message(self, text: str) -> None:
            if text.startswith("bundle: "):
                raise OutputClosed

    m = write_manifest(tmp_path / "gone.yaml", manifest_data(
        "gone", port=free_port(), load={"levels": [1], "requests_per_level": 2, "warmup_requests": 0,
                                        "prompt_tokens": 8, "output_tokens": 4, "seed": 3},
        design={"repeats": 1}, gates={"port_deadline_s": 5}))
    out = tmp_path / "results"
    with pytest.raises(OutputClosed):
        run_experiment(m, RunOptions(out_dir=out, allow_unsigned=True), GoneAtTheBundleLine())
    b = bundle_of(out)
    assert read_json(b / "run.json")["status"] == "interrupted"
