"""Helpers of the docker tier (constants, virtual manifests, stand-in builds, one-off containers)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.manifests import engine_command
from support.ports import free_port

from kit.runtime import ServerSpec

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = os.environ.get("KIT_BASE_IMAGE", "kit-local/python:bookworm")
SESSION_RUN = f"pytest-{uuid.uuid4().hex[:8]}"
SGLANG_VERSION = "0.5.23"
WHEEL_CACHE = Path(os.environ.get("KIT_TEST_CACHE", Path.home() / ".cache" / "kit-test"))
STANDIN_REPO = "kit-test/sglang-standin"
SITE = "/usr/local/lib/python3.11/dist-packages"
# Small engine: starts in well under a second.
# The manifest of the image tests: the docker runtime, the engine's command without the small-model args.
DOCKER = {"runtime": "docker", "served_name": "kit-moe", "command": engine_command("python3", ())}
ENGINE_ARGS = ["--experts", "8", "--top-k", "2", "--layers", "1", "--hidden", "32", "--expert-ffn", "32",
               "--vocab", "64", "--served-name", "kit-moe"]


def run_cmd(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"docker tier: {why}")
    pytest.skip(f"docker tier: {why}")


def load_virtual(raw: bytes, *, root: Path = ROOT, allow_unpinned: bool = False) -> Any:
    """A LoadedManifest whose project root is ``root`` (the file itself need not exist)."""
    from kit.manifest import load_manifest

    return load_manifest(root / "experiments" / "virtual.yaml", raw, allow_unpinned=allow_unpinned)


def sglang_wheel() -> Path:
    wheels = sorted(WHEEL_CACHE.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if wheels:
        return wheels[0]
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    r = run_cmd([sys.executable, "-m", "pip", "download", "--no-deps", "-q", f"sglang=={SGLANG_VERSION}",
              "-d", str(WHEEL_CACHE)], 600)
    wheels = sorted(WHEEL_CACHE.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if not wheels:
        unavailable(f"cannot download the sglang {SGLANG_VERSION} wheel: {r.stderr.strip()[-500:]}")
    return wheels[0]


def existing_image(client: Any, tag: str, key: str) -> str | None:
    from docker.errors import ImageNotFound

    try:
        img = client.images.get(tag)
    except ImageNotFound:
        return None
    return str(img.id) if img.labels.get("kit.test.key") == key else None


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def build_test_image(client: Any, files: Callable[[tarfile.TarFile], None], tag: str, key: str, base: str) -> str:
    """Build a test image (labelled kit.test, not kit.managed) from a context tar written by ``files``."""
    with tempfile.TemporaryFile() as f:
        with tarfile.open(fileobj=f, mode="w") as tar:
            files(tar)
        f.seek(0)
        stream = client.api.build(fileobj=f, custom_context=True, tag=tag, buildargs={"BASE_IMAGE": base},
                                  pull=False, rm=True, forcerm=True, decode=True, use_config_proxy=False,
                                  labels={"kit.test": "1", "kit.test.key": key})
        log = []
        for item in stream:
            log.append(str(item.get("stream") or item.get("error") or ""))
            if "error" in item:
                pytest.fail(f"building {tag} failed: {item['error']}\n{''.join(log[-20:])}")
    return str(client.images.get(tag).id)


def standin_files(wheel: Path, version: str) -> Callable[[tarfile.TarFile], None]:
    """The stand-in's context: the wheel's sglang/ under site/, a minimal dist-info, an empty torch."""

    def write(tar: tarfile.TarFile) -> None:
        add_bytes(tar, "Dockerfile", f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\nCOPY site/ {SITE}/\n".encode())
        with zipfile.ZipFile(wheel) as z:
            for member in z.infolist():
                if member.filename.startswith("sglang/") and not member.is_dir():
                    with z.open(member) as src:
                        add_bytes(tar, f"site/{member.filename}", src.read())
        meta = f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n".encode()
        add_bytes(tar, f"site/sglang-{version}.dist-info/METADATA", meta)
        add_bytes(tar, "site/torch/__init__.py", b'"""Empty stand-in: kit\'s test image has no torch."""\n')

    return write


def dockerfile_only(text: str) -> Callable[[tarfile.TarFile], None]:
    return lambda tar: add_bytes(tar, "Dockerfile", text.encode())


def run_once(client: Any, image: str, command: list[str]) -> tuple[int, str]:
    """Run a one-off command in ``image`` (labelled, removed afterwards); (exit code, output)."""
    c = client.containers.create(image, command, labels={"kit.managed": "1", "kit.run": SESSION_RUN})
    try:
        c.start()
        code = int(c.wait(timeout=120)["StatusCode"])
        return code, c.logs().decode("utf-8", "replace")
    finally:
        c.remove(force=True)


def make_spec(tmp_path: Path, image: str, name: str, **kw: Any) -> ServerSpec:
    port = kw.pop("port", None) or free_port()
    values: dict[str, Any] = {
        "name": f"kit-{SESSION_RUN}-{name}",
        "arm": "baseline",
        "command": ["python3", "-m", "kit.engine", "--host", "0.0.0.0", "--port", "8000", *ENGINE_ARGS],
        "env": {"KIT_TEST": "1"},
        "secret_env": {},
        "host": "127.0.0.1",
        "port": port,
        "readiness_path": "/health",
        "ready_timeout_s": 60.0,
        "stop_grace_s": 5.0,
        "log_path": tmp_path / f"{name}.log",
        "labels": {"kit.run": SESSION_RUN, "kit.experiment": "pytest", "kit.arm": "baseline", "kit.repeat": "1",
                   "kit.cell": "baseline-r1"},
        "image": image,
        "container_port": 8000,
        "extra": {},  # no GPUs: no ulimits (this sandbox's dockerd cannot raise RLIMIT_MEMLOCK)
    }
    values.update(kw)
    return ServerSpec(**values)


def names_left(client: Any, spec: ServerSpec) -> list[str]:
    return [c.name for c in client.containers.list(all=True, filters={"name": spec.name})]
