"""Runtime slurm: a server that spans nodes, one rank per node of the Slurm allocation kit runs in.

kit runs on the allocation's first node (the batch step of ``kit submit``). Each rank is its own job step,
``srun --jobid=JOB --overlap --nodes=1 --ntasks=1 --nodelist=NODE --job-name=kit-rank-RUN-CELL-R
--kill-on-bad-exit=1 --export=ALL --chdir=CELL_DIR [--container-image=... --container-mounts=...] --
COMMAND``, whose srun runs here in a session of its own, its output (the rank's stdout and stderr) pumped
into the cell's log (rank 0: ``server.log``, rank r: ``server.rankR.log``) with secrets redacted. The step
gets the environment a process-runtime server gets (``server_environment``; no SLURM_* variables of the
batch step, which would change srun's defaults) plus ``KIT_RANK=RUN/CELL/R``, which the rank's processes
inherit and the node gates look for (``kit.slurm.nodecheck``).

- **Ready** when rank 0 answers ``server.readiness_path`` on server.host:server.port (kit's node); the
  server must itself wait for its other ranks before it answers (the demo engine and sglang do). Any
  rank's step ending before or after that fails the cell, naming the rank, its node and its log's tail.
- **Stop**: ``scancel --signal=TERM JOB.STEP`` for every rank still running (the rank's tasks get SIGTERM;
  the step ends when they exit), ``stop_grace_s``, then ``scancel JOB.STEP`` (Slurm kills the step's
  processes on its node), then SIGKILL to any srun still here. The proof that nothing is left is the
  after-stop gate on every node (``ranks@NODE``: no process carries a rank tag; ports; GPUs).
- Records of the srun process groups go to ``state_dir()`` like the process runtime's, so the leftover gate
  and `kit clean` find them here if kit dies (Slurm ends every step with the job).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from subprocess import Popen

from kit.errors import KitError, ServerError, UsageError
from kit.gates.result import Check
from kit.manifest import Manifest
from kit.plumbing.clock import utc_now
from kit.plumbing.logpump import LogPump, pipe_chunks
from kit.plumbing.net import http_ok
from kit.plumbing.poll import Deadline, poll_until
from kit.plumbing.procs import group_members, signal_group, stop_group
from kit.runtime import (
    RankDescription,
    RanksDescription,
    RankSpec,
    RanksStopDetails,
    RankStop,
    ServerSpec,
    StopInfo,
    redact_env,
    server_environment,
    tail_lines,
)
from kit.runtime.records import ServerRecord, boot_id, cmdline, start_ticks, write_record
from kit.slurm.commands import Slurm
from kit.slurm.nodecheck import RANK_TAG, node_gates, node_name

KILL_WAIT_S = 30.0  # after scancel of a step: Slurm's KillWait (30 s by default) before SIGKILL to srun here
SLURM_CLIENT_ENV = ("SLURM_CONF",)  # what srun itself needs from kit's environment to find the cluster


@dataclass(frozen=True)
class AllocationNodes:
    """The allocation kit runs in: the job, its nodes in order, and this node (which must be the first)."""

    job_id: str
    nodes: list[str]


def allocation_nodes(m: Manifest, slurm: Slurm, environ: Mapping[str, str] | None = None) -> AllocationNodes:
    env = os.environ if environ is None else environ
    job, nodelist = env.get("SLURM_JOB_ID"), env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    hint = "run it with kit submit (it allocates hardware.nodes nodes and runs kit on the first one)"
    if not job or not nodelist:
        raise UsageError("runtime slurm starts one rank per node of the Slurm allocation kit runs in, but this is "
                         "not a Slurm job (SLURM_JOB_ID / SLURM_JOB_NODELIST are not set)", hint=hint)
    nodes = slurm.hostnames(nodelist)
    if len(nodes) != m.hardware.nodes:
        raise UsageError(f"hardware.nodes is {m.hardware.nodes} but job {job} has {len(nodes)} node(s) "
                         f"({', '.join(nodes)})", hint=hint)
    here = env.get("SLURMD_NODENAME") or node_name()
    if here != nodes[0]:
        raise UsageError(f"kit runs on {here}, but rank 0 (which serves the API kit measures) goes on the "
                         f"allocation's first node {nodes[0]}", hint=hint)
    return AllocationNodes(job, nodes)


@dataclass
class _Rank:
    spec: RankSpec
    step_name: str
    log_path: Path
    proc: Popen[bytes]
    pump: LogPump
    record: Path
    ended_at: float | None = None  # when kit first saw its step end

    def ended(self) -> int | None:
        code = self.proc.poll()
        if code is not None and self.ended_at is None:
            self.ended_at = time.monotonic()
        return code


@dataclass
class RankedServer:
    """The running ranks of one cell's server."""

    spec: ServerSpec
    runtime: SlurmRanksRuntime
    ranks: list[_Rank] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _stopped: StopInfo | None = None

    def _tail(self, rank: _Rank) -> str:
        return "\n".join(f"    {self.spec.redact(line)}" for line in tail_lines(rank.log_path, 30))

    def _raise_if_a_rank_ended(self, what: str) -> None:
        """ServerError naming every rank whose step has ended (the first seen first), with the first's log."""
        ended = [r for r in self.ranks if r.ended() is not None]
        if not ended:
            return
        ended.sort(key=lambda r: (r.ended_at or 0.0, r.spec.rank))
        for r in ended:
            r.pump.join(timeout=2)
        first, *rest = ended
        also = "".join(f"; then rank {r.spec.rank} on {r.spec.host} (exit code {r.proc.returncode})" for r in rest)
        raise ServerError(
            f"rank {first.spec.rank} of {self.spec.arm} ({self.spec.name}) on node {first.spec.host} {what} (its job "
            f"step ended with exit code {first.proc.returncode}){also}; last log lines of rank {first.spec.rank}:\n"
            f"{self._tail(first)}",
            hint="the ranks' logs: " + ", ".join(str(r.log_path) for r in ended),
        )

    def wait_ready(self) -> float:
        url = self.spec.base_url + self.spec.readiness_path

        def ready() -> bool:
            self._raise_if_a_rank_ended("exited during start-up")
            return http_ok(url)

        if poll_until(ready, Deadline(self.started + self.spec.ready_timeout_s), interval=0.05, backoff=1.5,
                      max_interval=1.0):
            return time.monotonic() - self.started
        raise ServerError(f"rank 0 of {self.spec.arm} not ready at {url} after {self.spec.ready_timeout_s:g} s; last "
                          f"log lines:\n{self._tail(self.ranks[0])}",
                          hint="raise server.ready_timeout_s if it is just slow; every rank must be up for rank 0 "
                               "to answer: see each rank's log")

    def check_alive(self) -> None:
        self._raise_if_a_rank_ended("died")

    def stop(self) -> StopInfo:
        if self._stopped is not None:
            return self._stopped
        t0 = time.monotonic()
        slurm, job = self.runtime.slurm, self.runtime.alloc.job_id
        try:
            step_ids = slurm.steps(job)
        except KitError:
            step_ids = {}  # the controller does not answer: signal the srun processes instead
        stops = {r.spec.rank: RankStop(rank=r.spec.rank, node=r.spec.host, step_id=step_ids.get(r.step_name),
                                       exit_code=None, signal=None) for r in self.ranks}
        for r in self.ranks:
            if r.ended() is None:
                stops[r.spec.rank]["signal"] = "SIGTERM"
                self._signal(r, stops[r.spec.rank]["step_id"], "TERM")
        poll_until(lambda: all(r.ended() is not None for r in self.ranks), self.spec.stop_grace_s, interval=0.05,
                   backoff=1.5, max_interval=0.5)
        for r in self.ranks:
            if r.ended() is None:
                stops[r.spec.rank]["signal"] = "SIGKILL"
                self._signal(r, stops[r.spec.rank]["step_id"], None)
        poll_until(lambda: all(r.ended() is not None for r in self.ranks), KILL_WAIT_S, interval=0.05,
                   backoff=1.5, max_interval=0.5)
        left = []
        for r in self.ranks:
            stop_group(r.proc.pid, 0.0, reap=r.proc.poll)  # srun here: SIGKILL if it is still around
            stops[r.spec.rank]["exit_code"] = r.proc.wait(timeout=30)
            left += group_members(r.proc.pid)
            r.pump.join(timeout=5)
            with contextlib.suppress(FileNotFoundError):
                r.record.unlink()
        if left:
            raise ServerError(f"srun processes {left} of {self.spec.name} still here after SIGKILL",
                              hint=f"kill -KILL {' '.join(map(str, left))}; scancel the job's steps")
        ranks = [stops[r.spec.rank] for r in self.ranks]
        first = ranks[0] if ranks else None
        self._stopped = StopInfo(
            exit_code=first["exit_code"] if first else None, signal=first["signal"] if first else None,
            stop_s=round(time.monotonic() - t0, 4),
            details=RanksStopDetails(job_id=job, ranks=ranks, srun_left=left),
        )
        return self._stopped

    def _signal(self, rank: _Rank, step_id: str | None, sig: str | None) -> None:
        """TERM to the step's tasks (or a cancel of the step with sig None); the srun here when the step is
        not known to the controller. scancel's answer is not used: Slurm 22.05's ``scancel --signal=TERM
        JOB.STEP`` signals the step and then exits 225 ("Kill job error on job step id JOB"), and answers 0
        for a step that does not exist; whether the rank ended is what the stop waits for."""
        if step_id is None:
            signal_group(rank.proc.pid, signal.SIGTERM if sig == "TERM" else signal.SIGKILL)
            return
        with contextlib.suppress(KitError):
            self.runtime.slurm.scancel(step_id, signal=sig)

    def describe(self) -> RanksDescription:
        r = self.runtime.m.ranks
        return RanksDescription(
            runtime="slurm", job_id=self.runtime.alloc.job_id, container=r.container,
            container_image=r.container_image, env=redact_env(self.spec.env),
            secret_env_names=sorted(self.spec.secret_env),
            ranks=[RankDescription(rank=x.spec.rank, node=x.spec.host, step_name=x.step_name, srun_pid=x.proc.pid,
                                   command=x.spec.command, log=x.log_path.name) for x in self.ranks],
        )


class SlurmRanksRuntime:
    """Starts each cell's server as one job step per node (see the module's docstring)."""

    name = "slurm"

    def __init__(self, m: Manifest, slurm: Slurm, alloc: AllocationNodes) -> None:
        self.m, self.slurm, self.alloc = m, slurm, alloc

    @classmethod
    def from_environment(cls, m: Manifest, slurm: Slurm | None = None,
                         environ: Mapping[str, str] | None = None) -> SlurmRanksRuntime:
        """The runtime for the allocation kit runs in (exit 2 outside one, or where the cluster cannot start
        the ranks as the manifest asks)."""
        sl = slurm or Slurm()
        alloc = allocation_nodes(m, sl, environ)
        if m.ranks.container == "pyxis" and not sl.srun_offers("--container-image"):
            raise UsageError("ranks.container is pyxis, but this cluster's srun has no --container-image option "
                             "(the pyxis plugin is not installed here)",
                             hint="run on a cluster with pyxis and enroot, or set ranks.container: none")
        return cls(m, sl, alloc)

    @property
    def nodes(self) -> list[str]:
        return self.alloc.nodes

    def step_options(self, rank: RankSpec, step_name: str, cwd: Path) -> list[str]:
        opts = [f"--jobid={self.alloc.job_id}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={rank.host}",
                f"--job-name={step_name}", "--kill-on-bad-exit=1", "--export=ALL", f"--chdir={cwd}"]
        r = self.m.ranks
        if r.container == "pyxis":
            mounts = list(r.container_mounts)
            model = self.m.model.path and os.path.abspath(os.path.expanduser(self.m.model.path))
            if model and not any(mt.split(":")[0] == model for mt in mounts):
                mounts.append(f"{model}:{model}:ro")
            opts.append(f"--container-image={r.container_image}")
            if mounts:
                opts.append(f"--container-mounts={','.join(mounts)}")
        return opts

    def start(self, spec: ServerSpec) -> RankedServer:
        if not spec.ranks:
            raise ServerError(f"server {spec.name} has no ranks to start (runtime slurm)",
                              hint="kit.server_spec.server_spec(..., nodes=...) makes one per node")
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        server = RankedServer(spec, self)
        base = server_environment(spec)
        client = {k: os.environ[k] for k in SLURM_CLIENT_ENV if k in os.environ}
        run, cell = spec.labels.get("kit.run", "run"), spec.labels.get("kit.cell", "cell")
        try:
            for rank in spec.ranks:
                step = f"kit-rank-{run}-{cell}-{rank.rank}"
                log = spec.log_path if rank.rank == 0 else spec.log_path.with_name(f"server.rank{rank.rank}.log")
                env = {**base, **client, RANK_TAG: f"{run}/{cell}/{rank.rank}"}
                proc = self.slurm.start_step(self.step_options(rank, step, spec.log_path.parent), rank.command,
                                             env=env, cwd=spec.log_path.parent)
                server.ranks.append(self._supervise(spec, rank, step, log, proc))
        except BaseException:
            with contextlib.suppress(KitError):
                server.stop()  # nothing may outlive a failed start
            raise
        return server

    @staticmethod
    def _supervise(spec: ServerSpec, rank: RankSpec, step: str, log: Path, proc: Popen[bytes]) -> _Rank:
        try:
            stdout = proc.stdout
            assert stdout is not None
            pump = LogPump(partial(pipe_chunks, stdout), log, spec.redact, name=f"log-{step}")
            pump.start()
            record = write_record(ServerRecord(
                pgid=proc.pid, pid=proc.pid, run_id=spec.labels.get("kit.run"), cell=spec.labels.get("kit.cell"),
                command=["srun", "...", *rank.command], started=utc_now(), boot_id=boot_id(),
                start_ticks=start_ticks(proc.pid), cmdline=cmdline(proc.pid),
            ))
        except BaseException:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        return _Rank(rank, step, log, proc, pump, record)

    def node_gates(self, manifest_path: Path, run_id: str | None, phase: str) -> list[Check]:
        """Every node's gates (``kit.slurm.nodecheck``) for a gates line; ``manifest_path`` on storage every
        node sees (the manifest kit verified)."""
        return node_gates(self.m, self.slurm, job_id=self.alloc.job_id, nodes=self.alloc.nodes,
                          manifest_path=manifest_path, step_name=f"kit-gates-{run_id or 'preflight'}-{phase}")

    def describe(self) -> dict[str, object]:
        r = self.m.ranks
        return {"runtime": "slurm", "job_id": self.alloc.job_id, "nodes": list(self.alloc.nodes),
                "launcher": "srun", "container": r.container, "container_image": r.container_image}
