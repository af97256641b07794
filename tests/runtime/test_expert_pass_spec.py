"""The expert pass's server (kit.experiment.expert_pass.pass_spec): the arm's own server plus the recorder's
flags and dump folder; with the docker runtime that folder is a read-write bind mount of kit's own folder (the
container spec Docker gets), with the process runtime the folder itself."""

from __future__ import annotations

from pathlib import Path

from support.manifests import manifest_data, manifest_model

from kit.bundle import Bundle
from kit.experiment.cells import CellRunner
from kit.experiment.expert_pass import IN_CONTAINER, pass_spec
from kit.experiment.options import QuietEvents
from kit.plan import make_plan
from kit.runtime.docker import container_config
from kit.runtime.process import ProcessRuntime

PASS = {"top_k": 4, "server_args": ["--expert-distribution-recorder-mode", "per_pass", "--chunked-prefill-size",
                                    "-1"]}


def _runner(tmp_path: Path, **sections: object) -> CellRunner:
    m = manifest_model(manifest_data(expert_pass=PASS, **sections))
    return CellRunner(m, make_plan(m), Bundle(tmp_path / "b", "abc123"), ProcessRuntime(), QuietEvents(),
                      image_ids={"baseline": "sha256:" + "1" * 64})


def test_docker_pass_server_mounts_the_dump_folder_read_write(tmp_path: Path) -> None:
    image = {"context": "images/sglang", "base": "lmsysorg/sglang:v0@sha256:" + "2" * 64}
    cells = _runner(tmp_path, runtime="docker", command=["python3", "-m", "sglang.launch_server", "--port", "{port}"],
                    arms=[{"name": "baseline", "image": image}, {"name": "oea", "image": image}])
    (tmp_path / "b").mkdir()
    spec = pass_spec(cells, "baseline", tmp_path / "dump")
    assert spec.command[-4:] == PASS["server_args"] and spec.command[:3] == ["python3", "-m", "sglang.launch_server"]
    assert spec.env["SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"] == IN_CONTAINER
    assert spec.labels["kit.cell"] == "experts-baseline" and spec.name.endswith("-experts")
    mounts = [dict(mt) for mt in container_config(spec)["mounts"]]
    assert {"Target": IN_CONTAINER, "Source": str(tmp_path / "dump"), "Type": "bind", "ReadOnly": False} in [
        {k: mt[k] for k in ("Target", "Source", "Type", "ReadOnly")} for mt in mounts]
    assert spec.log_path == tmp_path / "b" / "experts" / "baseline" / "server.log"


def test_process_pass_server_dumps_into_kits_folder(tmp_path: Path) -> None:
    spec = pass_spec(_runner(tmp_path), "oea", tmp_path / "dump")
    assert spec.env["SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"] == str(tmp_path / "dump")
    assert spec.dump_mount is None and "--oea-k0" in spec.command
    assert spec.command[-4:] == PASS["server_args"]
