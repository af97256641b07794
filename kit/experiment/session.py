"""The bundle of one run: created (or opened to resume) and locked, with run.json, plan.json and the
environment written up front; unlocked whatever way the run ends."""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path

from kit import __version__, envinfo
from kit.bundle import Bundle, Checkpointer, Reconciled, reconcile, resume_trust
from kit.bundle.checkpoints import Chain
from kit.bundle.redo import failed_redone, set_aside_for_redo
from kit.cleanup import stop_run_leftovers
from kit.errors import BundleError, UsageError
from kit.experiment.inputs import RunInputs
from kit.experiment.options import RunOptions
from kit.files import JsonObject
from kit.files.plan import PlanFile
from kit.files.run import Redone, Resumption, RunFile, RunFlags
from kit.nvml import NvmlProbe
from kit.plan import Plan
from kit.plumbing.clock import utc_now
from kit.plumbing.files import NOFOLLOW
from kit.runtime import Runtime
from kit.signing import SigningKey


@dataclass
class BundleSession:
    """An open, locked bundle. ``resumed`` says whether it was opened to finish an earlier run; ``checkpoints``
    signs a checkpoint at the start, after every cell, at a resume and at the end (``kit.bundle.checkpoints``)."""

    bundle: Bundle
    resumed: bool
    checkpoints: Checkpointer | None = None  # None: a session that signs no checkpoint (tests of the finish)
    lock_fd: int | None = None
    reconciled: Reconciled | None = None  # a resume: what it found that no checkpoint vouched for
    stopped: list[str] = field(default_factory=list)  # a resume: servers the stopped run left, stopped
    redone: list[Redone] = field(default_factory=list)  # a resume with --redo: the attempts set aside to re-run

    @property
    def run_id(self) -> str:
        return self.bundle.run_id

    @classmethod
    def start(cls, inputs: RunInputs, opts: RunOptions, plan: Plan, key: SigningKey,
              runtime: Runtime) -> BundleSession:
        """Create the bundle, or open the one to resume; lock it; write what is known before any cell."""
        if opts.resume is not None:
            return cls.resume(inputs, opts, plan, key, runtime)
        bundle = Bundle.create(opts.out_dir, inputs.lm.manifest.name)
        session = cls(bundle, resumed=False, checkpoints=Checkpointer(bundle, key, Chain()))
        try:
            session.lock_fd = lock(bundle.root)
            session.write_start(inputs, opts, plan, key, runtime)
        except BaseException:
            session.unlock()
            raise
        return session

    @classmethod
    def resume(cls, inputs: RunInputs, opts: RunOptions, plan: Plan, key: SigningKey,
               runtime: Runtime) -> BundleSession:
        """Under the lock: what the bundle's signatures vouch for, checked again (``kit.bundle.resume``); the
        bundle put back to exactly that; what the stopped run left running stopped; then the resume recorded."""
        assert opts.resume is not None
        fd = lock(opts.resume)
        try:
            trust = resume_trust(opts.resume, opts.trust)
            same_design(opts.resume, PlanFile.model_validate_json(trust.signed_bytes(opts.resume, "plan.json")), plan)
            bundle = Bundle.resume_at(opts.resume, trust.run.run_id)
            checkpoints = Checkpointer(bundle, key, trust.chain)
            session = cls(bundle, resumed=True, checkpoints=checkpoints, lock_fd=fd)
            session.reconciled = reconcile(bundle, trust, checkpoints.current())
            session.stopped = stop_run_leftovers(bundle.run_id, docker=inputs.lm.manifest.runtime == "docker")
            if opts.redo:  # the flagged or failed cells' attempts set aside (kit.bundle.redo); they run again
                failed = failed_redone(bundle.root, session.reconciled.signed_failed) if "failed" in opts.redo else []
                session.redone = failed + set_aside_for_redo(bundle, [c.id for c in plan.cells], opts.redo)
            session.reopen(inputs, opts, plan, runtime)
            session.checkpoint("resume")  # what was set aside, stopped and restored is vouched for from here
        except BaseException:
            os.close(fd)
            raise
        return session

    def checkpoint(self, kind: str, *, cell: str | None = None, status: str | None = None) -> None:
        if self.checkpoints is not None:
            self.checkpoints.sign(kind, cell=cell, status=status)

    def unlock(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def write_start(self, inputs: RunInputs, opts: RunOptions, plan: Plan, key: SigningKey,
                    runtime: Runtime) -> None:
        m = inputs.lm.manifest
        self.bundle.write_bytes("manifest.yaml", inputs.lm.raw)
        if inputs.sig is not None:
            self.bundle.write_bytes("manifest.yaml.sig", inputs.sig)
        self.bundle.write_json("run.json", RunFile(
            run_id=self.run_id, experiment=m.name, kit_version=__version__, status="running", started=utc_now(),
            argv=opts.argv, manifest_source=str(inputs.lm.path.resolve()), trust=inputs.trust.as_dict(),
            flags=RunFlags(allow_unsigned=opts.allow_unsigned, allow_unpinned=opts.allow_unpinned,
                           **({opts.stop_rule.flag: True} if opts.stop_rule is not None else {})),
            unpinned_bases=m.unpinned_bases(), runner_key=key.fingerprint))
        self.bundle.write_json("plan.json", plan.to_file())
        self.bundle.write_json("environment.json", environment(inputs, runtime))

    def reopen(self, inputs: RunInputs, opts: RunOptions, plan: Plan, runtime: Runtime) -> None:
        """A resume: the plan must be the bundle's; the environment is captured again beside the first; the
        flags recorded are the union of the start's and this command line's (never taken from the bundle)."""
        run = self.bundle.read("run.json", RunFile)
        same_design(self.bundle.root, self.bundle.read("plan.json", PlanFile), plan)
        n = len(run.resumed) + 1
        self.bundle.remove_provenance()
        self.bundle.write_json(f"environment.resume-{n}.json", environment(inputs, runtime))
        run.status = "running"
        # every flag that applied to any part of the bundle stays visible (`kit verify` shows them)
        run.flags = RunFlags.model_validate({**run.flags.model_dump(),  # the stop rule's flag, as started
                                             "allow_unsigned": run.flags.allow_unsigned or opts.allow_unsigned,
                                             "allow_unpinned": run.flags.allow_unpinned or opts.allow_unpinned})
        run.resumed = [*run.resumed, Resumption(
            at=utc_now(), argv=opts.argv, kit_version=__version__, trust=inputs.trust.as_dict(),
            provenance_before=inputs.resume_note or "verified", environment=f"environment.resume-{n}.json",
            **self.found())]
        self.bundle.write_json("run.json", run)


    def found(self) -> JsonObject:
        """What this resume found and did before any cell, for its ``Resumption`` (empty lists left out)."""
        r = self.reconciled or Reconciled()
        found: JsonObject = {"set_aside": r.set_aside, "restored": r.restored, "dropped": r.dropped,
                             "stopped": self.stopped, "redone": [r.model_dump() for r in self.redone]}
        return {k: v for k, v in found.items() if v}


def same_design(root: Path, signed: PlanFile, plan: Plan) -> None:
    """The plan must be the bundle's: resuming with another would mix two designs (exit 9)."""
    if not signed.same_design(plan.to_file()):
        raise BundleError(f"{root}: the plan this kit makes from the manifest differs from the bundle's plan.json "
                          "(another kit version?); resuming would mix two designs", hint="start a new run")


def lock(root: Path) -> int:
    """One kit process per bundle: a second `kit run --resume` on a live bundle is refused. Returns the
    descriptor that holds the lock (it goes with the process, however the process ends)."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    except OSError as e:
        raise BundleError(f"{root}: cannot open the bundle directory ({e.strerror}; a symbolic link is refused)",
                          hint="give the bundle's own directory") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(f"{root} is in use by another kit process",
                         hint="wait for it to finish, or stop it (Ctrl-C) first") from None
    return fd


def environment(inputs: RunInputs, runtime: Runtime) -> JsonObject:
    """Host, runtime, GPUs (when the manifest uses them) and the project's git state."""
    m = inputs.lm.manifest
    env: JsonObject = {"host": envinfo.capture_host(), "runtime": runtime.describe()}
    if m.hardware.gpus:
        env["gpus"] = envinfo.capture_gpus(NvmlProbe())
    env["git"] = envinfo.git_info(inputs.lm.project_root)
    slurm = envinfo.slurm_allocation()
    if slurm is not None:  # inside a Slurm job (kit submit): which job, partition, nodes and allocation
        env["slurm"] = slurm
    return env
