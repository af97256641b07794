"""Experiments through Slurm. ``commands`` is the one adapter to Slurm's commands (a REST or Kubernetes backend
would replace it); ``queue`` reads their answers; ``batch`` makes the allocation, options and batch script
(``kit.submit`` verifies manifests and queues them with it); ``jobs`` finds each job's bundle (`kit jobs`);
``ranks`` is the runtime of servers that span nodes, one rank per node as a job step, and ``nodecheck`` the
gates it runs on every node."""

from kit.slurm.batch import JOB_PREFIX, Allocation, allocation, render_allocation
from kit.slurm.commands import Slurm, SlurmAccountingDisabled, Submitted
from kit.slurm.jobs import KitJob, list_jobs, render_jobs
from kit.slurm.queue import JobInfo

__all__ = [
    "JOB_PREFIX",
    "Allocation",
    "JobInfo",
    "KitJob",
    "Slurm",
    "SlurmAccountingDisabled",
    "Submitted",
    "allocation",
    "list_jobs",
    "render_allocation",
    "render_jobs",
]
