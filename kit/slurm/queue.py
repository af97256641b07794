"""Slurm's view of a job, read from ``squeue --json`` (Slurm 22.05: OpenAPI v0.0.38) or ``sacct --parsable2``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The sacct columns kit asks for, in this order (``--format``).
SACCT_FIELDS = ("JobID", "JobIDRaw", "JobName", "State", "Partition", "NodeList", "NNodes", "AllocTRES",
                "Comment", "ExitCode", "WorkDir")


@dataclass(frozen=True)
class JobInfo:
    """One job (or array task). ``job_id`` is Slurm's unique id (SLURM_JOB_ID inside the job); ``display_id``
    is what squeue shows (``12_3`` for task 3 of array 12)."""

    job_id: str
    display_id: str
    name: str
    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, TIMEOUT, ...
    partition: str
    nodes: str
    node_count: int
    allocation: str  # TRES, e.g. cpu=2,mem=4G,node=1,gres/gpu=8
    comment: str
    exit_code: str
    work_dir: str

    @property
    def active(self) -> bool:
        return self.state in {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED",
                              "RESIZING", "SIGNALING", "STAGE_OUT"}


def _display_id(j: dict[str, Any]) -> str:
    array_job = j.get("array_job_id") or 0
    task = j.get("array_task_id")
    if array_job and task is not None:
        return f"{array_job}_{task}"
    if array_job and j.get("array_task_string"):
        return f"{array_job}_[{j['array_task_string']}]"
    return str(j["job_id"])


def _state(v: object) -> str:
    if isinstance(v, list):  # later Slurm versions give a list of flags
        return ",".join(str(x) for x in v)
    return str(v or "")


def parse_squeue_json(doc: dict[str, Any]) -> list[JobInfo]:
    """The jobs in ``squeue --json``'s answer (fields kit does not use are ignored)."""
    jobs = []
    for j in doc["jobs"]:
        exit_code = j.get("exit_code")
        jobs.append(JobInfo(
            job_id=str(j["job_id"]), display_id=_display_id(j), name=str(j.get("name") or ""),
            state=_state(j.get("job_state")), partition=str(j.get("partition") or ""),
            nodes=str(j.get("nodes") or ""), node_count=int(j.get("node_count") or 0),
            allocation=str(j.get("tres_alloc_str") or j.get("tres_req_str") or ""),
            comment=str(j.get("comment") or ""), exit_code="" if exit_code is None else str(exit_code),
            work_dir=str(j.get("current_working_directory") or ""),
        ))
    return jobs


def parse_sacct(text: str) -> list[JobInfo]:
    """``sacct --parsable2 --noheader -X --format=SACCT_FIELDS`` lines as jobs."""
    jobs = []
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) != len(SACCT_FIELDS):
            continue
        row = dict(zip(SACCT_FIELDS, cols, strict=True))
        jobs.append(JobInfo(
            job_id=row["JobIDRaw"], display_id=row["JobID"], name=row["JobName"],
            state=row["State"].split(" ")[0], partition=row["Partition"], nodes=row["NodeList"],
            node_count=int(row["NNodes"]) if row["NNodes"].isdigit() else 0, allocation=row["AllocTRES"],
            comment=row["Comment"], exit_code=row["ExitCode"], work_dir=row["WorkDir"],
        ))
    return jobs
