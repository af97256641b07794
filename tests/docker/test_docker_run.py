"""`kit run` with the docker runtime, end to end against the real engine: the demo in containers,
failures of a container during start-up and mid-level, a busy port, and the GPU manifest on a machine
without the NVIDIA runtime."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_helpers import ROOT
from support.manifests import engine_command, manifest_data, write_manifest
from support.ports import free_port

pytestmark = pytest.mark.docker

MANIFEST_DIR = ROOT / ".cache" / "test-manifests"  # inside the project (images/ is found), ignored by git


def _manifest(name: str, base: str, port: int, *, levels: tuple[int, ...] = (1, 4), requests: int = 12,
              output_tokens: int = 8, repeats: int = 1, command: list[str] | None = None) -> Path:
    """experiments/demo.yaml's experiment, smaller, in Docker: the engine image FROM the local base."""
    image = {"context": "images/engine", "base": base}
    data = manifest_data(
        name, runtime="docker", port=port, served_name="kit-moe",
        command=command or engine_command("python3"),
        arms=[{"name": "baseline", "image": image}, {"name": "oea", "image": image, "args": ["--oea-k0", "2"]}],
        server={"container_port": 8000, "ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": list(levels), "requests_per_level": requests, "warmup_requests": 2, "prompt_tokens": 8,
              "output_tokens": output_tokens, "seed": 5, "request_timeout_s": 60},
        design={"repeats": repeats},
        gates={"port_deadline_s": 2},
    )
    return write_manifest(MANIFEST_DIR / f"{name}-{uuid.uuid4().hex[:6]}.yaml", data)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    e = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}
    yield e


def _kit(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout, check=False)


def _kit_containers(client: Any) -> list[str]:
    return [c.name for c in client.containers.list(all=True, filters={"label": "kit.managed=1"})]


def _bundle(out: Path) -> Path:
    (b,) = [p for p in out.iterdir() if p.is_dir()]
    return b


def test_demo_in_docker_end_to_end(client: Any, base_image: str, tmp_path: Path, env: dict[str, str]) -> None:
    before = _kit_containers(client)
    m = _manifest("demo-docker", base_image, free_port())
    r = _kit("run", str(m), "--out", str(tmp_path / "r"), "--allow-unsigned", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    b = _bundle(tmp_path / "r")
    images = json.loads((b / "images.json").read_text())
    assert set(images) == {"baseline", "oea"}
    # same recipe (the arms differ by args only); the IDs differ only by the kit.arm label
    assert images["baseline"]["context_sha256"] == images["oea"]["context_sha256"]
    for cell in ("baseline-r1", "oea-r1"):
        state = json.loads((b / f"cells/{cell}/cell.json").read_text())
        assert state["status"] == "ok", state
        server = json.loads((b / f"cells/{cell}/server.json").read_text())
        assert server["runtime"] == "docker"
        assert "kit-engine ready" in (b / f"cells/{cell}/server.log").read_text()
        assert len((b / f"cells/{cell}/level-4/records.jsonl").read_text().splitlines()) == 12
    envj = json.loads((b / "environment.json").read_text())
    assert envj["runtime"]  # the Docker engine facts
    assert _kit("verify", str(b), env=env).returncode == 0
    assert _kit_containers(client) == before


def test_container_exiting_at_start_fails_the_cell_with_exit_code_and_log(client: Any, base_image: str,
                                                                          tmp_path: Path, env: dict[str, str]) -> None:
    before = _kit_containers(client)
    cmd = ["python3", "-c", "import sys; print('loading weights'); print('boom: out of memory'); sys.exit(3)"]
    m = _manifest("exits", base_image, free_port(), command=cmd, levels=(1,))
    r = _kit("run", str(m), "--out", str(tmp_path / "r"), "--allow-unsigned", env=env)
    assert r.returncode == 7, r.stdout + r.stderr
    b = _bundle(tmp_path / "r")
    state = json.loads((b / "cells/baseline-r1/cell.json").read_text())
    assert state["status"] == "failed"
    assert "exit code 3" in state["reason"] and "boom: out of memory" in state["reason"]
    assert _kit("verify", str(b), env=env).returncode == 0
    assert _kit_containers(client) == before


def test_container_killed_mid_level_fails_the_cell(client: Any, base_image: str, tmp_path: Path,
                                                   env: dict[str, str]) -> None:
    before = _kit_containers(client)
    m = _manifest("killed", base_image, free_port(), levels=(2,), requests=80, output_tokens=24)
    out = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "kit", "run", str(m), "--out", str(out), "--allow-unsigned"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            recs = list(out.glob("*/cells/baseline-r1/level-2/records.jsonl"))
            if recs and len(recs[0].read_text().splitlines()) >= 8:
                break
            assert time.monotonic() < deadline and proc.poll() is None, "the level never got going"
            time.sleep(0.1)
        (victim,) = client.containers.list(filters={"label": ["kit.managed=1", "kit.cell=baseline-r1"]})
        victim.kill(signal="SIGKILL")
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 7, stdout + stderr
    b = _bundle(out)
    state = json.loads((b / "cells/baseline-r1/cell.json").read_text())
    assert state["status"] == "failed" and "137" in state["reason"], state
    assert "kit-engine ready" in state["reason"]  # the last log lines
    assert len((b / "cells/baseline-r1/level-2/records.jsonl").read_text().splitlines()) >= 8
    assert _kit_containers(client) == before


def test_port_published_by_another_process_stops_before_the_container(client: Any, base_image: str,
                                                                      tmp_path: Path, env: dict[str, str]) -> None:
    before = _kit_containers(client)
    port = free_port()
    m = _manifest("busy", base_image, port, levels=(1,))
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        r = _kit("run", str(m), "--out", str(tmp_path / "r"), "--allow-unsigned", env=env)
    assert r.returncode == 5, r.stdout + r.stderr
    assert str(port) in r.stderr and str(os.getpid()) in r.stderr
    assert _kit_containers(client) == before


def test_gpu_manifest_without_nvidia_runtime_stops_before_creating_anything(client: Any, tmp_path: Path,
                                                                           env: dict[str, str]) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has NVIDIA tools; the refusal is for machines without them")
    containers = _kit_containers(client)
    images = {i.id for i in client.images.list(filters={"label": "kit.managed=1"})}
    # experiments/oea.yaml made runnable, as a user would before running it: not a template, a base digest that is
    # no placeholder, a model folder that exists; in a project of its own holding copies of the repo's image contexts.
    text = (ROOT / "experiments/oea.yaml").read_text().replace("template: true\n", "")
    text = text.replace("sha256:" + "0" * 64, "sha256:" + hashlib.sha256(b"not a placeholder").hexdigest())
    (tmp_path / "model").mkdir()
    text = text.replace("path: /models/GLM-5-NVFP4", f"path: {tmp_path / 'model'}")
    for context in ("sglang", "oea"):
        shutil.copytree(ROOT / "images" / context, tmp_path / "images" / context)
    m = tmp_path / "oea.yaml"
    m.write_text(text)
    r = _kit("run", str(m), "--out", str(tmp_path / "r"), "--allow-unsigned", env=env)
    assert r.returncode == 5, r.stdout + r.stderr
    assert "no NVIDIA driver found" in r.stderr and "needs 8 GPUs" in r.stderr
    assert "docker_gpu_runtime" in r.stderr and "nvidia-container-toolkit" in r.stderr
    assert not (tmp_path / "r").exists()
    assert _kit_containers(client) == containers
    assert {i.id for i in client.images.list(filters={"label": "kit.managed=1"})} == images
