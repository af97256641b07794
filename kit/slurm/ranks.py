"""Runtime slurm: a server that spans nodes, one rank per node of the Slurm allocation kit runs in.

kit runs on the allocation's first node (the batch step of ``kit submit``). Each rank is its own job step,
``srun --jobid=JOB --overlap --nodes=1 --ntasks=1 --nodelist=NODE --job-name=kit-rank-RUN-CELL-R
--kill-on-bad-exit=1 --export=ALL --chdir=CELL_DIR [--container-image=... --container-mounts=...] --
COMMAND``, whose srun runs here in a session of its own, its output (the rank's stdout and stderr) pumped
into the cell's log (rank 0: ``server.log``, rank r: ``server.rankR.log``) with secrets redacted. The step
gets the environment a process-runtime server gets (``server_environment``; none of the batch step's SLURM_*
variables, which would change srun's defaults) plus ``KIT_RANK=JOB/RUN/CELL/R``, which the rank's processes
inherit and the node gates look for (``kit.slurm.nodecheck``). kit's own Slurm commands get only
``client_environment()``: never kit's variables or a pass_env secret.

- **Ready** when rank 0 answers ``server.readiness_path`` on server.host:server.port (kit's node); the
  server must itself wait for its other ranks before it answers (the demo engine and sglang do). Any
  rank's srun ending before or after that fails the cell, naming every rank that ended and the first's log.
- **Stop**, with interrupts held: ``scancel --signal=TERM`` to every step of the server the controller lists
  (SIGTERM to the srun here of a rank it does not list: srun then ends its step itself), ``stop_grace_s``,
  then ``scancel --signal=KILL`` to what is still listed, then SIGKILL to any srun still here; then the
  controller must list no step of the server, and no srun of it may be left here, or the stop fails
  naming them. The after-stop gates on every node check the processes themselves (``ranks@NODE``).
- Records of the srun process groups go to ``state_dir()`` like the process runtime's and stay while any
  process of one is left, so the leftover gate and `kit clean` find them (Slurm ends every step with the job).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from kit.errors import KitError, ServerError, UsageError
from kit.gates.result import Check
from kit.manifest import Manifest
from kit.plumbing.clock import utc_now
from kit.plumbing.interrupts import deferred_interrupts
from kit.plumbing.logpump import LogPump, pipe_chunks
from kit.plumbing.net import http_ok
from kit.plumbing.poll import Deadline, poll_until
from kit.plumbing.procs import group_members, signal_group, start_ticks, stop_group
from kit.runtime import (
    RankDescription,
    RanksDescription,
    RankSpec,
    RanksStopDetails,
    RankStop,
    ServerSpec,
    StopInfo,
    base_environment,
    redact_env,
    server_environment,
    tail_lines,
)
from kit.runtime.records import ServerRecord, boot_id, cmdline, maker, write_record
from kit.slurm.commands import Slurm
from kit.slurm.nodecheck import RANK_TAG, node_gates, node_name, rank_tag

KILL_WAIT_S = 15.0  # after scancel --signal=KILL of the steps: until the controller no longer lists them
SLURM_CLIENT_ENV = ("SLURM_CONF",)  # what Slurm's commands need from kit's environment to find the cluster


def client_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What kit's own Slurm commands (the gates' srun, squeue, scancel, scontrol) get: the base a server
    gets and SLURM_CONF."""
    env = os.environ if environ is None else environ
    return {**base_environment(env), **{k: env[k] for k in SLURM_CLIENT_ENV if k in env}}


@dataclass(frozen=True)
class AllocationNodes:
    """The allocation kit runs in: the job and its nodes in order (kit runs on the first)."""

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
    proc: subprocess.Popen[bytes]
    pump: LogPump | None = None
    record: Path | None = None  # its srun's record in state_dir()
    ended_at: float | None = None  # when kit first saw its srun end

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
        """ServerError naming every rank whose srun has ended (the first seen first), with the first's log."""
        ended = [r for r in self.ranks if r.ended() is not None]
        if not ended:
            return
        ended.sort(key=lambda r: (r.ended_at or 0.0, r.spec.rank))
        for r in ended:
            if r.pump is not None:
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
            return http_ok(url, context=self.spec.ssl_context)

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
        """Every rank ended, and proven gone with the controller; no interrupt can cut this short."""
        if self._stopped is None:
            with deferred_interrupts():
                self._stopped = self._stop()
        return self._stopped

    def _live_steps(self) -> dict[str, str] | None:
        """This server's steps the controller lists as running, name -> JOB.STEP (None: it does not answer)."""
        names = {r.step_name for r in self.ranks}
        try:
            listed = self.runtime.slurm.steps(self.runtime.alloc.job_id)
        except KitError:
            return None
        return {name: sid for name, sid in listed.items() if name in names}

    def _gone(self) -> bool:
        return all(r.ended() is not None for r in self.ranks) and not self._live_steps()

    def _signal_all(self, stops: dict[int, RankStop], sig: str) -> None:
        """``sig`` (TERM or KILL) to every step of the server the controller lists; SIGTERM to the srun here of
        a rank it does not list (srun then ends its step itself: a SIGKILLed srun would leave it running).
        scancel's answer is not used: Slurm 22.05's ``scancel --signal=TERM JOB.STEP`` delivers the signal and
        exits 225 ("Kill job error on job step id JOB"), and answers 0 for a step that does not exist."""
        live = self._live_steps() or {}
        for r in self.ranks:
            stop = stops[r.spec.rank]
            sid = live.get(r.step_name)
            if sid is not None:
                stop["step_id"], stop["signal"] = sid, f"SIG{sig}"
                with contextlib.suppress(KitError):
                    self.runtime.slurm.scancel(sid, signal=sig)
            elif r.ended() is None:
                stop["signal"] = stop["signal"] or "SIGTERM"
                signal_group(r.proc.pid, signal.SIGTERM)

    def _stop(self) -> StopInfo:
        t0 = time.monotonic()
        stops = {r.spec.rank: RankStop(rank=r.spec.rank, node=r.spec.host, step_id=None, exit_code=None, signal=None)
                 for r in self.ranks}
        self._signal_all(stops, "TERM")
        if not poll_until(self._gone, self.spec.stop_grace_s, interval=0.1, backoff=1.5, max_interval=0.5):
            self._signal_all(stops, "KILL")
            poll_until(self._gone, KILL_WAIT_S, interval=0.1, backoff=1.5, max_interval=0.5)
        left: list[int] = []
        for r in self.ranks:
            stop_group(r.proc.pid, 0.0, reap=r.proc.poll)  # an srun still here: SIGKILL (its step is gone by now)
            with contextlib.suppress(subprocess.TimeoutExpired):
                stops[r.spec.rank]["exit_code"] = r.proc.wait(timeout=10)
            members = group_members(r.proc.pid)
            left += members
            if r.pump is not None:
                r.pump.finish(5.0, lambda: None, grace=0.0)  # the rank's log is final from here
                stops[r.spec.rank]["log_bytes"] = r.pump.bytes_written
                stops[r.spec.rank]["log_dropped_bytes"] = r.pump.dropped_bytes
                if r.pump.error is not None:
                    stops[r.spec.rank]["log_error"] = r.pump.error
            if r.record is not None and not members:
                r.record.unlink(missing_ok=True)  # kept while anything of it is here: kit clean finds it
        steps = self._live_steps() or {}
        if left or steps:
            what = "; ".join([*([f"srun processes {left} here"] if left else []),
                              *([f"job steps {', '.join(steps.values())} still running"] if steps else [])])
            raise ServerError(f"ranks of {self.spec.name} not gone after SIGKILL: {what}",
                              hint=f"scancel --signal=KILL {' '.join(steps.values()) or self.runtime.alloc.job_id}"
                                   + (f"; kill -KILL {' '.join(map(str, left))}" if left else "") + "; kit clean")
        ranks = [stops[r.spec.rank] for r in self.ranks]
        first = ranks[0] if ranks else None
        return StopInfo(exit_code=first["exit_code"] if first else None, signal=first["signal"] if first else None,
                        stop_s=round(time.monotonic() - t0, 4),
                        details=RanksStopDetails(job_id=self.runtime.alloc.job_id, ranks=ranks, srun_left=left))

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
        sl = slurm or Slurm(env=client_environment())
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
        env = {**server_environment(spec), **{k: v for k, v in client_environment().items() if k in SLURM_CLIENT_ENV}}
        run, cell = spec.labels.get("kit.run", "run"), spec.labels.get("kit.cell", "cell")
        try:
            for rank in spec.ranks:
                step = f"kit-rank-{run}-{cell}-{rank.rank}"
                log = spec.log_path if rank.rank == 0 else spec.log_path.with_name(f"server.rank{rank.rank}.log")
                proc = self.slurm.start_step(self.step_options(rank, step, spec.log_path.parent), rank.command,
                                             env={**env, RANK_TAG: rank_tag(self.alloc.job_id, run, cell, rank.rank)},
                                             cwd=spec.log_path.parent)
                r = _Rank(rank, step, log, proc)
                server.ranks.append(r)  # first: from here on stop() ends it, whatever fails next
                assert proc.stdout is not None
                r.pump = LogPump(partial(pipe_chunks, proc.stdout), log, name=f"log-{step}",
                                 limit=spec.log_limit_bytes)
                r.pump.start()
                entry = ServerRecord(
                    pgid=proc.pid, pid=proc.pid, run_id=run, cell=cell, command=["srun", "...", *rank.command],
                    started=utc_now(), boot_id=boot_id(), start_ticks=start_ticks(proc.pid), cmdline=cmdline(proc.pid))
                maker(into=entry)
                r.record = write_record(entry)
        except BaseException:
            with contextlib.suppress(KitError):
                server.stop()  # nothing may outlive a failed start (interrupts are held while it stops)
            raise
        return server

    def node_gates(self, run_id: str | None, phase: str) -> list[Check]:
        """Every node's gates (``kit.slurm.nodecheck``, given the verified manifest itself) for a gates line."""
        return node_gates(self.m, self.slurm, job_id=self.alloc.job_id, nodes=self.alloc.nodes,
                          step_name=f"kit-gates-{run_id or 'preflight'}-{phase}")

    def describe(self) -> dict[str, object]:
        r = self.m.ranks
        return {"runtime": "slurm", "job_id": self.alloc.job_id, "nodes": list(self.alloc.nodes),
                "launcher": "srun", "container": r.container, "container_image": r.container_image}
