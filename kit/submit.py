"""`kit submit`: verify every manifest the way `kit run` does, then queue one Slurm job per experiment, or
one job array for a sweep of experiments that ask for the same allocation.

Nothing is queued unless every manifest passed: an untrusted one stops the whole submission with exit 4
(the job verifies again when it runs, under the same --trust files). The batch scripts and the jobs' logs
go to ``OUT/slurm/``; the bundles to ``OUT/`` (a directory every node sees).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kit import __version__
from kit.bundle import runner_key
from kit.errors import ModelPathMissing, UsageError
from kit.experiment import RunOptions, load_for_run
from kit.plumbing.clock import utc_now
from kit.plumbing.files import atomic_write
from kit.slurm.batch import (
    COMMENT_PREFIX,
    JOB_PREFIX,
    Allocation,
    allocation,
    batch_script,
    check_slurm_opts,
    check_value,
    kit_run_argv,
    log_pattern,
    sbatch_options,
)
from kit.slurm.commands import Slurm

SCRIPTS_DIR = "slurm"  # under OUT: the batch scripts kit wrote and the jobs' output


@dataclass
class SubmitOptions:
    out_dir: Path = Path("results")
    trust: list[Path] = field(default_factory=list)
    allow_unsigned: bool = False
    allow_unpinned: bool = False
    key: Path | None = None
    slurm_opts: list[str] = field(default_factory=list)
    exclusive: bool = True
    max_parallel: int | None = None  # an array's throttle (--array=0-N%max_parallel)
    python: str = sys.executable


@dataclass(frozen=True)
class SubmittedJob:
    job_id: str  # the array's id for an array (its tasks are JOB_0, JOB_1, ...)
    job_name: str
    manifests: tuple[Path, ...]  # () for a resume
    resume: Path | None
    script: Path
    log: Path
    allocation: Allocation

    def describe(self) -> str:
        what = f"resume of {self.resume}" if self.resume else ", ".join(str(p) for p in self.manifests)
        kind = f"array of {len(self.manifests)}" if len(self.manifests) > 1 else "job"
        return f"{kind} {self.job_id} ({self.job_name}): {what}; {self.allocation.describe()}; script {self.script}"


@dataclass(frozen=True)
class _Verified:
    path: Path
    name: str
    allocation: Allocation


def _run_options(opts: SubmitOptions, resume: Path | None = None) -> RunOptions:
    return RunOptions(out_dir=opts.out_dir, resume=resume, allow_unsigned=opts.allow_unsigned,
                      allow_unpinned=opts.allow_unpinned, trust=list(opts.trust), key=opts.key)


def _check(path: Path | None, opts: SubmitOptions, resume: Path | None = None) -> _Verified:
    """Signature and trust over the manifest's exact bytes, as `kit run` checks them (exit 4 when untrusted), and
    what `kit run` refuses before it starts (exit 3): model.path included, checked here on the submit host. The job
    runs `kit run` on a compute node, which opens it at the same path; on a cluster the path is on storage both see
    (a job that can only fail is never queued), and a path only the nodes have is run from inside an allocation."""
    try:
        inputs = load_for_run(path, _run_options(opts, resume))
    except ModelPathMissing as e:
        raise e.note("kit submit checks model.path here, on the host it submits from: the batch job's `kit run` "
                     "opens it on the compute node at this same path, so give it on storage both see. If only the "
                     "nodes have it (a node-local disk), run kit inside an allocation instead (`srun kit run "
                     "MANIFEST`), where it is checked on the node; runtime slurm only notes it") from None
    m = inputs.lm.manifest
    return _Verified(inputs.lm.path, m.name, allocation(m, exclusive=opts.exclusive))


def _prepare(opts: SubmitOptions) -> tuple[list[str], Path]:
    extra = check_slurm_opts(opts.slurm_opts)
    log_pattern(opts.out_dir.resolve() / SCRIPTS_DIR, "x")  # refused before anything is written
    runner_key(opts.key)  # the runner key exists before any job starts (array tasks must not race to make it)
    scripts = opts.out_dir.resolve() / SCRIPTS_DIR
    try:
        scripts.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {scripts}: {e.strerror or e}",
                         hint="give --out a directory you can write, on storage every node sees") from None
    return extra, scripts


def _queue(slurm: Slurm, opts: SubmitOptions, extra: list[str], scripts: Path, group: list[_Verified],
           resume: Path | None = None) -> SubmittedJob:
    first = group[0]
    job_name = JOB_PREFIX + (first.name if len(group) == 1 else f"sweep-{first.name}")
    array = None
    if len(group) > 1:
        array = f"0-{len(group) - 1}" + (f"%{opts.max_parallel}" if opts.max_parallel else "")
    log_name = "%x-%A_%a.out" if array else "%x-%j.out"
    log = scripts / log_name
    comment = COMMENT_PREFIX + (f"bundle={resume.resolve()}" if resume else f"out={opts.out_dir.resolve()}")
    options = sbatch_options(first.allocation, job_name=job_name, comment=comment, log=log_pattern(scripts, log_name),
                             array=array, extra=extra)
    run_argv = kit_run_argv(opts.python, out_dir=opts.out_dir, trust=opts.trust, allow_unsigned=opts.allow_unsigned,
                            allow_unpinned=opts.allow_unpinned, key=opts.key, resume=resume)
    manifests = [] if resume else [v.path for v in group]
    header = (f"written by kit {__version__} submit at {utc_now()}: `kit run` inside the allocation "
              "(it verifies the manifest again there)")
    stamp = utc_now().replace(":", "").replace("-", "").split(".")[0]
    script = scripts / f"{job_name}-{stamp}-{len(list(scripts.glob(f'{job_name}-*.sh')))}.sh"
    cwd = Path(check_value("the working directory", str(Path.cwd())))
    atomic_write(script, batch_script(options, run_argv, manifests, header=header).encode())
    submitted = slurm.sbatch(script, chdir=cwd, options=options)
    return SubmittedJob(submitted.job_id, job_name, tuple(manifests), resume, script, log, first.allocation)


def submit(manifests: Sequence[Path], opts: SubmitOptions, slurm: Slurm | None = None) -> list[SubmittedJob]:
    """Verify every manifest, then queue them: one job each, or one array per group asking for the same
    allocation. Returns the jobs in submission order."""
    if not manifests:
        raise UsageError("give at least one MANIFEST to submit, or --resume BUNDLE")
    verified = [_check(p, opts) for p in manifests]  # all of them before anything is queued
    extra, scripts = _prepare(opts)
    groups: dict[Allocation, list[_Verified]] = {}
    for v in verified:
        groups.setdefault(v.allocation, []).append(v)
    sl = slurm or Slurm()
    return [_queue(sl, opts, extra, scripts, g) for g in groups.values()]


def submit_resume(bundle: Path, opts: SubmitOptions, slurm: Slurm | None = None) -> SubmittedJob:
    """Continue an interrupted or failed bundle in a new job (`kit run --resume` there): the bundle's
    provenance and manifest are verified here first, as `kit run --resume` does."""
    opts = replace(opts, out_dir=bundle.resolve().parent)  # its script and log go beside the bundle
    verified = _check(None, opts, resume=bundle)
    extra, scripts = _prepare(opts)
    return _queue(slurm or Slurm(), opts, extra, scripts, [verified], resume=bundle)
