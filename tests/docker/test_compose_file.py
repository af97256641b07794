"""compose.yaml: generated from experiments/oea.yaml, checked in, identical to kit's servers, parseable."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from docker_helpers import ROOT

from kit.compose import render_compose
from kit.errors import UsageError
from kit.experiment import server_spec
from kit.manifest import load_manifest
from kit.plan import Cell

OEA = ROOT / "experiments" / "oea.yaml"
COMPOSE = ROOT / "compose.yaml"


def test_checked_in_compose_is_the_generated_one() -> None:
    generated = render_compose(load_manifest(OEA, allow_unpinned=True))
    assert COMPOSE.read_text() == generated, "compose.yaml is stale: run `kit compose experiments/oea.yaml -o compose.yaml`"


def test_services_match_what_kit_runs() -> None:
    lm = load_manifest(OEA)
    m = lm.manifest
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert list(services) == [a.name for a in m.arms]
    for arm in m.arms:
        svc = services[arm.name]
        spec = server_spec(m, Cell(0, arm.name, 1), "run", Path(os.devnull))
        assert svc["profiles"] == [arm.name]
        assert svc["command"] == spec.command
        assert svc["environment"] == [*(f"{k}={v}" for k, v in spec.env.items()), "HF_TOKEN"]
        assert svc["ports"] == [f"{m.server.host}:{m.server.port}:{m.server.container_port or m.server.port}"]
        assert svc["ipc"] == "host" and "shm_size" not in svc
        assert svc["ulimits"] == {"memlock": -1, "stack": 67108864}
        assert svc["volumes"] == [f"{m.model.path}:{m.model.mount_at}:ro"]
        assert svc["init"] is True and svc["stop_grace_period"] == "60s"
        (dev,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert dev == {"driver": "nvidia", "count": 8, "capabilities": ["gpu"]}
        assert "/health" in svc["healthcheck"]["test"][-1]
        assert svc["labels"]["kit.managed"] == "1"
    assert services["baseline"]["build"]["args"]["BASE_IMAGE"] == m.arm("baseline").image.base  # type: ignore[union-attr]
    assert services["oea"]["build"]["args"]["BASE_IMAGE"] == services["baseline"]["image"]
    assert "HF_TOKEN=" not in COMPOSE.read_text()


def test_gpu_counts_and_kit_include_contexts(tmp_path: Path) -> None:
    raw = OEA.read_bytes().replace(b"  gpus: 8\n", b"  gpus: all\n").replace(b"shm_size: 32g\n  ipc_host: true\n",
                                                                            b"shm_size: 32g\n")
    raw = raw.replace(b"context: images/oea", b"context: images/engine")
    text = render_compose(load_manifest(OEA, raw, allow_unpinned=True))
    svc = yaml.safe_load(text)["services"]
    assert svc["baseline"]["deploy"]["resources"]["reservations"]["devices"][0]["count"] == "all"
    assert "NVIDIA_VISIBLE_DEVICES=all" in svc["baseline"]["environment"]
    assert svc["baseline"]["shm_size"] == "32g" and "ipc" not in svc["baseline"]
    assert svc["oea"]["build"]["context"] == "." and svc["oea"]["build"]["dockerfile"] == "images/engine/Dockerfile"


def test_process_manifests_have_no_compose() -> None:
    with pytest.raises(UsageError, match="needs a docker manifest"):
        render_compose(load_manifest(ROOT / "experiments" / "demo.yaml"))


@pytest.mark.parametrize("profile", ["baseline", "oea"])
def test_docker_compose_parses_it(profile: str) -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose (Debian's 1.29: apt-get install -y docker-compose) is not installed")
    env = {**os.environ, "HF_TOKEN": "dummy"}
    r = subprocess.run([exe, "-f", str(COMPOSE), "--profile", profile, "config", "-q"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([exe, "-f", str(COMPOSE), "--profile", profile, "config", "--services"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert profile in r.stdout.split()
