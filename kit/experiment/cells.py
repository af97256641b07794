"""One cell's lifecycle: gate -> start -> ready -> levels -> stop -> gate, its state (``CellFile``) written
before, during and after, and kit's own overhead in it recorded."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kit.bundle import Bundle
from kit.envinfo import gpu_temperatures
from kit.errors import GateFailed, KitError, LoadError, ServerError
from kit.experiment.levels import LevelRunner, level_spec
from kit.experiment.options import Events
from kit.experiment.quality import run_quality
from kit.experiment.signals import deferred_interrupts, signals_as_interrupts
from kit.experiment.workloads import Workloads
from kit.files import JsonObject
from kit.files.cell import CellFile, OverheadParts, ServerStopped
from kit.files.run import FailedCell
from kit.files.server import ServerFile
from kit.gates import Check, GateReport, run_gates
from kit.load import LoadSession, process_count
from kit.manifest import Manifest
from kit.nvml import NvmlProbe
from kit.plan import Cell, Plan
from kit.plumbing.clock import utc_now
from kit.plumbing.redact import redact
from kit.runtime import RunningServer, Runtime
from kit.runtime.server_info import read_server_info
from kit.server_spec import server_spec


@dataclass
class CellRunner:
    """Runs cells one after another; ``failed`` collects the cells that failed (first reason kept)."""

    m: Manifest
    plan: Plan
    bundle: Bundle
    runtime: Runtime
    events: Events
    image_ids: dict[str, str] = field(default_factory=dict)  # arm -> image id (docker runtime)
    failed: dict[str, FailedCell] = field(default_factory=dict)
    gpu_ids: list[str] | None = None
    gpu_indices: list[int] = field(default_factory=list)
    nodes: NodeGates | None = None  # runtime slurm: the allocation's nodes and their gates
    workloads: Workloads | None = None  # load.dataset: every cell's levels' workload files, built once per run
    load: LoadSession | None = None  # the run's load drivers, reused cell after cell (set while the cells run)

    def gates(self, cell: Cell, phase: str) -> None:
        report = gate_report(self.m, phase, self.bundle.run_id, self.nodes)
        self.bundle.append_jsonl(f"cells/{cell.id}/gates.jsonl", report.as_dict())
        if report.gpus:
            self.gpu_ids = [g["uuid"] for g in report.gpus]
            self.gpu_indices = [int(g["index"]) for g in report.gpus]
        report.raise_if_failed()

    def write(self, state: CellFile) -> None:
        self.bundle.write_json(f"cells/{state.id}/cell.json", state)

    def run(self, cell: Cell) -> None:
        state = CellFile(id=cell.id, arm=cell.arm, repeat=cell.repeat, index=cell.index, status="running",
                         started=utc_now())
        self.write(state)
        t_cell = time.monotonic()
        servers: list[RunningServer] = []  # the one started, as soon as it is (a hold spans its start)
        # The hold comes first, the interruptible work inside it: a signal at the work's last step is held by the
        # time the stop below begins, which therefore always runs to its end (kit.plumbing.interrupts)
        with deferred_interrupts():
            try:
                with signals_as_interrupts():
                    self.serve(cell, state, servers)
                state.status = "ok"
            except KeyboardInterrupt:
                state.status, state.reason = "interrupted", "interrupted by the user"
                raise
            except (ServerError, LoadError) as e:
                self.fail(state, e)
            except KitError as e:
                self.fail(state, e)
                raise
            finally:
                for server in servers:
                    self.stop(state, server)
                state.finished = utc_now()
                state.gpu_temperature_end = self.temperatures()
                record_overhead(state, time.monotonic() - t_cell)
                self.write(state)
                self.events.cell_done(cell, state.status, state.reason)
        try:
            self.gates(cell, "after")
        except GateFailed as e:
            state.status, state.reason = "failed", f"after-stop gate: {e.message}"
            self.write(state)
            raise

    def serve(self, cell: Cell, state: CellFile, servers: list[RunningServer]) -> None:
        """A cell's work: gates, the server started (into ``servers``) and made ready, its levels measured."""
        self.gates(cell, "before")
        state.gpu_temperature_start = self.temperatures()
        spec = server_spec(self.m, cell, self.bundle.run_id, self.bundle.cell_dir(cell.id) / "server.log",
                           image=self.image_ids.get(cell.arm), gpus=self.gpu_ids,
                           nodes=self.nodes.hosts if self.nodes else ())
        drivers = max(process_count(level_spec(self.m, cell, lv, spec.base_url)) for lv in self.plan.levels)
        # the run's load drivers (Experiment.execute holds them): the missing ones import Locust while the server starts
        assert self.load is not None, "cells are served inside the run's LoadSession"
        load = self.load
        load.warm(drivers)
        t0 = time.monotonic()
        with deferred_interrupts():  # started and recorded in one step: no interrupt between leaks it
            server = self.runtime.start(spec)
            servers.append(server)
        self.bundle.write_json(f"cells/{cell.id}/server.json", ServerFile.model_validate(server.describe()))
        state.ready_s = round(server.wait_ready(), 3)
        # --- server info (helper sglang): the engine's own account of itself (sglang's /server_info)
        if self.m.server.info_path:
            info = read_server_info(spec, self.m.server.info_path)
            self.bundle.write_json(f"cells/{cell.id}/server_info.json", info)
        # --- end server info
        # --- quality (helper sglang): the untimed few-shot accuracy check, before the timed levels
        if self.m.quality is not None:
            quality = run_quality(self.m.quality, spec.base_url, self.m.model.served_name, self.m.load.endpoint,
                                  spec.ssl_context)
            self.bundle.write_json(f"cells/{cell.id}/quality.json", quality)
        # --- end quality
        state.levels = {}
        telemetry_gpus = self.gpu_indices if self.m.hardware.gpus and not self.nodes else []  # telemetry
        levels = LevelRunner(self.m, self.bundle, self.events, gpus=telemetry_gpus, workloads=self.workloads)
        for lv in self.plan.levels:
            state.levels[str(lv.concurrency)] = levels.run(cell, lv, server, spec, load)
            self.write(state)
        state.serve_s = round(time.monotonic() - t0, 3)

    def stop(self, state: CellFile, server: RunningServer) -> None:
        try:
            stop = server.stop()
            state.stop = ServerStopped.model_validate(
                {"exit_code": stop.exit_code, "signal": stop.signal, "stop_s": stop.stop_s, **stop.details})
            self.bundle.write_json(f"cells/{state.id}/server.json", ServerFile.model_validate(server.describe()))
        except KitError as e:
            self.fail(state, e, prefix="stopping the server: ")

    def fail(self, state: CellFile, e: KitError, prefix: str = "") -> None:
        why = redact(prefix + e.message)  # it may quote a server's log or answers (kit.plumbing.redact)
        if state.status == "failed":  # keep the first reason; a failed stop adds to it
            state.reason = f"{state.reason}\n{why}"
        else:
            state.status, state.reason = "failed", why
            state.hint, state.exit_code = None if e.hint is None else redact(e.hint), int(e.exit_code)
        self.failed.setdefault(state.id, FailedCell(exit_code=int(e.exit_code), reason=why))

    def temperatures(self) -> JsonObject | None:
        if not self.m.hardware.gpus or not self.gpu_indices:
            return None
        return gpu_temperatures(NvmlProbe(), self.gpu_indices)


@dataclass(frozen=True)
class NodeGates:
    """The nodes a server of runtime slurm spans (rank r on ``hosts[r]``) and how to gate them all."""

    hosts: list[str]
    check: Callable[[str | None, str], list[Check]]  # (run_id, phase) -> a check per gate per node


def gate_report(m: Manifest, phase: str, run_id: str | None, nodes: NodeGates | None) -> GateReport:
    """The gates of ``phase`` here, and with runtime slurm those of every node (the GPU gate runs there only:
    each node checks its own share of the GPUs)."""
    report = run_gates(m, phase=phase, run_id=run_id, check_gpu=False if nodes is not None else None)
    if nodes is not None:
        report.checks += nodes.check(run_id, phase)
    return report


def record_overhead(state: CellFile, wall_s: float) -> None:
    """kit's own time in a cell that served: its wall time less readiness, the levels and the stop."""
    if state.ready_s is None or state.stop is None or state.stop.stop_s is None:
        return
    levels = sum(lv.wall_s for lv in state.levels.values())
    warmups = sum(lv.warmup_s or 0.0 for lv in state.levels.values())
    parts = OverheadParts(cell_wall_s=round(wall_s, 3), ready_s=state.ready_s, levels_wall_s=round(levels, 3),
                          warmup_s=round(warmups, 3), stop_s=round(state.stop.stop_s, 3))
    state.overhead_parts = parts
    state.kit_overhead_s = round(wall_s - parts.ready_s - levels - warmups - parts.stop_s, 3)
