"""A compose file with the same servers as a docker manifest, to run one arm by hand.

One service per arm, each in its own profile (``docker compose --profile baseline up``), with the
command line kit itself runs (the placeholders resolved by ``kit.server_spec``), the same
environment (pass-through names listed without values), GPU reservations, shared memory or host
IPC, ulimits, port, read-only model mount, init, stop grace, labels and a healthcheck on the
readiness path. Paths are relative to the project root, where the file belongs.

An arm built FROM another arm's image (``base_arm``) gets that arm's compose image as BASE_IMAGE:
build the base arm first, as kit does. A context with a ``kit.include`` file is built from the
project root (which holds the included paths at the same relative paths) with the context's
Dockerfile.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Literal

import yaml

from kit.errors import ServerError, UsageError
from kit.images import INCLUDE_FILE, ZERO_DIGEST, repo_name
from kit.manifest import Arm, LoadedManifest, Manifest
from kit.plan import Cell
from kit.runtime.docker import DEFAULT_ULIMITS, MANAGED_LABEL
from kit.runtime.docker.gpus import gpu_args
from kit.server_spec import server_spec

COMPOSE_TAG = "compose"


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path.resolve(), start.resolve())).as_posix()


def _image_name(m: Manifest, arm: str) -> str:
    return f"{repo_name(m.name, arm)}:{COMPOSE_TAG}"


def _build(lm: LoadedManifest, arm: Arm, base_dir: Path) -> dict[str, object]:
    m = lm.manifest
    assert arm.image is not None
    ctx = lm.project_root / arm.image.context
    base = arm.image.base if arm.image.base is not None else _image_name(m, str(arm.image.base_arm))
    build: dict[str, object] = {"context": _rel(ctx, base_dir), "dockerfile": arm.image.dockerfile}
    if (ctx / INCLUDE_FILE).is_file():
        build["context"] = _rel(lm.project_root, base_dir)
        build["dockerfile"] = f"{arm.image.context.rstrip('/')}/{arm.image.dockerfile}"
    build["args"] = {**arm.image.build_args, "BASE_IMAGE": base}
    build["labels"] = {MANAGED_LABEL: "1", "kit.experiment": m.name, "kit.arm": arm.name}
    return build


def _gpu_ids(m: Manifest) -> list[str] | Literal["all"]:
    """The GPUs a run would pass: the manifest's indices, else the first ``hardware.gpus`` (docker's count N)."""
    if m.hardware.gpus == "all":
        return "all"
    return [str(i) for i in m.hardware.gpu_selection() or range(int(m.hardware.gpus))]


def _gpus(m: Manifest) -> tuple[dict[str, object], list[str], list[str]]:
    """(service fields, environment, read-only volumes) for hardware.gpus in server.docker_gpus.mode, as kit
    passes them (kit.runtime.docker.gpus): nvidia a device reservation; cdi CDI names in ``devices`` (the
    compose spec's CDI syntax); devices this host's device nodes, its driver folder read-only and the environment
    that finds it (so the file is made on the GPU machine)."""
    mode = m.server.docker_gpus.mode
    if m.hardware.gpus == 0:
        return {}, ["NVIDIA_VISIBLE_DEVICES=void"], []
    ids = _gpu_ids(m)
    if mode == "nvidia":
        which = {"count": "all"} if ids == "all" else {"device_ids": ids} if m.hardware.gpu_selection() else {
            "count": len(ids)}
        device = {"driver": "nvidia", **which, "capabilities": ["gpu"]}
        env = ["NVIDIA_VISIBLE_DEVICES=all"] if ids == "all" else []
        return {"deploy": {"resources": {"reservations": {"devices": [device]}}}}, env, []
    try:
        args = gpu_args(mode, ids, m.server.docker_gpus.driver_dir)
    except ServerError as e:
        raise UsageError(f"kit compose, server.docker_gpus.mode {mode}: {e.message}",
                         hint="the devices mode reads this host's NVIDIA driver (device minors, driver folder): "
                         "generate the compose file on the GPU machine") from None
    fields: dict[str, object] = {"devices": list(args.devices)}
    if mode == "cdi":
        fields["devices"] = [n for r in args.device_requests for n in r["DeviceIDs"]]
    volumes = [f"{mt['Source']}:{mt['Target']}:ro" for mt in args.mounts]
    return fields, [f"{k}={v}" for k, v in args.environment.items()], volumes


def _healthcheck(port: int, path: str, start_s: float, scheme: str = "http") -> dict[str, object]:
    # urlopen raises on anything but 2xx, so the exit status is the answer. https: a liveness probe of the
    # container's own loopback, which the CA file (on the host) cannot verify: kit's own probe verifies it
    tls = ", context=__import__('ssl')._create_unverified_context()" if scheme == "https" else ""
    probe = f"import urllib.request as u; u.urlopen('{scheme}://127.0.0.1:{port}{path}', timeout=5{tls})"
    return {
        "test": ["CMD", "python3", "-c", probe],
        "interval": "10s",
        "timeout": "10s",
        "retries": 3,
        "start_period": f"{int(start_s)}s",
    }


def _service(lm: LoadedManifest, arm: Arm, base_dir: Path) -> dict[str, object]:
    m = lm.manifest
    spec = server_spec(m, Cell(0, arm.name, 1), COMPOSE_TAG, Path(os.devnull))
    cport = spec.container_port or spec.port
    gpu_fields, gpu_env, gpu_volumes = _gpus(m)
    env = [f"{k}={v}" for k, v in spec.env.items()] + gpu_env
    env += list(m.server.pass_env)  # passed through from the caller's environment, no value written
    svc: dict[str, object] = {
        "profiles": [arm.name],
        "image": _image_name(m, arm.name),
        "build": _build(lm, arm, base_dir),
        "command": list(spec.command),
        "environment": env,
        "ports": [f"{spec.host}:{spec.port}:{cport}"],
        "init": True,
        "stop_signal": "SIGTERM",
        "stop_grace_period": f"{int(spec.stop_grace_s)}s",
        "labels": {MANAGED_LABEL: "1", "kit.run": COMPOSE_TAG, "kit.experiment": m.name, "kit.arm": arm.name},
        "healthcheck": _healthcheck(cport, spec.readiness_path, spec.ready_timeout_s, spec.scheme),
    }
    if spec.ipc_host:
        svc["ipc"] = "host"
    elif spec.shm_size:
        svc["shm_size"] = spec.shm_size
    volumes = [f"{spec.model_mount[0]}:{spec.model_mount[1]}:ro"] if spec.model_mount is not None else []
    if volumes + gpu_volumes:
        svc["volumes"] = volumes + gpu_volumes
    if gpu_fields and m.server.docker_gpus.ulimits:  # with GPUs, as kit does (kit.runtime.docker.ulimit_config)
        svc["ulimits"] = dict(DEFAULT_ULIMITS)
    return {**svc, **gpu_fields}


def render_compose(lm: LoadedManifest, *, base_dir: Path | None = None) -> str:
    """The compose file's text for a docker manifest; paths relative to ``base_dir`` (the project root)."""
    m = lm.manifest
    if m.runtime != "docker":
        raise UsageError(f"{lm.path}: runtime is {m.runtime!r}; `kit compose` needs a docker manifest")
    root = base_dir or lm.project_root
    source = _rel(lm.path, lm.project_root)
    services = {arm.name: _service(lm, arm, root) for arm in m.arms}
    first = m.arms[0].name
    header = [
        f"# Generated by `kit compose {source}` (manifest sha256 {hashlib.sha256(lm.raw).hexdigest()}).",
        "# Do not edit by hand: change the manifest and generate this file again.",
        f"# One service per arm, each in its own profile: `docker compose --profile {first} up --build`"
        " (or docker-compose 1.29).",
        "# The command lines, environment, GPUs, shared memory, ulimits, port and model mount are the ones kit uses;",
        f"# pass-through variables ({', '.join(m.server.pass_env) or 'none'}) are read from your environment.",
    ]
    if any(a.image is not None and a.image.base and a.image.base.endswith(ZERO_DIGEST) for a in m.arms):
        header.append(f"# A base digest is the all-zeros placeholder: `kit lock {source}`, sign, and generate again.")
    for a in m.arms:
        if a.image is not None and a.image.base_arm:
            header.append(f"# The {a.name} image builds FROM the {a.image.base_arm} image, as in kit: build that first "
                          f"(`docker compose --profile {a.image.base_arm} build`).")
    body = yaml.safe_dump({"services": services}, sort_keys=False, default_flow_style=None, width=120)
    return "\n".join(header) + "\n" + body
