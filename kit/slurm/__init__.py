"""Experiments through Slurm: `kit submit` queues `kit run` in an allocation, `kit jobs` lists kit's jobs
and their bundles. ``commands`` is the one adapter to Slurm's commands (a REST or Kubernetes backend would
replace it); ``queue`` reads their answers; ``batch`` makes the allocation, options and batch script;
``submit`` verifies and queues; ``jobs`` finds each job's bundle."""

from kit.slurm.batch import JOB_PREFIX, Allocation, allocation, render_allocation
from kit.slurm.commands import Slurm, SlurmAccountingDisabled, Submitted
from kit.slurm.jobs import KitJob, list_jobs, render_jobs
from kit.slurm.queue import JobInfo
from kit.slurm.submit import SubmitOptions, SubmittedJob, submit, submit_resume

__all__ = [
    "JOB_PREFIX",
    "Allocation",
    "JobInfo",
    "KitJob",
    "Slurm",
    "SlurmAccountingDisabled",
    "SubmitOptions",
    "Submitted",
    "SubmittedJob",
    "allocation",
    "list_jobs",
    "render_allocation",
    "render_jobs",
    "submit",
    "submit_resume",
]
