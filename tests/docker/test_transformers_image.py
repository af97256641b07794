"""images/transformers in Docker: its base made by images/transformers/build-base (kit's local Python base plus
torch CPU and transformers[serving]==5.24.0 from host-made wheels), the image built by kit from the recipe,
and `kit run` of one cell per arm (baseline, OEA) in containers serving the tiny model mounted read-only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from docker_helpers import ROOT, unavailable
from support.manifests import manifest_data, write_manifest
from support.ports import free_port

pytestmark = pytest.mark.docker

MANIFEST_DIR = ROOT / ".cache" / "test-manifests"  # inside the project (images/ is found), ignored by git
IMAGE_DIR = ROOT / "images" / "transformers"
TOKENS = 12


@pytest.fixture(scope="session")
def transformers_base() -> str:
    pytest.importorskip("transformers", reason="transformers is not installed (make test installs the test extras)")
    r = subprocess.run([str(IMAGE_DIR / "build-base")], cwd=ROOT, capture_output=True, text=True, timeout=1800,
                       check=False, env={**os.environ, "PYTHON": sys.executable})  # its pip downloads the wheels
    if r.returncode != 0:
        unavailable(f"images/transformers/build-base failed: {r.stderr.strip()[-1500:]}")
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if str(IMAGE_DIR) not in sys.path:
        sys.path.insert(0, str(IMAGE_DIR))
    from kit_hf.make_model import make_model

    out = tmp_path_factory.mktemp("hf-docker") / "tiny"
    make_model("tiny-cpu", out, seed=0)
    return out


def _manifest(base: str, model: Path, port: int) -> Path:
    image = {"context": "images/transformers", "base": base}
    data = manifest_data(
        "transformers-docker", runtime="docker", port=port, served_name="kit-tiny",
        command=["python3", "-m", "kit_hf.serve", "{model_path}", "--served-name", "{served_name}",
                 "--continuous-batching", "--cb-num-blocks", "32", "--cb-max-batch-tokens", "256", "--device", "cpu",
                 "--host", "0.0.0.0", "--port", "8000"],
        arms=[{"name": "baseline", "image": image}, {"name": "oea", "image": image, "env": {"KIT_OEA_K0": "2"}}],
        model={"path": str(model), "mount_at": "/models/tiny", "digest": True},
        server={"container_port": 8000, "ready_timeout_s": 180, "stop_grace_s": 10, "env": {"OMP_NUM_THREADS": "1"}},
        load={"levels": [4], "requests_per_level": 8, "warmup_requests": 2, "prompt_tokens": 16,
              "output_tokens": TOKENS, "seed": 5, "request_timeout_s": 60, "dialect": "transformers"},
        design={"repeats": 1},
        gates={"port_deadline_s": 5},
    )
    return write_manifest(MANIFEST_DIR / f"transformers-docker-{uuid.uuid4().hex[:6]}.yaml", data)


def test_transformers_image_serves_one_cell_per_arm(client: Any, transformers_base: str, tiny: Path,
                                                    tmp_path: Path) -> None:
    m = _manifest(transformers_base, tiny, free_port())
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}
    try:
        r = subprocess.run([sys.executable, "-m", "kit", "run", str(m), "--out", str(tmp_path / "r"),
                            "--allow-unsigned"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=900,
                           check=False)
    finally:
        m.unlink(missing_ok=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    (b,) = [p for p in (tmp_path / "r").iterdir() if p.is_dir()]
    images = json.loads((b / "images.json").read_text())
    assert set(images) == {"baseline", "oea"}
    for cell in ("baseline-r1", "oea-r1"):
        assert json.loads((b / f"cells/{cell}/cell.json").read_text())["status"] == "ok"
        assert json.loads((b / f"cells/{cell}/server.json").read_text())["runtime"] == "docker"
        recs = [json.loads(x) for x in (b / f"cells/{cell}/level-4/records.jsonl").read_text().splitlines()]
        assert len(recs) == 8
        assert all(x["client_tokens"] == x["usage_completion_tokens"] == TOKENS for x in recs)
    log = (b / "cells/oea-r1/server.log").read_text()
    assert "OEA k0=2 on 4 Qwen3-MoE routers, decode steps only" in log
    assert "OEA off (transformers unchanged)" in (b / "cells/baseline-r1/server.log").read_text()
    assert subprocess.run([sys.executable, "-m", "kit", "verify", str(b)], capture_output=True, cwd=ROOT, env=env,
                          timeout=300, check=False).returncode == 0
