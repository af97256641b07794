"""`kit plan` shows everything an arm's server touches on the host, in text and --json, for docker arms too;
pass_env is shown by name, never by value; loader variables (LD_PRELOAD, ...) are flagged, not refused."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from support.manifests import manifest_data, write_manifest

from kit.cli import main

ROOT = Path(__file__).resolve().parents[2]
OEA = str(ROOT / "experiments" / "oea.yaml")
SECRET = "hf_plan_secret_value_123"


def test_plan_text_shows_host_exposure_for_every_docker_arm() -> None:
    res = CliRunner().invoke(main, ["plan", OEA], env={"HF_TOKEN": SECRET})
    assert res.exit_code == 0, res.output
    text = res.output
    blocks = text.split("  arm ")[1:4]
    assert [b.split(" ", 1)[0] for b in blocks] == ["baseline", "oea", "oea-k8"]
    for block in blocks:
        assert "command: python3 -m sglang.launch_server --model-path /model --served-model-name glm-5-nvfp4" in block
        assert "mount: /models/GLM-5-NVFP4 -> /model (ro)" in block
        assert "ipc: host" in block and "! ipc_host: the server shares the host's IPC namespace" in block
        assert "published: 127.0.0.1:30000 -> container port 30000" in block
        assert "env: HF_HUB_OFFLINE=1" in block and "NVIDIA_VISIBLE_DEVICES=<UUIDs of the gated GPUs>" in block
        assert "pass_env (names only" in block and block.split("pass_env")[1].splitlines()[0].endswith("HF_TOKEN")
        assert "gpus: 8 GPU(s) of compute capability 12.0 that pass the GPU gate" in block
        assert "privileges: user the image's USER" in block and "'memlock': -1" in block
    assert "SGLANG_OEA_K0=0" in blocks[0] and "SGLANG_OEA_K0=4" in blocks[1] and "SGLANG_OEA_K0=8" in blocks[2]
    assert "images/sglang FROM lmsysorg/sglang" in blocks[0] and "images/oea FROM image of arm baseline" in blocks[1]
    assert SECRET not in text


def test_plan_json_has_server_and_host_per_arm_without_secret_values() -> None:
    res = CliRunner().invoke(main, ["plan", OEA, "--json"], env={"HF_TOKEN": SECRET})
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["server"]["pass_env"] == ["HF_TOKEN"] and doc["server"]["ipc_host"] is True
    assert [h["arm"] for h in doc["host"]] == ["baseline", "oea", "oea-k8"]
    for h in doc["host"]:
        assert h["command"][:3] == ["python3", "-m", "sglang.launch_server"] and "{port}" not in " ".join(h["command"])
        assert h["mounts"] == [{"source": "/models/GLM-5-NVFP4", "target": "/model", "mode": "ro"}]
        assert h["ipc"] == "host" and h["network"].startswith("bridge")
        assert h["published"] == [{"host": "127.0.0.1", "port": 30000, "container_port": 30000}]
        assert h["env"]["HF_HUB_OFFLINE"] == "1" and h["pass_env"] == ["HF_TOKEN"]
        assert h["image"]["context"] in ("images/sglang", "images/oea")
        assert h["privileges"]["privileged"] is False
    assert SECRET not in res.output


def test_plan_flags_loader_env_and_all_interfaces(tmp_path: Path) -> None:
    data = manifest_data(server={"env": {"LD_PRELOAD": "/opt/evil.so"}, "pass_env": ["LD_LIBRARY_PATH"],
                                 "host": "0.0.0.0"})
    path = write_manifest(tmp_path / "m.yaml", data)
    res = CliRunner().invoke(main, ["plan", str(path)])
    assert res.exit_code == 0, res.output
    assert "! LD_PRELOAD='/opt/evil.so' in env changes what code the server loads" in res.output
    assert "! LD_LIBRARY_PATH is passed through from your environment" in res.output
    assert "! port 18080 is reachable from other machines (bound to 0.0.0.0, all interfaces)" in res.output
    assert "from your environment (when set): PATH HOME LANG TMPDIR TZ USER LC_*" in res.output
    doc = json.loads(CliRunner().invoke(main, ["plan", str(path), "--json"]).output)
    assert doc["host"][0]["env"]["LD_PRELOAD"] == "/opt/evil.so"
    assert any("LD_PRELOAD" in w for w in doc["host"][0]["warnings"])
