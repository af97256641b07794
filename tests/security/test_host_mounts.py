"""A manifest cannot reach the host unseen: model.path that exposes the host (/, system directories, the
Docker socket, kit's key directory, $HOME) and GPU-selecting variables in env or pass_env are refused at
validation, exit 3, naming the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from support.manifests import manifest_data, write_manifest

from kit.cli import main
from kit.errors import ManifestError
from kit.server_spec import resolved_mount_source

FIX = "Give the directory that holds only the model's weights"


def _validate(tmp_path: Path, env: dict[str, str] | None = None, **sections: object) -> tuple[int, str]:
    path = write_manifest(tmp_path / "m.yaml", manifest_data(**sections))
    res = CliRunner().invoke(main, ["validate", str(path)], env=env)
    return res.exit_code, res.output


@pytest.mark.parametrize(("path", "why"), [
    ("/", "is the host's system directory /"),
    ("/etc", "is the host's system directory /etc"),
    ("/usr/lib/x86_64-linux-gnu", "is inside the host's system directory /usr"),
    ("/proc/self/root", "system directory"),
    ("/var/run/docker.sock", "is the Docker socket"),
    ("/run/docker.sock", "is the Docker socket"),
    ("/home/someone/.docker/run/docker.sock", "is the Docker socket"),
    ("/models/../etc", "resolves to '/etc'"),
    ("/lib64", "system directory"),
    ("/boot", "system directory"),
])
def test_host_paths_are_refused(tmp_path: Path, path: str, why: str) -> None:
    code, out = _validate(tmp_path, model={"served_name": "m", "path": path})
    assert code == 3, out
    assert "model.path" in out and why in out and FIX in out and "Traceback" not in out


def test_symlink_to_root_is_resolved_and_refused(tmp_path: Path) -> None:
    link = tmp_path / "weights"
    link.symlink_to("/")
    code, out = _validate(tmp_path, model={"served_name": "m", "path": str(link)})
    assert code == 3 and f"'{link}' (resolves to '/') is the host's system directory /" in out


def test_home_and_kit_key_directory_are_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".config" / "kit").mkdir(parents=True)
    (home / "models" / "m").mkdir(parents=True)
    env = {"HOME": str(home), "XDG_CONFIG_HOME": ""}
    for path, why in [(home, "is the whole home directory"), (home / ".config", "is or contains kit's runner key"),
                      (home / ".config/kit", "is or contains kit's runner key"),
                      (home / "models/../.config/kit/x", "is or contains kit's runner key")]:
        code, out = _validate(tmp_path, env, model={"served_name": "m", "path": str(path)})
        assert code == 3 and why in out and "model.path" in out, (path, out)
    code, out = _validate(tmp_path, env, model={"served_name": "m", "path": str(home / "models/m")})
    assert code == 0, out


def test_xdg_config_kit_directory_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "kit").mkdir(parents=True)
    code, out = _validate(tmp_path, {"XDG_CONFIG_HOME": str(conf)}, model={"served_name": "m", "path": str(conf)})
    assert code == 3 and f"kit's runner key and trust directory {conf / 'kit'}" in out


def test_home_itself_without_kit_config_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "bare-home"
    home.mkdir()
    code, out = _validate(tmp_path, {"HOME": str(home), "XDG_CONFIG_HOME": ""},
                          model={"served_name": "m", "path": str(home)})
    assert code == 3 and "is the whole home directory" in out


@pytest.mark.parametrize(("sections", "where"), [
    ({"server": {"env": {"CUDA_VISIBLE_DEVICES": "0"}}}, "server.env"),
    ({"server": {"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}}, "server.env"),
    ({"server": {"env": {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}}}, "server.env"),
    ({"server": {"pass_env": ["CUDA_VISIBLE_DEVICES"]}}, "server.pass_env"),
    ({"arms": [{"name": "a"}, {"name": "b", "env": {"CUDA_VISIBLE_DEVICES": "1"}}]}, "arms[1].env"),
    ({"arms": [{"name": "a", "env": {"NVIDIA_VISIBLE_DEVICES": "0"}}, {"name": "b"}]}, "arms[0].env"),
])
def test_gpu_selection_in_env_is_refused(tmp_path: Path, sections: dict[str, object], where: str) -> None:
    code, out = _validate(tmp_path, **sections)
    assert code == 3, out
    assert where in out and "would override the GPUs kit checked" in out and "hardware.gpus" in out


def test_kit_variables_in_pass_env_are_refused(tmp_path: Path) -> None:
    code, out = _validate(tmp_path, server={"pass_env": ["HF_TOKEN", "KIT_KEY_PASSPHRASE"]})
    assert code == 3 and "server.pass_env" in out and "KIT_KEY_PASSPHRASE: kit's own variables" in out


def test_loader_variables_are_accepted(tmp_path: Path) -> None:
    code, out = _validate(tmp_path, server={"env": {"LD_PRELOAD": "/opt/libtcmalloc.so"}})
    assert code == 0, out


def test_model_path_swapped_for_a_symlink_after_validation_is_refused_at_start(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """model.path is resolved and checked again when each cell's server spec is made (just before its container
    is created), and the resolved path is what Docker mounts: a later swap to a symlink cannot expose kit's keys."""
    config = tmp_path / "config"
    (config / "kit").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    models = tmp_path / "shared" / "models"
    models.mkdir(parents=True)
    assert resolved_mount_source(str(models)) == str(models.resolve())
    models.rename(tmp_path / "shared" / "models.real")
    models.symlink_to(config / "kit")
    with pytest.raises(ManifestError, match=r"now resolves to .*runner key"):
        resolved_mount_source(str(models))
