"""kit.cleanup against a real engine: leftovers in every state, live runs, kit images."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from docker_helpers import SESSION_RUN, make_spec
from support.kits import labels_of
from support.manifests import manifest_data, manifest_model

from kit.cleanup import clean, conflicting_runs, live_runs, refuse_live_runs, remove_images
from kit.errors import ExitCode, GateFailed
from kit.gates.leftovers import check_containers
from kit.plumbing.procs import start_ticks
from kit.runtime.docker import DockerRuntime
from kit.runtime.records import boot_id, pid_namespace

pytestmark = pytest.mark.docker


def test_clean_removes_leftovers_in_every_state(client: Any, engine_image: Any, tmp_path: Path) -> None:
    run = f"{SESSION_RUN}-clean"
    labels = {"kit.managed": "1", "kit.run": run}
    rt = DockerRuntime(client)
    created = rt.create_only(make_spec(tmp_path, engine_image.image_id, "left-created",
                                       labels=labels, gpus=["GPU-1"]))
    running = client.containers.run(engine_image.image_id, ["sleep", "600"], detach=True, labels=labels,
                                    name=f"kit-{run}-running")
    exited = client.containers.run(engine_image.image_id, ["true"], detach=True, labels=labels,
                                   name=f"kit-{run}-exited")
    exited.wait(timeout=30)
    other = client.containers.create(engine_image.image_id, ["true"], labels={"kit.run": SESSION_RUN})
    try:
        states = {c.name: c.status for c in client.containers.list(all=True, filters={"label": f"kit.run={run}"})}
        assert sorted(states.values()) == ["created", "exited", "running"]
        result = clean(client=client, run_id=run)
        assert sorted(result) == ["containers"] and len(result["containers"]) == 3
        assert any("created" in item for item in result["containers"])
        assert client.containers.list(all=True, filters={"label": f"kit.run={run}"}) == []
        other.reload()  # not kit.managed: untouched
    finally:
        for c in (created, running, exited, other):
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone is the expected case
                pass


def test_live_runs_report_ports_and_gpus_and_refuse_conflicts(client: Any, engine_image: Any,
                                                               tmp_path: Path) -> None:
    run = f"{SESSION_RUN}-live"
    spec = make_spec(tmp_path, engine_image.image_id, "live", command=["sleep", "600"], stop_grace_s=1.0,
                     labels={"kit.run": run, "kit.experiment": "pytest", "kit.arm": "a", "kit.cell": "a-r1"})
    server = DockerRuntime(client).start(spec)
    try:
        mine = [r for r in live_runs(client) if r.run_id == run]
        assert len(mine) == 1
        r = mine[0]
        assert r.ports == [("127.0.0.1", spec.port)] and r.gpus is None and r.cell == "a-r1"
        labels = client.containers.get(r.container_id).labels  # the kit process that made it: this one
        assert (labels["kit.pid"], labels["kit.start_ticks"]) == (str(os.getpid()), str(start_ticks(os.getpid())))
        assert labels["kit.boot"] == boot_id() and labels["kit.pidns"] == pid_namespace()
        assert r.owner is None  # its own: never "another live run"
        assert conflicting_runs([r], ports=[spec.port], gpus=None) == [r]
        assert conflicting_runs([r], ports=[spec.port], gpus=None, own_run=run) == []
        assert conflicting_runs([r], ports=[1], gpus="all") == []
        with pytest.raises(GateFailed) as err:
            refuse_live_runs(ports=[spec.port], gpus=None, client=client)
        assert err.value.exit_code == ExitCode.GATE_FAILED and "kit clean" in str(err.value.hint)
        assert f"127.0.0.1:{spec.port}" in err.value.message
    finally:
        server.stop()
    assert not [x for x in live_runs(client) if x.run_id == run]


def test_a_container_whose_kit_lives_is_no_leftover_whatever_lock_directory_it_used(client: Any,
                                                                                     engine_image: Any) -> None:
    """A run's container while its kit lives, that kit's run lock in another lock directory (KIT_LOCK_DIR: every
    test has its own): was taken for a leftover, so a process-runtime run beside it failed its leftover gate (a
    flaky e2e test, 2026-12-07) and `kit clean` would have removed it mid-cell. The labels kit puts on each
    container name its kit process (pid, start time, boot), as a process-runtime server's record does."""
    run = f"{SESSION_RUN}-otherdir"
    kit = subprocess.Popen(["sleep", "600"])  # stands for that run's kit process
    ticks = start_ticks(kit.pid)
    assert ticks is not None
    labels = labels_of(kit, **{"kit.run": run, "kit.cell": "a-r1"})
    c = client.containers.run(engine_image.image_id, ["sleep", "600"], detach=True, labels=labels,
                              name=f"kit-{run}")
    m = manifest_model(manifest_data("t", port=1, command=["true"], served_name="m"))
    try:
        check = check_containers(m, run_id="new-run", phase="before", client=client)
        assert c.id in check.evidence["of_live_runs"] and c.id not in check.evidence["blocking"], check.message
        assert check.evidence["of_live_runs"][c.id]["pid"] == kit.pid
        out = clean(client=client, run_id=run)
        assert out["containers"] == [] and len(out["live_run_containers_left_alone"]) == 1
        assert [r.owner["pid"] for r in live_runs(client) if r.run_id == run and r.owner] == [kit.pid]
        c.reload()
        assert c.status == "running"
        kit.kill()
        kit.wait()  # its kit is gone: now the container is a leftover
        check = check_containers(m, run_id="new-run", phase="before", client=client)
        assert c.id in check.evidence["blocking"] and f"kit-{run}" in check.message
        assert clean(client=client, run_id=run)["containers"] == [f"kit-{run} ({c.short_id}, running)"]
    finally:
        kit.kill()
        kit.wait()
        try:
            c.remove(force=True)
        except Exception:  # noqa: BLE001 - already gone is the expected case
            pass


def test_gpu_overlap_counts_as_a_conflict() -> None:
    from kit.cleanup import LiveRun

    r = LiveRun("other", "e", "a", "a-r1", "id", "n", "running", [], ["GPU-1", "GPU-2"])
    assert conflicting_runs([r], ports=[], gpus=["GPU-2"]) == [r]
    assert conflicting_runs([r], ports=[], gpus="all") == [r]
    assert conflicting_runs([r], ports=[], gpus=["GPU-3"]) == []
    assert conflicting_runs([r], ports=[], gpus=None) == []


def test_kit_images_are_removed_children_first(client: Any, base_image: str, tmp_path: Path) -> None:
    key = f"kit.test.clean={SESSION_RUN}"
    labels = {"kit.managed": "1", "kit.test.clean": SESSION_RUN}
    (tmp_path / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN echo parent > /parent\n")
    parent, _ = client.images.build(path=str(tmp_path), tag=f"kit-test/clean-parent:{SESSION_RUN}",
                                    buildargs={"BASE_IMAGE": base_image}, labels=labels, rm=True, forcerm=True)
    (tmp_path / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN echo child > /child\n")
    client.images.build(path=str(tmp_path), tag=f"kit-test/clean-child:{SESSION_RUN}",
                                   buildargs={"BASE_IMAGE": parent.id}, labels=labels, rm=True, forcerm=True)
    removed, kept = remove_images(client, [key])
    assert len(removed) == 2 and kept == []
    assert client.images.list(filters={"label": key}) == []
    assert client.images.get(base_image)  # the base (kit.base=1, not kit.managed) stays


def test_clean_needs_an_engine_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(Exception, match="no Docker engine answers") as err:
        clean()
    assert "ensure-docker" in str(err.value)

