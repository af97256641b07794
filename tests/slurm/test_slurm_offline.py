"""The Slurm adapter without a cluster (fast tier): absent commands are exit 12, a refusing command exit 13
(real processes standing in for Slurm's clients on PATH), squeue's JSON as Slurm 22.05 writes it, the options
and batch script kit writes (parsed back by bash), and the SLURM_* variables a job sees."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from slurm_helpers import kit
from support.manifests import manifest_model

from kit.envinfo import slurm_allocation
from kit.errors import ExitCode, SlurmRefused, SlurmUnavailable, UsageError
from kit.slurm import Slurm, allocation, render_allocation
from kit.slurm.batch import batch_script, check_slurm_opts, kit_run_argv, log_pattern, sbatch_options
from kit.slurm.queue import parse_sacct, parse_squeue_json

# Trimmed from `squeue --json --states=all` on Debian's slurm-wlm 22.05.8 (task 1 of array 8 is job 8 itself).
SQUEUE_22_05 = {"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "jobs": [
    {"job_id": 9, "name": "kit-sweep-a", "job_state": "COMPLETED", "partition": "debug", "nodes": "vm",
     "node_count": 1, "tres_alloc_str": "cpu=2,mem=21694M,node=1,billing=2", "comment": "kit out=/shared",
     "exit_code": 0, "current_working_directory": "/w", "array_job_id": 8, "array_task_id": 0,
     "array_task_string": ""},
    {"job_id": 8, "name": "kit-sweep-a", "job_state": "RUNNING", "partition": "debug", "nodes": "vm",
     "node_count": 1, "tres_alloc_str": "", "tres_req_str": "cpu=1,node=1", "comment": "", "exit_code": 0,
     "current_working_directory": "/w", "array_job_id": 8, "array_task_id": 1, "array_task_string": ""},
    {"job_id": 12, "name": "kit-b", "job_state": "PENDING", "partition": "gpu", "nodes": "", "node_count": 0,
     "comment": "", "exit_code": None, "array_job_id": 12, "array_task_id": None, "array_task_string": "2-5%2"},
]}


def test_squeue_json_of_slurm_22_05() -> None:
    jobs = parse_squeue_json(SQUEUE_22_05)
    assert [(j.job_id, j.display_id, j.state, j.active) for j in jobs] == [
        ("9", "8_0", "COMPLETED", False), ("8", "8_1", "RUNNING", True), ("12", "12_[2-5%2]", "PENDING", True)]
    assert jobs[0].allocation == "cpu=2,mem=21694M,node=1,billing=2" and jobs[1].allocation == "cpu=1,node=1"
    assert jobs[0].comment == "kit out=/shared" and jobs[2].exit_code == ""


def test_sacct_parsable2_rows() -> None:
    text = "8_1|8|kit-a|CANCELLED by 0|debug|vm|1|cpu=2,node=1|kit out=/s|0:15|/w\nnot|a|row\n"
    [j] = parse_sacct(text)
    assert (j.display_id, j.job_id, j.state, j.node_count, j.exit_code) == ("8_1", "8", "CANCELLED", 1, "0:15")


def _fake(tmp_path: Path, name: str, script: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / name).chmod(0o755)
    return {"PATH": str(bin_dir)}


def test_missing_commands_are_slurm_unavailable_exit_10(tmp_path: Path) -> None:
    sl = Slurm(env={"PATH": str(tmp_path)})
    with pytest.raises(SlurmUnavailable) as e:
        sl.squeue()
    assert e.value.exit_code == ExitCode.SLURM_UNAVAILABLE == 12 and "not installed" in e.value.message
    r = kit("jobs", env={"PATH": str(tmp_path)})  # the CLI: no traceback, the exit code from the one table
    assert r.returncode == 12 and "squeue" in r.stderr and "Traceback" not in r.stderr


def test_refusals_and_an_unreachable_controller(tmp_path: Path) -> None:
    env = _fake(tmp_path, "sbatch", 'echo "sbatch: error: invalid partition specified: nope" >&2; exit 1')
    with pytest.raises(SlurmRefused) as refused:
        Slurm(env=env).sbatch(tmp_path / "job.sh")
    assert refused.value.exit_code == 13 and "invalid partition specified: nope" in refused.value.message
    env = _fake(tmp_path, "squeue", 'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1')
    with pytest.raises(SlurmUnavailable, match="cannot reach the Slurm controller"):
        Slurm(env=env).squeue()
    env = _fake(tmp_path, "sbatch", "echo 'Submitted batch job 5'")  # not --parsable's answer
    with pytest.raises(SlurmRefused, match="not a job id"):
        Slurm(env=env).sbatch(tmp_path / "job.sh")
    env = _fake(tmp_path, "sbatch", "echo '41;kit'")
    sub = Slurm(env=env).sbatch(tmp_path / "job.sh")
    assert (sub.job_id, sub.cluster) == ("41", "kit")


def test_allocation_from_hardware() -> None:
    assert allocation(manifest_model({**_m(), "hardware": {"gpus": 8}})).options() == [
        "--nodes=1", "--ntasks-per-node=1", "--gpus-per-node=8", "--exclusive"]
    a = allocation(manifest_model({**_m(), "hardware": {"gpus": "all"}}), exclusive=False)
    assert a.options() == ["--nodes=1", "--ntasks-per-node=1"] and "'all'" in a.describe()
    two = allocation(manifest_model({**_m(), "runtime": "slurm", "hardware": {"gpus": 8, "nodes": 2, "gpus_per_node": 4}}))
    assert "--nodes=2" in two.options() and "--gpus-per-node=4" in two.options()
    lines = render_allocation(manifest_model({**_m(), "hardware": {"gpus": 2}}), ["--partition=gpu"])
    assert "2 GPU(s) per node, exclusive" in lines[0] and lines[1].startswith("    sbatch --partition=gpu --job-name=")


def _m() -> dict[str, object]:
    from support.manifests import manifest_data

    return manifest_data("alloc")


def test_slurm_opts_must_be_single_options_and_not_kits_own() -> None:
    ok = ["--partition=gpu", "-t10", "-pdebug", "--exclusive", "--export-file=f", "-vp", "-Hpgpu-ajob", "--time=1:00"]
    assert check_slurm_opts(ok) == ok
    for bad in ["10", "partition=gpu", "--time=1\n#SBATCH --uid=0", "--job-name=x", "-Jx", "--array=0-3", "--output=/x",
                "--", "-", "--=x"]:
        with pytest.raises(UsageError):
            check_slurm_opts([bad])


# sbatch (getopt_long) takes an unambiguous prefix of a long option and clusters short flags: checked against
# slurm-wlm 22.05.8, where `#SBATCH --ar=0-1` made an array 0-1 and `#SBATCH -HJother` named the job "other".
@pytest.mark.parametrize(("opt", "sets"), [
    ("--job=evil", "--job-name"), ("--arr=0-3", "--array"), ("--ar=0-1", "--array"), ("--sig=B:USR1@5", "--signal"),
    ("--out=/tmp/x", "--output"), ("--exp=NONE", "--export"), ("--err=/x", "--error"), ("--ch=/", "--chdir"),
    ("--comm=x", "--comment"), ("--pars", "--parsable"), ("--wr=id", "--wrap"), ("--job-name evil", "--job-name"),
    ("-a0-3", "-a (--array)"), ("-a", "-a (--array)"), ("-J", "-J (--job-name)"), ("-o/x", "-o (--output)"),
    ("-e/x", "-e (--error)"), ("-D/", "-D (--chdir)"), ("-HJother", "-J (--job-name)"), ("-vQa0-1", "-a (--array)"),
])
def test_abbreviations_and_short_forms_of_kits_options_are_refused(opt: str, sets: str) -> None:
    with pytest.raises(UsageError) as e:
        check_slurm_opts([opt])
    assert e.value.message.startswith(f"--slurm-opt {opt}: kit sets {sets} itself")


def test_kits_options_come_after_the_users_so_that_kits_win(tmp_path: Path) -> None:
    a = allocation(manifest_model({**_m(), "hardware": {"gpus": 1}}))
    opts = sbatch_options(a, job_name="kit-x", comment="kit out=/s", log=f"{tmp_path}/log", array="0-1",
                          extra=["--partition=gpu", "--gpus-per-node=4"])
    assert opts[:2] == ["--partition=gpu", "--gpus-per-node=4"]
    assert opts[2:] == ["--job-name=kit-x", "--comment=kit out=/s", f"--output={tmp_path}/log", "--export=ALL",
                        "--signal=B:TERM@120", *a.options(), "--array=0-1"]


def test_the_batch_script_holds_no_sbatch_line_and_bash_reads_it(tmp_path: Path) -> None:
    """The options go to sbatch as arguments: the script holds no ``#SBATCH`` line sbatch's own parser could
    read (it takes a backslash inside single quotes as an escape), even for names built to break out of one."""
    a = allocation(manifest_model({**_m(), "hardware": {"gpus": 1}}))
    odd = tmp_path / "dir with 'quote'\\'\\' --mail-user=evil@example.com\\'"
    opts = sbatch_options(a, job_name="kit-x", comment=f"kit out={odd}", log=log_pattern(tmp_path / "o%u", "%x-%j.out"),
                          array="0-1%1", extra=["--time=1:00:00"])
    assert f"--output={tmp_path}/o%%u/%x-%j.out" in opts  # sbatch's pattern: %% is a literal %
    argv = kit_run_argv("/usr/bin/python3", out_dir=odd, trust=[tmp_path / "t"], allow_unsigned=False,
                        allow_unpinned=True, key=None)
    text = batch_script(opts, argv, [tmp_path / "a.yaml", odd / "b.yaml"], header="h")
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0
    assert not [line for line in text.splitlines() if line.lstrip().upper().startswith("#SBATCH")]
    # sbatch stops looking for directives at the first command; the record of the options comes after it
    first_command = next(i for i, line in enumerate(text.splitlines()) if line and not line.startswith("#"))
    assert "submitted as: sbatch" in "\n".join(text.splitlines()[first_command:])
    # the array task picks its manifest; print instead of exec to see the command bash would run
    shown = subprocess.run(["bash", "-c", text.replace("exec ", "printf '%s\\n' "), "x"], text=True,
                           capture_output=True, env={"SLURM_ARRAY_TASK_ID": "1"}, check=True).stdout.splitlines()
    assert shown == [*argv, str(odd / "b.yaml")]


def test_paths_sbatch_cannot_take_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="backslash"):
        log_pattern(tmp_path / "a\\b", "%x-%j.out")
    with pytest.raises(UsageError, match="control character"):
        log_pattern(tmp_path / "a\nb", "%x-%j.out")
    a = allocation(manifest_model(_m()))
    with pytest.raises(UsageError, match="control character"):
        sbatch_options(a, job_name="kit-x", comment="kit bundle=/a\n#SBATCH --uid=0", log="l", array=None, extra=[])


def test_sbatch_gets_the_options_as_arguments(tmp_path: Path) -> None:
    """A stand-in sbatch on PATH records its arguments one per line: each option is one argument, before
    the script."""
    args = tmp_path / "args"
    env = _fake(tmp_path, "sbatch", f"printf '%s\\n' \"$@\" > {args}; echo 7")
    hostile = "--comment=kit bundle=/x\\'\\' --mail-user=evil@example.com"
    Slurm(env=env).sbatch(tmp_path / "job.sh", chdir=tmp_path, options=[hostile, "--exclusive"])
    assert args.read_text().splitlines() == ["--parsable", hostile, "--exclusive", f"--chdir={tmp_path}",
                                             str(tmp_path / "job.sh")]


def test_slurm_allocation_from_the_job_environment() -> None:
    assert slurm_allocation({}) is None
    env = {"SLURM_JOB_ID": "9", "SLURM_ARRAY_JOB_ID": "8", "SLURM_ARRAY_TASK_ID": "0", "SLURM_JOB_PARTITION": "gpu",
           "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "8",
           "SLURM_CPUS_ON_NODE": "x"}
    got = slurm_allocation(env)
    assert got is not None and got["job_id"] == "9" and got["node_list"] == "n[1-2]" and got["nodes"] == 2
    assert got["gpus_on_node"] == "8" and got["cpus_on_node"] is None and got["cluster"] is None


@pytest.mark.slow  # spawns kit several times (~3 s): the slow tier keeps the fast one under budget
def test_submit_refuses_before_touching_slurm(tmp_path: Path) -> None:
    """Usage errors and a manifest asking for nodes its runtime cannot use stop kit submit before any Slurm
    command runs (PATH has none)."""
    from support.manifests import manifest_data, write_manifest

    env = {"PATH": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    assert kit("submit", env=env).returncode == 2
    m = write_manifest(tmp_path / "two.yaml", manifest_data("two", hardware={"nodes": 2}))
    r = kit("submit", str(m), "--allow-unsigned", "--out", str(tmp_path / "out"), env=env)
    assert r.returncode == 3 and "hardware.nodes is 2 but runtime is process" in r.stderr, r.stderr
    r = kit("submit", str(m), "--resume", str(tmp_path), env=env)
    assert r.returncode == 2 and "not both" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # spawns kit several times (~3 s): the slow tier keeps the fast one under budget
def test_kit_plan_shows_the_slurm_allocation() -> None:
    """`kit plan` prints the allocation and the sbatch options kit submit would use (text and --json)."""
    root = Path(__file__).resolve().parents[2]
    r = kit("plan", str(root / "experiments" / "demo.yaml"))
    assert r.returncode == 0, r.stderr
    assert "slurm (kit submit): 1 node(s)" in r.stdout and "sbatch --job-name=kit-demo" in r.stdout
    assert "--exclusive" in r.stdout
    j = kit("plan", "--json", str(root / "experiments" / "demo.yaml"))
    assert j.returncode == 0, j.stderr


    lines = json.loads(j.stdout)["slurm"]
    assert any(line.strip().startswith("sbatch ") and "--nodes=1" in line for line in lines)


@pytest.mark.slow  # spawns kit several times (~3 s): the slow tier keeps the fast one under budget
def test_the_job_runs_the_installed_kit_not_a_kit_package_in_the_submit_directory(tmp_path: Path) -> None:
    """The job starts in the submit directory; python -P keeps a ``kit/`` there off sys.path."""
    import os
    import sys

    from kit import __version__

    shadow = tmp_path / "kit"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    (shadow / "__main__.py").write_text("print('shadowed')\n")
    argv = kit_run_argv(sys.executable, out_dir=tmp_path, trust=[], allow_unsigned=False, allow_unpinned=False,
                        key=None)
    assert argv[:5] == [sys.executable, "-P", "-m", "kit", "run"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def version(python_argv: list[str]) -> str:
        return subprocess.run([*python_argv, "--version"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              check=False).stdout.strip()

    assert version(argv[:4]) == f"kit, version {__version__}"
    assert version([sys.executable, "-m", "kit"]) == "shadowed"  # what the job ran before -P


def _job(job_id: int, comment: str) -> dict[str, object]:
    return {"job_id": job_id, "name": f"kit-j{job_id}", "job_state": "COMPLETED", "partition": "debug",
            "nodes": "vm", "node_count": 1, "comment": comment, "exit_code": 0, "array_job_id": 0}


@pytest.mark.slow  # spawns kit several times (~3 s): the slow tier keeps the fast one under budget
def test_kit_jobs_lists_only_this_users_jobs_and_notes_a_directory_it_cannot_read(tmp_path: Path) -> None:
    """squeue --me and sacct --user=UID (fakes on PATH record what kit asked); a job whose directory cannot be
    read (a name too long for the file system; another user's mode-700 directory) gets a note, not a crash."""
    import os

    args = tmp_path / "args"
    readable, secret = tmp_path / "shared", tmp_path / "other" / "private"
    readable.mkdir()
    secret.mkdir(parents=True)
    jobs = [_job(5, f"kit out={readable}"), _job(6, f"kit out={tmp_path / ('x' * 300)}"),
            _job(7, f"kit out={secret}")]
    _fake(tmp_path, "squeue", f"echo \"squeue $*\" >> {args}\nprintf '%s' '{json.dumps({'jobs': jobs})}'")
    env = _fake(tmp_path, "sacct", f'echo "sacct $*" >> {args}\n'
                                   'echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1')
    secret.parent.chmod(0o000)  # another user's directory (root reads it anyway)
    try:
        r = kit("jobs", "--json", env=env)
        text = kit("jobs", env=env)
    finally:
        secret.parent.chmod(0o755)
    assert r.returncode == 0 and text.returncode == 0, r.stderr + text.stderr
    got = {j["job_id"]: j for j in json.loads(r.stdout)}
    assert got["5"]["note"] is None and got["5"]["bundle"] is None
    assert got["6"]["note"] == f"cannot read {tmp_path / ('x' * 300)}: File name too long"
    if os.geteuid() != 0:
        assert got["7"]["note"] == f"cannot read {secret}: Permission denied"
    assert "- (cannot read " in text.stdout and "Traceback" not in text.stderr + r.stderr
    calls = args.read_text().splitlines()
    assert all("--me" in c.split() for c in calls if c.startswith("squeue"))
    assert all(f"--user={os.getuid()}" in c.split() for c in calls if c.startswith("sacct"))
    assert len(calls) == 4
