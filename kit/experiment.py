"""The experiment loop: verify, plan, build, then for every cell gate -> start -> load -> stop -> gate.

Everything lands in the bundle as it happens: records are appended as requests finish, each
cell's state is written before and after it runs, and the bundle is summarised, reported and
signed whatever way the run ends (complete, failed or interrupted), so that it always verifies
and `kit run --resume BUNDLE` can finish it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kit import __version__

if TYPE_CHECKING:
    from kit.images import ImageInfo

from kit.errors import (
    BundleError,
    GateFailed,
    Interrupted,
    KitError,
    LoadError,
    ServerError,
    SignatureError,
    UsageError,
)
from kit.manifest import LoadedManifest, Manifest, load_manifest, project_root, read_bytes
from kit.plan import Cell, LevelPlan, Plan, make_plan
from kit.runtime import Runtime, Server, ServerSpec, http_get, secret_env_from
from kit.signing import ManifestTrust, SigningKey, default_trust_files, signature_path, verify_manifest


class Events(Protocol):
    """What the loop reports while it runs (the CLI renders it)."""

    def message(self, text: str) -> None: ...
    def cell_started(self, cell: Cell, position: int, total: int) -> None: ...
    def level_started(self, cell: Cell, level: LevelPlan) -> None: ...
    def level_progress(self, cell: Cell, level: LevelPlan, done: int, total: int, tokens_per_s: float,
                       eta_s: float | None) -> None: ...
    def level_done(self, cell: Cell, level: LevelPlan, ok: int, errors: int, client_bound: bool) -> None: ...
    def cell_done(self, cell: Cell, status: str, reason: str | None) -> None: ...


class QuietEvents:
    def message(self, text: str) -> None:
        pass

    def cell_started(self, cell: Cell, position: int, total: int) -> None:
        pass

    def level_started(self, cell: Cell, level: LevelPlan) -> None:
        pass

    def level_progress(self, cell: Cell, level: LevelPlan, done: int, total: int, tokens_per_s: float,
                       eta_s: float | None) -> None:
        pass

    def level_done(self, cell: Cell, level: LevelPlan, ok: int, errors: int, client_bound: bool) -> None:
        pass

    def cell_done(self, cell: Cell, status: str, reason: str | None) -> None:
        pass


@dataclass
class RunOptions:
    out_dir: Path = Path("results")
    resume: Path | None = None
    allow_unsigned: bool = False
    allow_unpinned: bool = False
    trust: list[Path] = field(default_factory=list)
    key: Path | None = None
    argv: list[str] = field(default_factory=list)
    runtime: Runtime | None = None  # injected in tests; default from the manifest


@dataclass
class RunResult:
    bundle: Path
    status: str  # complete | failed | interrupted
    verdicts: list[str]
    failed_cells: dict[str, str]
    notices: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- trust


def check_trust(path: Path, raw: bytes, sig: bytes | None, trust_files: list[Path],
                allow_unsigned: bool) -> ManifestTrust:
    """Verify the signature over exactly ``raw`` (with exactly ``sig``); with --allow-unsigned, record why
    the manifest was accepted anyway."""
    try:
        if sig is None:
            raise SignatureError(f"{path}: not signed (no {signature_path(path).name} beside it)",
                                 hint=f"sign it with `kit sign {path} --key KEY`, or pass --allow-unsigned")
        return verify_manifest(path, raw, trust_files, sig)
    except SignatureError as e:
        if not allow_unsigned:
            raise
        return ManifestTrust(signed=False, signers=(), allow_unsigned=True, note=e.message)


# --------------------------------------------------------------------------- server specs


def _substitute(args: list[str], values: dict[str, str]) -> list[str]:
    out = []
    for a in args:
        for k, v in values.items():
            a = a.replace("{" + k + "}", v)
        out.append(a)
    return out


def server_spec(m: Manifest, cell: Cell, run_id: str, log_path: Path, *, image: str | None = None,
                gpus: list[str] | None = None) -> ServerSpec:
    arm = m.arm(cell.arm)
    docker = m.runtime == "docker"
    cport = m.server.container_port or m.server.port
    model_path = (m.model.mount_at if docker else m.model.path) or ""
    values = {
        "host": "0.0.0.0" if docker else m.server.host,
        "port": str(cport if docker else m.server.port),
        "model_path": model_path,
        "served_name": m.model.served_name,
        "python": "python3" if docker else sys.executable,
    }
    command = _substitute([*(arm.command or m.server.command), *arm.args], values)
    labels = {"kit.run": run_id, "kit.experiment": m.name, "kit.arm": arm.name,
              "kit.repeat": str(cell.repeat), "kit.cell": cell.id}
    gpu_req: list[str] | str | None = None
    env = {**m.server.env, **arm.env}
    if docker and m.hardware.gpus:
        gpu_req = gpus if gpus else "all"
    elif m.hardware.gpus and gpus:
        # the process runtime: the server sees exactly the GPUs the gate checked, in PCI order
        env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(gpus), **env}
    return ServerSpec(
        name=f"kit-{m.name}-{run_id}-{cell.id}"[:120],
        arm=arm.name,
        command=command,
        env=env,
        secret_env=secret_env_from(m.server.pass_env),
        host=m.server.host,
        port=m.server.port,
        readiness_path=m.server.readiness_path,
        ready_timeout_s=m.server.ready_timeout_s,
        stop_grace_s=m.server.stop_grace_s,
        log_path=log_path,
        labels=labels,
        image=image,
        container_port=cport,
        gpus=gpu_req,  # type: ignore[arg-type]
        shm_size=m.server.shm_size,
        ipc_host=m.server.ipc_host,
        model_mount=(m.model.path, m.model.mount_at) if docker and m.model.path else None,
    )


# --------------------------------------------------------------------------- metrics


def scrape_metrics(base_url: str) -> dict[str, float] | None:
    """Prometheus samples from /metrics as {"name{labels}": value}, or None if there is none."""
    got = http_get(base_url + "/metrics")
    if got is None or got[0] != 200:
        return None
    out: dict[str, float] = {}
    for line in got[1].decode("utf-8", "replace").splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            v = float(value)
        except ValueError:
            continue
        if math.isfinite(v):  # NaN/Inf are legal Prometheus values but not JSON
            out[name.strip()] = v
    return out


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[list[int]]:
    """Hold SIGINT/SIGTERM while a server is being stopped: a second Ctrl-C must not leave it running.
    The signals that arrived are re-delivered (as KeyboardInterrupt) once the block is done."""
    pending: list[int] = []
    if threading_main():
        old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in old:
            signal.signal(sig, lambda n, _f: pending.append(n))
        try:
            yield pending
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
        if pending:
            raise KeyboardInterrupt
    else:
        yield pending


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


# --------------------------------------------------------------------------- the loop


class Experiment:
    """One run of a manifest into one bundle."""

    def __init__(self, lm: LoadedManifest, trust: ManifestTrust, opts: RunOptions, events: Events,
                 key: SigningKey) -> None:
        from kit.bundle import Bundle

        self.lm = lm
        self.key = key
        self.lock_fd: int | None = None
        self.m = lm.manifest
        self.trust = trust
        self.opts = opts
        self.events = events
        self.plan: Plan = make_plan(self.m)
        self.bundle: Bundle
        self.run_id = ""
        self.failed: dict[str, tuple[int, str]] = {}
        self.notices: list[str] = []
        self.images: dict[str, ImageInfo] = {}
        self.gpu_ids: list[str] | None = None
        self.preflight_report: dict[str, Any] = {}
        self.gpu_indices: list[int] = []
        self.runtime: Runtime = opts.runtime or self._default_runtime()

    def _default_runtime(self) -> Runtime:
        if self.m.runtime == "docker":
            from kit.runtime.docker import DockerRuntime

            return DockerRuntime()
        from kit.runtime.process import ProcessRuntime

        return ProcessRuntime()

    # ---- bundle setup

    def open_bundle(self, sig: bytes | None) -> None:
        from kit.bundle import Bundle

        if self.opts.resume is not None:
            self.bundle = Bundle.open(self.opts.resume)
            self._lock()
            run = json.loads(self.bundle.path("run.json").read_text())
            self.run_id = self.bundle.run_id
            planned = json.loads(self.bundle.path("plan.json").read_text())
            if planned != self.plan.as_dict():
                raise BundleError(f"{self.bundle.root}: the plan this kit makes from the manifest differs from the "
                                  "bundle's plan.json (another kit version?); resuming would mix two designs",
                                  hint="start a new run")
            n = len(run.get("resumed", [])) + 1
            self.bundle.write_json(f"environment.resume-{n}.json", self._environment())
            self.bundle.remove_provenance()
            run.update(status="running", resumed=[*run.get("resumed", []), {
                "at": _now(), "argv": self.opts.argv, "kit_version": __version__, "trust": self.trust.as_dict(),
                "provenance_before": self.resume_note, "environment": f"environment.resume-{n}.json"}])
            self.bundle.write_json("run.json", run)
            return
        self.bundle = Bundle.create(self.opts.out_dir, self.m.name)
        self._lock()
        self.run_id = self.bundle.run_id
        self.bundle.write_bytes("manifest.yaml", self.lm.raw)
        if sig is not None:
            self.bundle.write_bytes("manifest.yaml.sig", sig)
        self.bundle.write_json("run.json", {
            "run_id": self.run_id,
            "experiment": self.m.name,
            "kit_version": __version__,
            "status": "running",
            "started": _now(),
            "argv": self.opts.argv,
            "manifest_source": str(self.lm.path.resolve()),
            "trust": self.trust.as_dict(),
            "flags": {"allow_unsigned": self.opts.allow_unsigned, "allow_unpinned": self.opts.allow_unpinned},
            "unpinned_bases": self.m.unpinned_bases(),
            "runner_key": self.key.fingerprint,
        })
        self.bundle.write_json("plan.json", self.plan.as_dict())
        self.bundle.write_json("environment.json", self._environment())

    resume_note = "verified"

    def _lock(self) -> None:
        """One kit process per bundle: a second `kit run --resume` on a live bundle is refused."""
        fd = os.open(self.bundle.root, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(f"{self.bundle.root} is in use by another kit process",
                             hint="wait for it to finish, or stop it (Ctrl-C) first") from None
        self.lock_fd = fd

    def unlock(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def _environment(self) -> dict[str, Any]:
        from kit import envinfo

        env: dict[str, Any] = {"host": envinfo.capture_host(), "runtime": self.runtime.describe()}
        if self.m.hardware.gpus:
            from kit.nvml import NvmlProbe

            env["gpus"] = envinfo.capture_gpus(NvmlProbe())
        env["git"] = envinfo.git_info(project_root(self.lm.path))
        return env

    # ---- gates

    def gates(self, cell: Cell, phase: str) -> None:
        from kit.gates import run_gates

        report = run_gates(self.m, phase=phase, run_id=self.run_id)
        self.bundle.append_jsonl(f"cells/{cell.id}/gates.jsonl", report.as_dict())
        if report.gpus:
            self.gpu_ids = [g["uuid"] for g in report.gpus]
            self.gpu_indices = [int(g["index"]) for g in report.gpus]
        report.raise_if_failed()

    # ---- one cell

    def run_cell(self, cell: Cell) -> None:
        cdir = self.bundle.cell_dir(cell.id)
        state: dict[str, Any] = {"id": cell.id, "arm": cell.arm, "repeat": cell.repeat, "index": cell.index,
                                 "status": "running", "started": _now()}
        self.bundle.write_json(f"cells/{cell.id}/cell.json", state)
        server: Server | None = None
        try:
            self.gates(cell, "before")
            state["gpu_temperature_start"] = self._temperatures()
            spec = server_spec(self.m, cell, self.run_id, cdir / "server.log",
                               image=self._image_ref(cell.arm), gpus=self.gpu_ids)
            t0 = time.monotonic()
            server = self.runtime.start(spec)
            self.bundle.write_json(f"cells/{cell.id}/server.json", server.describe())
            state["ready_s"] = round(server.wait_ready(), 3)
            state["levels"] = {}
            for lv in self.plan.levels:
                state["levels"][str(lv.concurrency)] = self.run_level(cell, lv, server, spec)
                self.bundle.write_json(f"cells/{cell.id}/cell.json", state)
            state["serve_s"] = round(time.monotonic() - t0, 3)
            state["status"] = "ok"
        except KeyboardInterrupt:
            state.update(status="interrupted", reason="interrupted by the user")
            raise
        except (ServerError, LoadError) as e:
            self._fail(cell, state, e)
        except KitError as e:
            self._fail(cell, state, e)
            raise
        finally:
            with deferred_interrupts():
                if server is not None:
                    try:
                        stop = server.stop()
                        state["stop"] = {"exit_code": stop.exit_code, "signal": stop.signal,
                                         "stop_s": stop.stop_s, **stop.details}
                        self.bundle.write_json(f"cells/{cell.id}/server.json", server.describe())
                    except KitError as e:
                        self._fail(cell, state, e, prefix="stopping the server: ")
                state["finished"] = _now()
                state["gpu_temperature_end"] = self._temperatures()
                self.bundle.write_json(f"cells/{cell.id}/cell.json", state)
                self.events.cell_done(cell, state["status"], state.get("reason"))
        try:
            self.gates(cell, "after")
        except GateFailed as e:
            state.update(status="failed", reason=f"after-stop gate: {e.message}")
            self.bundle.write_json(f"cells/{cell.id}/cell.json", state)
            raise

    def _fail(self, cell: Cell, state: dict[str, Any], e: KitError, prefix: str = "") -> None:
        if state.get("status") == "failed":  # keep the first reason; a failed stop adds to it
            state["reason"] = f"{state['reason']}\n{prefix}{e.message}"
        else:
            state.update(status="failed", reason=prefix + e.message, hint=e.hint, exit_code=int(e.exit_code))
        self.failed.setdefault(cell.id, (int(e.exit_code), prefix + e.message))

    def _temperatures(self) -> dict[str, Any] | None:
        if not self.m.hardware.gpus or not self.gpu_indices:
            return None
        from kit.envinfo import gpu_temperatures
        from kit.nvml import NvmlProbe

        return gpu_temperatures(NvmlProbe(), self.gpu_indices)

    def run_level(self, cell: Cell, lv: LevelPlan, server: Server, spec: ServerSpec) -> dict[str, Any]:
        from kit.load import LevelSpec, Progress, run_level

        rel = f"cells/{cell.id}/level-{lv.concurrency}"
        out = self.bundle.path(rel)
        self.events.level_started(cell, lv)
        before = scrape_metrics(spec.base_url)
        ls = LevelSpec(
            base_url=spec.base_url, endpoint=self.m.load.endpoint, model=self.m.model.served_name,
            concurrency=lv.concurrency, requests=lv.requests, warmup_requests=lv.warmup,
            prompt_tokens=self.m.load.prompt_tokens, output_tokens=self.m.load.output_tokens,
            seed=self.m.load.seed + lv.concurrency, request_timeout_s=self.m.load.request_timeout_s,
            processes=0 if self.m.load.processes == "auto" else self.m.load.processes,
            tags={"arm": cell.arm, "repeat": cell.repeat, "level": lv.concurrency},
        )

        def progress(p: Progress) -> None:
            rate = p.out_tokens / p.elapsed_s if p.elapsed_s > 0 else 0.0
            eta = (p.total - p.done) * p.elapsed_s / p.done if p.done else None
            self.events.level_progress(cell, lv, p.done, p.total, rate, eta)

        def server_gone() -> bool:
            try:
                server.check_alive()
            except ServerError:
                return True
            return False

        res = run_level(ls, out, on_progress=progress, should_stop=server_gone)
        after = scrape_metrics(spec.base_url)
        if before is not None or after is not None:
            self.bundle.write_json(f"{rel}/server_metrics.json", {"before": before, "after": after})
        self.events.level_done(cell, lv, res.ok, res.errors, res.client_bound)
        server.check_alive()  # a server that died mid-level fails the cell with its exit code and log tail
        if res.ok == 0:
            raise LoadError(f"level {lv.concurrency} of {cell.id}: all {res.errors} requests failed",
                            hint=f"see {rel}/records.jsonl and cells/{cell.id}/server.log")
        return {"ok": res.ok, "errors": res.errors, "wall_s": round(res.wall_s, 3),
                "client_bound": res.client_bound, "client_bound_reasons": res.client_bound_reasons}

    def _image_ref(self, arm: str) -> str | None:
        info = self.images.get(arm)
        return info.image_id if info is not None else None

    # ---- images

    def build_images(self) -> None:
        if self.m.runtime != "docker":
            self.bundle.write_json("images.json", {})
            return
        from kit.images import build_images

        self.images = build_images(self.lm, run_id=self.run_id, log_dir=self.bundle.path("images"),
                                   allow_unpinned=self.opts.allow_unpinned)
        built = {a: i.as_dict() for a, i in self.images.items()}
        if self.opts.resume is not None and self.bundle.path("images.json").exists():
            before = json.loads(self.bundle.path("images.json").read_text())
            changed = [a for a in built if before.get(a, {}).get("image_id") != built[a].get("image_id")]
            if changed:
                raise BundleError(
                    f"the image of arm(s) {', '.join(changed)} differs from the one this bundle started with "
                    f"({', '.join(str(before.get(a, {}).get('image_id'))[:19] for a in changed)} then, "
                    f"{', '.join(str(built[a].get('image_id'))[:19] for a in changed)} now); resuming would compare "
                    "cells run on different images", hint="start a new run")
            return
        self.bundle.write_json("images.json", built)

    # ---- the whole run

    def cells_to_run(self) -> list[Cell]:
        todo = []
        for cell in self.plan.cells:
            p = self.bundle.path(f"cells/{cell.id}/cell.json")
            if p.exists() and json.loads(p.read_text()).get("status") == "ok":
                continue
            if self.bundle.path(f"cells/{cell.id}").exists():
                self.bundle.move_failed_attempt(cell.id)
            todo.append(cell)
        return todo

    def preflight(self) -> None:
        """Every gate once before anything is built, created or even written: a machine that cannot run
        the experiment stops it with exit 5 and no bundle (when resuming, the report lands in the bundle)."""
        from kit.gates import run_gates

        report = run_gates(self.m, phase="before", run_id=self.run_id or None)
        self.preflight_report = report.as_dict()
        if self.opts.resume is not None:
            self.bundle.append_jsonl("gates.jsonl", self.preflight_report)
        report.raise_if_failed()

    def execute(self) -> str:
        if self.opts.resume is None:
            self.bundle.append_jsonl("gates.jsonl", self.preflight_report)
        if self.m.runtime == "docker":
            from kit.cleanup import refuse_live_runs

            ports = [self.m.server.port, *self.m.server.extra_ports, *self.m.gates.ports]
            refuse_live_runs(ports=ports, gpus="all" if self.m.hardware.gpus else None, own_run=self.run_id)
        self.build_images()
        todo = self.cells_to_run()
        done = len(self.plan.cells) - len(todo)
        if done:
            self.events.message(f"resuming: {done} cell(s) already complete, {len(todo)} to run")
        for i, cell in enumerate(todo):
            self.events.cell_started(cell, done + i + 1, len(self.plan.cells))
            self.run_cell(cell)
        return "complete" if not self.failed else "failed"

    def finalize(self, status: str) -> dict[str, Any]:
        from kit.bundle import sign_provenance
        from kit.report import render_report
        from kit.stats import summarize_bundle

        summary: dict[str, Any] = {}
        for stale in ("summary.json", "report.md"):
            self.bundle.path(stale).unlink(missing_ok=True)
        shutil.rmtree(self.bundle.path("plots"), ignore_errors=True)
        try:
            summary = summarize_bundle(self.bundle.root)
            self.bundle.write_json("summary.json", summary)
            render_report(self.bundle.root, summary)
        except Exception as e:  # noqa: BLE001 - a broken summary must not lose the bundle
            self.notices.append(f"summary/report failed: {type(e).__name__}: {e}")
        run = json.loads(self.bundle.path("run.json").read_text())
        run.update(status=status, finished=_now(),
                   failed_cells={c: {"exit_code": code, "reason": r} for c, (code, r) in self.failed.items()})
        self.bundle.write_json("run.json", run)
        sign_provenance(self.bundle, self.key, predicate=self._predicate(run))
        return summary

    def _predicate(self, run: dict[str, Any]) -> dict[str, Any]:
        return {
            "externalParameters": {"flags": run.get("flags", {}), "argv": run.get("argv", [])},
            "internalParameters": {"kit": __version__, "runtime": self.m.runtime,
                                   "hardware": self.m.hardware.model_dump(), "trust": self.trust.as_dict()},
            "resolvedDependencies": [
                {"uri": f"docker-image:{a}", "digest": {"sha256": i.image_id.split(":")[-1]},
                 "annotations": i.as_dict()}
                for a, i in self.images.items()
            ],
            "metadata": {"startedOn": run.get("started"), "finishedOn": run.get("finished")},
        }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _resume_sources(root: Path, manifest: Path | None) -> tuple[bytes, bytes | None, dict[str, Any], Path]:
    from kit.bundle import Bundle

    bundle = Bundle.open(root)  # BundleError (exit 9) when it is not a kit bundle
    try:
        run = json.loads(bundle.path("run.json").read_text())
        raw = bundle.path("manifest.yaml").read_bytes()
    except (OSError, ValueError) as e:
        raise BundleError(f"{root}: cannot read the bundle's run.json or manifest.yaml ({e})",
                          hint=f"check it with `kit verify {root}`") from None
    sig_file = bundle.path("manifest.yaml.sig")
    sig = sig_file.read_bytes() if sig_file.exists() else None
    if manifest is not None and read_bytes(manifest) != raw:
        raise UsageError(f"{manifest} differs from the manifest the bundle {root} was started with",
                         hint="resume without MANIFEST, or start a new run")
    # trust as for the original: the project the manifest came from (its allowed_signers) or the user file
    original = Path(str(run.get("manifest_source") or root / "manifest.yaml"))
    return raw, sig, run, original


def _verify_before_resume(root: Path) -> str:
    """A resumed bundle is re-signed: first prove nobody changed what is already in it."""
    from kit.bundle import verify_integrity

    if not (root / "provenance.dsse.json").exists():
        return "none: kit was killed before it could sign; earlier files are carried over unverified"
    verify_integrity(root)  # raises BundleError (exit 9) naming any changed, added or missing file
    return "verified"


def load_for_run(manifest: Path | None, opts: RunOptions) -> tuple[LoadedManifest, ManifestTrust, bytes | None, str]:
    """Read the manifest (the bundle's copy when resuming), verify its signature over exactly those
    bytes, validate it. Returns the manifest, the trust decision, the signature bytes and, when resuming,
    what was known of the bundle's integrity before."""
    note = ""
    if opts.resume is not None:
        raw, sig, run, original = _resume_sources(opts.resume, manifest)
        flags = run.get("flags", {})
        note = _verify_before_resume(opts.resume)
        opts.allow_unsigned = opts.allow_unsigned or bool(flags.get("allow_unsigned"))
        opts.allow_unpinned = opts.allow_unpinned or bool(flags.get("allow_unpinned"))
        label = original
    else:
        if manifest is None:
            raise UsageError("give a MANIFEST to run, or --resume BUNDLE")
        raw = read_bytes(manifest)
        sig_file = signature_path(manifest)
        sig = sig_file.read_bytes() if sig_file.exists() else None
        label = manifest
    trust_files = opts.trust or default_trust_files(label, project_root(label))
    trust = check_trust(label, raw, sig, trust_files, opts.allow_unsigned)
    lm = load_manifest(label, raw, allow_unpinned=opts.allow_unpinned)
    return lm, trust, sig, note


def run_experiment(manifest: Path | None, opts: RunOptions, events: Events | None = None) -> RunResult:
    """Run (or resume) an experiment; whatever ends it, leaves a signed, verifiable, resumable bundle and
    no server behind."""
    from kit.bundle import runner_key

    lm, trust, sig, resume_note = load_for_run(manifest, opts)
    ev = events or QuietEvents()
    key, notice = runner_key(opts.key)  # before anything runs: a bad key must not surface after hours of load
    if notice:
        ev.message(notice)
    exp = Experiment(lm, trust, opts, ev, key)
    exp.resume_note = resume_note or exp.resume_note
    if opts.resume is None:
        exp.preflight()  # a machine that cannot run it: exit 5, nothing built, started or written
    try:
        exp.open_bundle(sig)
    except BaseException:
        exp.unlock()
        raise
    ev.message(f"bundle: {exp.bundle.root}")
    status = "failed"
    error_: BaseException | None = None
    try:
        with _signals_as_interrupts():
            if opts.resume is not None:
                exp.preflight()
            status = exp.execute()
    except KeyboardInterrupt as e:
        status, error_ = "interrupted", e
    except BaseException as e:  # noqa: BLE001 - anything: finalize first, then let it out
        status, error_ = "failed", e
    error = error_
    try:
        with deferred_interrupts():
            summary = exp.finalize(status)
    finally:
        exp.unlock()
    from kit.report import verdict_lines

    verdicts = _safe(verdict_lines, summary)
    where = f"The bundle is consistent and resumable: kit run --resume {exp.bundle.root}"
    if error is not None or exp.failed:
        for line in verdicts:
            ev.message(line)
    if isinstance(error, KeyboardInterrupt):
        raise Interrupted(f"interrupted.\n{where}") from None
    if isinstance(error, KitError):
        error.message += f"\n{where}"
        raise error
    if error is not None:
        raise error
    if exp.failed:
        code, _ = next(iter(exp.failed.values()))
        cells = "; ".join(f"{c}: {r.splitlines()[0]}" for c, (_, r) in exp.failed.items())
        err: KitError = LoadError("") if code == int(LoadError.exit_code) else ServerError("")
        err.message = f"{len(exp.failed)} cell(s) failed ({cells})"
        err.hint = f"see the cells' server.log; then: kit run --resume {exp.bundle.root}"
        raise err
    return RunResult(bundle=exp.bundle.root, status=status, verdicts=verdicts,
                     failed_cells={c: r for c, (_, r) in exp.failed.items()}, notices=exp.notices, summary=summary)


@contextlib.contextmanager
def _signals_as_interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal, `kill`, a batch system's cancel) end the run the way Ctrl-C
    does: the server is stopped and the bundle signed."""
    if not threading_main():
        yield
        return

    def interrupt(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _safe(fn: Callable[[dict[str, Any]], list[str]], summary: dict[str, Any]) -> list[str]:
    try:
        return fn(summary) if summary else []
    except Exception:  # noqa: BLE001
        return []
