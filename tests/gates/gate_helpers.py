"""Helpers for the gate tests: small manifests, a fake Docker client, server records."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.manifests import manifest_data, manifest_model
from support.ports import free_port

from kit.manifest import Manifest
from kit.plumbing.procs import start_ticks
from kit.runtime.records import cmdline


def make_manifest(
    *,
    gpus: int | str = 0,
    gpu_name: str | None = None,
    threshold_mib: int = 256,
    gpu_deadline_s: float = 0.3,
    port: int | None = None,
    extra_ports: list[int] | None = None,
    gate_ports: list[int] | None = None,
    host: str = "127.0.0.1",
    port_deadline_s: float = 0.0,
    runtime: str = "process",
    compute_capability: list[str] | None = None,
) -> Manifest:
    hardware: dict[str, Any] = {"gpus": gpus}
    if gpu_name is not None:
        hardware["gpu_name"] = gpu_name
    if compute_capability is not None:
        hardware["compute_capability"] = compute_capability
    arms: list[dict[str, Any]] = [{"name": "a"}, {"name": "b"}]
    if runtime == "docker":
        base = "example/base:1@sha256:" + "0" * 64
        arms = [{"name": n, "image": {"context": "images/x", "base": base}} for n in ("a", "b")]
    return manifest_model(manifest_data(
        "gate-test", runtime=runtime, port=free_port() if port is None else port, command=["true"], served_name="m", arms=arms, hardware=hardware,
        server={"host": host, "extra_ports": extra_ports or []},
        gates={"gpu_memory_threshold_mib": threshold_mib, "gpu_deadline_s": gpu_deadline_s,
               "port_deadline_s": port_deadline_s, "ports": gate_ports or []},
    ))


@dataclass
class FakeContainer:
    id: str
    name: str
    labels: dict[str, str]
    status: str = "running"


@dataclass
class FakeDocker:
    """Enough of docker.DockerClient for the leftover gate: containers.list(filters=...)."""

    running: list[FakeContainer] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def containers(self) -> FakeDocker:
        return self

    def list(self, filters: dict[str, Any] | None = None) -> list[FakeContainer]:
        self.calls.append(filters or {})
        label = (filters or {}).get("label")
        return [c for c in self.running if label is None or label in c.labels]

    def close(self) -> None:
        pass


def write_record(directory: Path, pgid: int, run_id: str, cell: str = "a-r1") -> Path:
    path = directory / f"{pgid}.json"
    # the leader's identity as the process runtime records it: without it a record never counts
    doc = {"pgid": pgid, "pid": pgid, "run_id": run_id, "cell": cell, "command": ["sleep", "600"],
           "started": "2026-01-01T00:00:00+00:00", "start_ticks": start_ticks(pgid), "cmdline": cmdline(pgid)}
    path.write_text(json.dumps(doc))
    return path


def own_pgid() -> int:
    return os.getpgrp()
