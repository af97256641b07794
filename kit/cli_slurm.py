"""The Slurm commands of the `kit` command line (`kit submit`, `kit jobs`), added to the main group by
kit.cli; like every command they parse, call one library function and render. Errors reach kit.cli's
``KitGroup``, the one place that maps them to exit codes."""

from __future__ import annotations

from pathlib import Path

import click

from kit.cli_options import echo, echo_json, output_dir, trust_option
from kit.errors import UsageError
from kit.slurm import list_jobs, render_jobs
from kit.submit import SubmitOptions, submit_resume
from kit.submit import submit as submit_all


@click.command()
@click.argument("manifests", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
              show_default=True, callback=output_dir,
              help="Shared directory (seen by every node) for the bundles; the batch scripts and the jobs' output go "
                   "to OUT/slurm/.")
@click.option("--resume", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Continue an interrupted or failed bundle in a new job (kit run --resume there); verified here "
                   "first, as kit run --resume does.")
@click.option("--slurm-opt", "slurm_opts", multiple=True, metavar="OPTION",
              help="An sbatch option for every job, e.g. --slurm-opt=--partition=gpu --slurm-opt=--time=4:00:00 "
                   "(repeatable; kit's own --job-name, --comment, --output, --array, --signal are refused).")
@click.option("--shared", is_flag=True, help="Do not ask for whole nodes (--exclusive is the default, so that no "
                                             "other job shares the GPUs, CPUs or ports).")
@click.option("--max-parallel", type=click.IntRange(min=1), default=None,
              help="For a sweep (a job array): at most this many experiments run at once.")
@click.option("--allow-unsigned", is_flag=True, help="Submit an unsigned or untrusted manifest (recorded).")
@click.option("--allow-unpinned", is_flag=True, help="Accept image bases not pinned by digest (recorded).")
@trust_option
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path),
              help="Runner key the jobs sign bundles with (default: ~/.config/kit/runner_ed25519).")
def submit(manifests: tuple[Path, ...], out_dir: Path, resume: Path | None, slurm_opts: tuple[str, ...],
           shared: bool, max_parallel: int | None, allow_unsigned: bool, allow_unpinned: bool,
           trust: tuple[Path, ...], key: Path | None) -> None:
    """Run experiments as Slurm jobs: one job per manifest, or one job array for manifests that ask for the same
    allocation (hardware.nodes, hardware.gpus_per_node). Every manifest is verified first: nothing is queued
    unless all are trusted (exit 4). Each job runs `kit run` inside its allocation."""
    opts = SubmitOptions(out_dir=out_dir, trust=list(trust), allow_unsigned=allow_unsigned,
                         allow_unpinned=allow_unpinned, key=key, slurm_opts=list(slurm_opts), exclusive=not shared,
                         max_parallel=max_parallel)
    if resume is not None and manifests:
        raise UsageError("give MANIFESTs or --resume BUNDLE, not both")
    jobs = [submit_resume(resume, opts)] if resume is not None else submit_all(list(manifests), opts)
    for job in jobs:
        echo(f"submitted {job.describe()}")
    echo("follow them with `kit jobs`; each bundle records its Slurm job id in environment.json")


@click.command()
@click.option("--out", "out_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="Also look for bundles here (the jobs' comments name their directories already).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def jobs(out_dirs: tuple[Path, ...], as_json: bool) -> None:
    """List kit's Slurm jobs (named kit-*) with their state and their bundles' status."""
    found = list_jobs(list(out_dirs))
    if as_json:
        echo_json([k.as_dict() for k in found])
        return
    for line in render_jobs(found):
        echo(line)
