"""The one adapter between kit and a Slurm cluster: its own commands (``sbatch``, ``srun``, ``squeue``,
``scancel``, ``sacct``), run as subprocesses, read through their machine-readable output (``sbatch
--parsable``, ``squeue --json``, ``sacct --parsable2``).

A missing command or a controller that does not answer is ``SlurmUnavailable`` (exit 12); any other error
Slurm reports is ``SlurmRefused`` (exit 13) with Slurm's own words. Nothing else in kit runs a Slurm
command, so a REST (slurmrestd) or Kubernetes backend would replace this module and nothing else.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.errors import SlurmRefused, SlurmUnavailable
from kit.plumbing.jsontypes import loads
from kit.slurm.queue import SACCT_FIELDS, JobInfo, parse_sacct, parse_squeue_json

# What Slurm's clients print when the controller or munge cannot be reached (22.05 wording).
_UNREACHABLE = ("Unable to contact slurm controller", "Zero Bytes were transmitted", "Socket timed out",
                "Invalid authentication credential", "Munge", "munge", "Connection refused",
                "Could not establish a configuration source")
_NO_ACCOUNTING = "accounting storage is disabled"


class SlurmAccountingDisabled(SlurmUnavailable):
    """sacct has nothing to read: the cluster keeps no accounting (squeue still lists recent jobs)."""


@dataclass(frozen=True)
class Submitted:
    """What ``sbatch --parsable`` answered: the job id (the array's id for an array) and the cluster."""

    job_id: str
    cluster: str | None


class Slurm:
    """Slurm's commands behind one interface. ``env`` replaces the environment they see (tests point
    SLURM_CONF elsewhere); ``timeout_s`` bounds every call but ``srun``'s."""

    def __init__(self, *, env: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> None:
        self.env = dict(os.environ if env is None else env)
        self.timeout_s = timeout_s

    def _run(self, argv: Sequence[str], *, timeout_s: float | None = None, check: bool = True) -> str:
        try:
            p = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, check=False,
                               timeout=timeout_s or self.timeout_s)
        except FileNotFoundError:
            raise SlurmUnavailable(f"`{argv[0]}` not found: Slurm's client commands are not installed here",
                                   hint="run kit submit on a Slurm login node (Debian: apt-get install "
                                        "slurm-client; a test cluster: scripts/ensure-slurm)") from None
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(f"`{' '.join(argv[:2])}` did not answer within {timeout_s or self.timeout_s:g} s",
                                   hint="check the controller with `sinfo` and `scontrol ping`") from None
        if p.returncode != 0 and check:
            said = (p.stderr.strip() or p.stdout.strip() or f"exit status {p.returncode}").splitlines()
            text = "; ".join(said[-3:])
            if _NO_ACCOUNTING in text:
                raise SlurmAccountingDisabled(f"{argv[0]}: {text}",
                                              hint="this cluster keeps no job accounting; squeue lists recent jobs")
            if any(s in text for s in _UNREACHABLE):
                raise SlurmUnavailable(f"{argv[0]} cannot reach the Slurm controller: {text}",
                                       hint="check `scontrol ping` and that munged runs on this host")
            raise SlurmRefused(f"{argv[0]} refused: {text}", hint=f"the command was: {' '.join(argv)}")
        return p.stdout

    def sbatch(self, script: Path, *, chdir: Path | None = None, options: Sequence[str] = ()) -> Submitted:
        """Queue a batch script with ``options``, each one sbatch argument (never ``#SBATCH`` lines, whose
        parser reads backslashes inside quotes); returns the job id."""
        argv = ["sbatch", "--parsable", *options, *([f"--chdir={chdir}"] if chdir else []), str(script)]
        out = self._run(argv).strip().splitlines()
        first = out[-1] if out else ""
        job, _, cluster = first.partition(";")
        if not job.strip().isdigit():
            raise SlurmRefused(f"sbatch answered {first!r}, not a job id", hint=f"the command was: {shlex.join(argv)}")
        return Submitted(job.strip(), cluster.strip() or None)

    def squeue(self, *, job_ids: Sequence[str] = (), all_states: bool = True, mine: bool = False) -> list[JobInfo]:
        """Jobs the controller knows (with ``all_states``, also those ended within its MinJobAge); ``mine``:
        only this user's (``--me``, Slurm 22.05 and later)."""
        argv = ["squeue", "--json", *(["--me"] if mine else [])]
        if all_states:
            argv.append("--states=all")
        if job_ids:
            argv.append(f"--jobs={','.join(job_ids)}")
        out = self._run(argv)
        try:
            return parse_squeue_json(loads(out))
        except (ValueError, KeyError, TypeError) as e:
            raise SlurmRefused(f"squeue --json answered something kit cannot read ({e})",
                               hint="kit reads Slurm 22.05's squeue --json (OpenAPI v0.0.38) and later") from None

    def sacct(self, *, job_ids: Sequence[str] = (), name_prefix: str = "", mine: bool = False) -> list[JobInfo]:
        """Finished jobs from accounting (``SlurmAccountingDisabled`` where the cluster keeps none); ``mine``:
        only this user's (``--user=UID``: root and operators otherwise see everyone's)."""
        argv = ["sacct", "--parsable2", "--noheader", "-X", f"--format={','.join(SACCT_FIELDS)}",
                *([f"--user={os.getuid()}"] if mine else [])]
        if job_ids:
            argv.append(f"--jobs={','.join(job_ids)}")
        rows = parse_sacct(self._run(argv))
        return [r for r in rows if r.name.startswith(name_prefix)]

    def scancel(self, job_id: str, *, signal: str | None = None, batch_only: bool = False) -> None:
        """Cancel a job (SIGTERM to its processes, then SIGKILL after the cluster's KillWait), or send it
        ``signal`` only; ``batch_only`` signals just the batch script's process (kit run there)."""
        argv = ["scancel", *([f"--signal={signal}"] if signal else []), *(["--batch"] if batch_only else []),
                job_id]
        self._run(argv)

    def srun(self, options: Sequence[str], command: Sequence[str], *, timeout_s: float | None = None,
             check: bool = True) -> str:
        """Run a command as a job step (inside an allocation: a step on its nodes); returns its stdout (also
        when a task failed, with ``check`` False)."""
        return self._run(["srun", *options, "--", *command], timeout_s=timeout_s or 24 * 3600.0, check=check)

    def start_step(self, options: Sequence[str], command: Sequence[str], *, env: Mapping[str, str],
                   cwd: Path) -> subprocess.Popen[bytes]:
        """Start a long-running job step (``srun OPTIONS -- COMMAND``) in its own session, stdout and stderr
        on one pipe; the caller owns it (``steps`` finds its step id by ``--job-name``, ``scancel`` ends it)."""
        argv = ["srun", *options, "--", *command]
        try:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    env=dict(env), cwd=cwd, start_new_session=True)
        except FileNotFoundError:
            raise SlurmUnavailable("`srun` not found: Slurm's client commands are not installed here",
                                   hint="runtime slurm runs inside a Slurm allocation (kit submit)") from None

    def srun_offers(self, option: str) -> bool:
        """Whether this cluster's srun takes ``option`` (``srun --help`` lists it; a SPANK plugin's options,
        such as pyxis' ``--container-image``, appear there only where the plugin is installed)."""
        return any(word.split("=")[0] == option for word in self._run(["srun", "--help"]).split())

    def hostnames(self, nodelist: str) -> list[str]:
        """A node list in Slurm's compressed form (``gpu[01-03,07]``) as host names, in order."""
        return self._run(["scontrol", "show", "hostnames", nodelist]).split()

    def steps(self, job_id: str) -> dict[str, str]:
        """The job's running steps: step name -> step id (``JOB.STEP``)."""
        out = self._run(["squeue", "--steps", f"--jobs={job_id}", "--noheader", "--format=%i %j"])
        pairs = (line.split(maxsplit=1) for line in out.splitlines() if line.strip())
        return {p[1].strip(): p[0] for p in pairs if len(p) == 2}
