"""Running the kit CLI and waiting for Slurm jobs, for the slurm tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kit.plumbing.poll import poll_until
from kit.slurm import JobInfo, Slurm

ROOT = Path(__file__).resolve().parents[2]


def kit(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=ROOT, check=False)


def submitted_ids(stdout: str) -> list[str]:
    """The job ids `kit submit` printed ("submitted job 12 (...)" / "submitted array of 2 12 (...)")."""
    return [line.split(" (")[0].split()[-1] for line in stdout.splitlines() if line.startswith("submitted ")]


def jobs_of(job_id: str, slurm: Slurm | None = None) -> list[JobInfo]:
    """The job, or an array's tasks, as squeue (all states) sees them."""
    return [j for j in (slurm or Slurm()).squeue() if j.job_id == job_id or j.display_id.startswith(f"{job_id}_")]


def wait_done(job_id: str, timeout: float = 150, slurm: Slurm | None = None) -> list[JobInfo]:
    """Wait until the job (every task of an array) has ended; returns its final records."""
    def ended() -> list[JobInfo] | None:
        jobs = jobs_of(job_id, slurm)
        return jobs if jobs and not any(j.active or "[" in j.display_id for j in jobs) else None

    done = poll_until(ended, timeout, interval=0.2, backoff=1.5, max_interval=1.0)
    assert done, f"job {job_id} did not end within {timeout} s: {jobs_of(job_id, slurm)}"
    return done


def read_json(p: Path) -> Any:
    return json.loads(p.read_text())


def bundles(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if (p / "run.json").is_file())
