"""A bundle whose name is built to break out of an ``#SBATCH`` line, submitted to the real local Slurm with
`kit submit --resume`: no option beyond kit's reaches sbatch, as the controller itself reports the job
(``scontrol show job``: no mail user, no node list, kit's own comment).

sbatch's parser of ``#SBATCH`` lines reads a backslash as an escape inside single quotes, so a shell-quoted
``x\\'\\' --mail-user=...`` once ended its word early and queued the rest of the name as options (checked
against slurm-wlm 22.05.8: the job got MailUser, ReqNodeList and a comment of the name's choosing)."""

from __future__ import annotations

import subprocess

import pytest
from conftest import Cluster, Setup
from slurm_helpers import bundles, kit, read_json, submitted_ids
from support.ports import free_port

from kit.slurm import Slurm

pytestmark = pytest.mark.slow

B, Q = "\\", "'"


def _show(job_id: str) -> dict[str, str]:
    """``scontrol show job`` as field -> value (the controller's view of what was asked); the comment, which
    may hold spaces and '=', is on a line of its own there."""
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    fields: dict[str, str] = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Comment="):
            fields["Comment"] = line.removeprefix("Comment=")
            continue
        for word in line.split():
            k, _, v = word.partition("=")
            fields.setdefault(k, v)
    return fields


def test_a_hostile_bundle_name_adds_no_sbatch_option(setup: Setup, slurm_cluster: Cluster) -> None:
    m = setup.manifest("slurm-hostile", free_port(), requests=2)
    local = setup.tmp / "local"
    r = kit("run", str(m), "--out", str(local), "--trust", str(setup.trust), env=setup.env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    [b] = bundles(local)
    name = (f"b{B}{Q}{B}{Q} --mail-user=evil@example.com --mail-type=ALL --nodelist={slurm_cluster.host} "
            f"--comment=pwned{B}{Q}")
    setup.out.mkdir(parents=True)
    hostile = b.rename(setup.out / name)
    r = kit("submit", "--resume", str(hostile), "--trust", str(setup.trust), "--slurm-opt=--hold", env=setup.env)
    assert r.returncode == 0, r.stdout + r.stderr
    [job_id] = submitted_ids(r.stdout)
    try:
        job = _show(job_id)
    finally:
        Slurm().scancel(job_id)
    assert job["JobName"] == "kit-slurm-hostile"
    assert "MailUser" not in job and job.get("MailType", "NONE") == "NONE", job
    assert job["ReqNodeList"] == "(null)", job
    assert job["Comment"] == f"kit bundle={hostile}", job
    assert job["StdOut"].startswith(str(setup.out / "slurm")), job
    [script] = (setup.out / "slurm").glob("kit-slurm-hostile-*.sh")
    assert "#SBATCH" not in script.read_text().upper()
    assert read_json(hostile / "run.json")["status"] == "complete"  # the held job never ran
