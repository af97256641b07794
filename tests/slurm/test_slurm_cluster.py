"""kit submit / kit jobs against a real one-node Slurm cluster (conftest.py starts it): the job runs `kit run`
in its allocation and the bundle records the job; a sweep is one array of two jobs; scancel mid-run leaves a
consistent, resumable bundle that `kit submit --resume` completes; nothing untrusted is ever queued.

Checked against what kit did not write: Slurm's own squeue (job states, ids, nodes) and sinfo (partition,
node name), and the processes on the machine (psutil)."""

from __future__ import annotations

import json

import psutil
import pytest
from conftest import Cluster, Setup
from slurm_helpers import bundles, kit, read_json, submitted_ids, wait_done
from support.ports import free_port

from kit.plumbing.poll import poll_until
from kit.signing import generate_key
from kit.slurm import JobInfo, Slurm

pytestmark = pytest.mark.slow


def _engines_on(port: int) -> list[str]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "kit.engine" in cmd and str(port) in cmd:
            found.append(" ".join(cmd))
    return found


def test_submit_runs_kit_run_in_the_allocation_and_the_bundle_records_the_job(setup: Setup,
                                                                             slurm_cluster: Cluster) -> None:
    m = setup.manifest("slurm-one", free_port())
    r = kit("submit", str(m), "--out", str(setup.out), "--trust", str(setup.trust), env=setup.env)
    assert r.returncode == 0, r.stderr
    [job_id] = submitted_ids(r.stdout)
    [job] = wait_done(job_id)
    assert job.state == "COMPLETED" and job.nodes == slurm_cluster.host, job
    [b] = bundles(setup.out)
    run = read_json(b / "run.json")
    assert run["status"] == "complete" and run["trust"]["signed"] is True
    slurm = read_json(b / "environment.json")["slurm"]
    assert slurm["job_id"] == job_id and slurm["partition"] == slurm_cluster.partition
    assert slurm["node_list"] == slurm_cluster.host and slurm["nodes"] == 1 and slurm["job_name"] == "kit-slurm-one"
    v = kit("verify", "--trust", str(setup.trust), str(b), env=setup.env)
    assert v.returncode == 0 and "TRUSTED" in v.stdout, v.stdout + v.stderr
    # the batch script asked for a whole node and runs kit run itself (scancel's SIGTERM reaches kit)
    [script] = (setup.out / "slurm").glob("kit-slurm-one-*.sh")
    text = script.read_text()
    assert "#SBATCH" not in text and "submitted as: sbatch" in text and " --exclusive " in text  # argv, not #SBATCH
    assert "\nexec " in text and f"--trust {setup.trust}" in text
    listed = kit("jobs", "--json", env=setup.env)
    assert listed.returncode == 0, listed.stderr
    mine = [j for j in json.loads(listed.stdout) if j["slurm_job_id"] == job_id]
    assert mine and mine[0]["bundle"] == str(b) and mine[0]["bundle_status"] == "complete"


def test_a_sweep_of_two_manifests_runs_as_two_jobs(setup: Setup, slurm_cluster: Cluster) -> None:
    ms = [setup.manifest("slurm-sweep-a", free_port()), setup.manifest("slurm-sweep-b", free_port())]
    r = kit("submit", *map(str, ms), "--out", str(setup.out), "--trust", str(setup.trust), env=setup.env)
    assert r.returncode == 0, r.stderr
    [array_id] = submitted_ids(r.stdout)  # one array: both ask for the same allocation
    tasks = wait_done(array_id)
    assert sorted(t.display_id for t in tasks) == [f"{array_id}_0", f"{array_id}_1"], tasks
    assert all(t.state == "COMPLETED" for t in tasks) and len({t.job_id for t in tasks}) == 2, tasks
    found = {}
    for b in bundles(setup.out):
        env = read_json(b / "environment.json")["slurm"]
        found[read_json(b / "run.json")["experiment"]] = (env["array_job_id"], env["array_task_id"], env["job_id"],
                                                         read_json(b / "run.json")["status"])
    assert found == {"slurm-sweep-a": (array_id, "0", tasks_by(tasks, "0"), "complete"),
                     "slurm-sweep-b": (array_id, "1", tasks_by(tasks, "1"), "complete")}


def tasks_by(tasks: list[JobInfo], index: str) -> str:
    return next(t.job_id for t in tasks if t.display_id.endswith(f"_{index}"))


def test_scancel_mid_run_leaves_a_resumable_bundle_and_submit_resume_completes_it(setup: Setup,
                                                                                  slurm_cluster: Cluster) -> None:
    port = free_port()
    m = setup.manifest("slurm-cancel", port, requests=60)
    r = kit("submit", str(m), "--out", str(setup.out), "--trust", str(setup.trust), env=setup.env)
    assert r.returncode == 0, r.stderr
    [job_id] = submitted_ids(r.stdout)

    def recording() -> bool:  # the first cell is under load: records are being appended
        return any(p.stat().st_size > 0 for p in setup.out.glob("*/cells/*/level-*/records.jsonl"))

    assert poll_until(recording, 90, interval=0.1), "no records within 90 s"
    Slurm().scancel(job_id)
    [job] = wait_done(job_id)
    assert job.state == "CANCELLED", job
    [b] = bundles(setup.out)
    assert read_json(b / "run.json")["status"] == "interrupted"
    assert _engines_on(port) == []  # the SIGTERM path stopped the server
    v = kit("verify", "--trust", str(setup.trust), str(b), env=setup.env)
    assert v.returncode == 0 and "interrupted" in v.stdout, v.stdout + v.stderr
    log = next((setup.out / "slurm").glob(f"*-{job_id}.out")).read_text()
    assert "resumable" in log and "Traceback" not in log, log

    r2 = kit("submit", "--resume", str(b), "--trust", str(setup.trust), env=setup.env)
    assert r2.returncode == 0, r2.stderr
    [job2] = submitted_ids(r2.stdout)
    [done] = wait_done(job2)
    assert done.state == "COMPLETED", done
    run = read_json(b / "run.json")
    assert run["status"] == "complete" and len(run["resumed"]) == 1
    assert read_json(b / "environment.resume-1.json")["slurm"]["job_id"] == job2
    assert kit("verify", "--trust", str(setup.trust), str(b), env=setup.env).returncode == 0
    assert _engines_on(port) == []


def test_untrusted_manifest_is_refused_at_submit_and_nothing_is_queued(setup: Setup, slurm_cluster: Cluster) -> None:
    m = setup.manifest("slurm-untrusted", free_port())
    stranger = generate_key(setup.tmp / "stranger", "stranger@elsewhere")
    trust = setup.tmp / "only_stranger"
    trust.write_text(f'stranger namespaces="kit-manifest" {stranger.public_line()}\n')
    before = {j.job_id for j in Slurm().squeue()}
    r = kit("submit", str(m), "--out", str(setup.out), "--trust", str(trust), env=setup.env)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "not trusted" in r.stderr or "untrusted" in r.stderr.lower(), r.stderr
    assert {j.job_id for j in Slurm().squeue()} == before  # nothing queued, in any state
    assert [j for j in Slurm().squeue() if j.name == "kit-slurm-untrusted"] == []
    assert not (setup.out / "slurm").exists()  # not even a batch script written


def test_slurm_refusing_an_option_is_exit_11_with_its_own_words(setup: Setup, slurm_cluster: Cluster) -> None:
    m = setup.manifest("slurm-refused", free_port())
    r = kit("submit", str(m), "--out", str(setup.out), "--trust", str(setup.trust),
            "--slurm-opt=--partition=no-such-partition", env=setup.env)
    assert r.returncode == 13, r.stdout + r.stderr
    assert "sbatch refused" in r.stderr and "partition" in r.stderr.lower(), r.stderr
    assert [j for j in Slurm().squeue() if j.name == "kit-slurm-refused"] == []
