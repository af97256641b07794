"""`kit jobs`: kit's Slurm jobs (named ``kit-*``) and, for each, its bundle and the bundle's status.

A job finds its bundle through the bundle itself: ``environment.json`` (or ``environment.resume-<n>.json``)
records the SLURM_JOB_ID it ran in. The directories searched are those the jobs' comments name
(``kit out=DIR`` / ``kit bundle=DIR``) and any given with --out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.errors import BundleError
from kit.files.environment import EnvironmentFile
from kit.files.read import read_file
from kit.files.run import RunFile
from kit.slurm.batch import COMMENT_PREFIX, JOB_PREFIX
from kit.slurm.commands import Slurm, SlurmAccountingDisabled
from kit.slurm.queue import JobInfo


@dataclass(frozen=True)
class BundleRef:
    path: Path
    status: str  # run.json's: running | complete | failed | interrupted


@dataclass(frozen=True)
class KitJob:
    job: JobInfo
    bundle: BundleRef | None
    note: str | None = None  # why its bundle could not be looked for (a directory kit cannot read)

    def as_dict(self) -> dict[str, object]:
        j = self.job
        return {"job_id": j.display_id, "slurm_job_id": j.job_id, "name": j.name, "state": j.state,
                "partition": j.partition, "nodes": j.nodes, "allocation": j.allocation,
                "bundle": str(self.bundle.path) if self.bundle else None,
                "bundle_status": self.bundle.status if self.bundle else None, "note": self.note}


def comment_dir(comment: str) -> tuple[str, Path] | None:
    """``kit out=DIR`` -> ("out", DIR); ``kit bundle=DIR`` -> ("bundle", DIR); anything else -> None."""
    if not comment.startswith(COMMENT_PREFIX):
        return None
    key, sep, value = comment[len(COMMENT_PREFIX):].partition("=")
    return (key, Path(value)) if sep and key in {"out", "bundle"} and value else None


def _job_ids_of(bundle: Path) -> list[str]:
    """The Slurm job ids a bundle's environments record (its start, then each resume)."""
    ids = []
    for env in sorted(bundle.glob("environment*.json")):
        try:
            doc = read_file(bundle, env.name, EnvironmentFile).root
        except BundleError:
            continue
        slurm = doc.get("slurm")
        if slurm is not None:
            ids.append(slurm["job_id"])
    return ids


@dataclass
class BundleIndex:
    by_job: dict[str, BundleRef]
    unreadable: dict[Path, str]  # directory -> why it could not be scanned (another user's, say)


def bundles_by_job(dirs: Sequence[Path]) -> BundleIndex:
    """Every bundle directly under ``dirs`` (or one of ``dirs`` itself), by the Slurm job ids it ran in; a
    directory that cannot be read is recorded, not an error."""
    index = BundleIndex({}, {})
    candidates: list[Path] = []
    for d in dirs:
        try:
            if (d / "run.json").is_file():
                candidates.append(d)
            elif d.is_dir():
                candidates += [p for p in sorted(d.iterdir()) if (p / "run.json").is_file()]
        except OSError as e:
            index.unreadable[d] = e.strerror or str(e)
    for b in candidates:
        ref = bundle_ref(b)
        if ref is None:
            continue
        try:
            job_ids = _job_ids_of(b)
        except OSError as e:
            index.unreadable[b] = e.strerror or str(e)
            continue
        for job_id in job_ids:
            index.by_job[job_id] = ref
    return index


def bundle_ref(path: Path) -> BundleRef | None:
    try:
        return BundleRef(path, read_file(path, "run.json", RunFile).status)
    except BundleError:
        return None


def list_jobs(out_dirs: Sequence[Path] = (), slurm: Slurm | None = None) -> list[KitJob]:
    """This user's kit jobs the controller still knows (squeue --me, all states), plus finished ones from
    accounting where the cluster keeps it (sacct --user), each with its bundle when one records the job."""
    sl = slurm or Slurm()
    jobs = {j.job_id: j for j in sl.squeue(mine=True) if j.name.startswith(JOB_PREFIX)}
    try:
        for j in sl.sacct(name_prefix=JOB_PREFIX, mine=True):
            jobs.setdefault(j.job_id, j)
    except SlurmAccountingDisabled:
        pass  # a cluster without accounting: squeue's recent jobs are all there is
    dirs = list(out_dirs)
    job_dir: dict[str, Path] = {}
    pending_bundle: dict[str, Path] = {}
    for j in jobs.values():
        where = comment_dir(j.comment)
        if where is None:
            continue
        key, path = where
        job_dir[j.job_id] = path if key == "out" else path.parent
        dirs.append(job_dir[j.job_id])
        if key == "bundle":
            pending_bundle[j.job_id] = path
    index = bundles_by_job(list(dict.fromkeys(dirs)))
    result = []
    for job_id, j in sorted(jobs.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
        ref: BundleRef | None = index.by_job.get(job_id)
        if ref is None and job_id in pending_bundle:  # a resume that has not started yet: its bundle is known
            ref = bundle_ref(pending_bundle[job_id])
        d = job_dir.get(job_id)
        note = f"cannot read {d}: {index.unreadable[d]}" if ref is None and d in index.unreadable else None
        result.append(KitJob(j, ref, note))
    return result


def render_jobs(jobs: Sequence[KitJob]) -> list[str]:
    if not jobs:
        return ["no kit jobs of yours known to Slurm (squeue --me --states=all; sacct where the cluster keeps "
                "accounting)"]
    rows = [("JOB", "STATE", "NAME", "NODES", "BUNDLE", "STATUS")]
    for k in jobs:
        j = k.job
        rows.append((j.display_id, j.state, j.name, j.nodes or "-", str(k.bundle.path) if k.bundle else "-",
                     k.bundle.status if k.bundle else f"- ({k.note})" if k.note else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)), r[-1]]) for r in rows]
