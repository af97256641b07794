"""Fixtures of the docker tier: a real engine, kit's local base image, the engine image, sglang stand-ins.

The engine is started (``scripts/ensure-docker``) when none answers and the base image is built
(``scripts/build-base-image``, about 80 s on 2 cores) when it is missing; both are kept for later runs,
and so are the images built here (the builder's cache makes the next session fast). Every container
a test creates carries ``kit.run=<this session's id>``; at the end of the session none may be left.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_helpers import (
    BASE_IMAGE,
    DOCKER,
    ROOT,
    SESSION_RUN,
    SGLANG_VERSION,
    SITE,
    STANDIN_REPO,
    build_test_image,
    dockerfile_only,
    existing_image,
    load_virtual,
    run_cmd,
    sglang_wheel,
    standin_files,
    unavailable,
)
from support.manifests import manifest_data, manifest_yaml


@pytest.fixture(scope="session")
def client() -> Iterator[Any]:
    import docker

    try:
        c = docker.from_env(version="auto")
        c.ping()
    except Exception:  # noqa: BLE001 - any failure means: start an engine
        r = run_cmd([str(ROOT / "scripts" / "ensure-docker")], 300)
        if r.returncode != 0:
            unavailable(f"no Docker engine and ./scripts/ensure-docker failed: {r.stderr.strip()[-500:]}")
        c = docker.from_env(version="auto")
    before = {x.id for x in c.containers.list(all=True, filters={"label": "kit.managed=1"})}
    yield c
    left = c.containers.list(all=True, filters={"label": f"kit.run={SESSION_RUN}"})
    stray = [x for x in c.containers.list(all=True, filters={"label": "kit.managed=1"}) if x.id not in before]
    for x in {*left, *stray}:
        x.remove(force=True)
    assert not left and not stray, f"kit containers left behind: {[x.name for x in {*left, *stray}]}"


@pytest.fixture(scope="session")
def base_image(client: Any) -> str:
    r = run_cmd([str(ROOT / "scripts" / "build-base-image"), BASE_IMAGE], 900)
    if r.returncode != 0:
        unavailable(f"scripts/build-base-image failed: {r.stderr.strip()[-800:]}")
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("builds")


@pytest.fixture(scope="session")
def engine_image(client: Any, base_image: str, build_dir: Path) -> Any:
    """images/engine built by kit.images.build_images FROM the local base (pinned by image ID)."""
    from kit.images import build_images

    arms = [{"name": n, "image": {"context": "images/engine", "base": base_image}} for n in ("engine", "engine2")]
    lm = load_virtual(manifest_yaml(manifest_data("pytest-docker", arms=arms, **DOCKER)))
    infos = build_images(lm, run_id=SESSION_RUN, log_dir=build_dir / "engine", allow_unpinned=False, client=client)
    return infos["engine"]


# --------------------------------------------------------------------------- sglang stand-ins


@pytest.fixture(scope="session")
def sglang_standin(client: Any, base_image: str) -> str:
    """The local base plus the real sglang 0.5.23 sources (from the PyPI wheel) in site-packages, a minimal
    dist-info so that the version reads 0.5.23, and an empty ``torch`` module (the real image has torch;
    kit_oea only needs to import). Cached by wheel and base."""
    wheel = sglang_wheel()
    key = hashlib.sha256(f"{wheel.name}:{wheel.stat().st_size}:{base_image}:standin-v2".encode()).hexdigest()[:16]
    tag = f"{STANDIN_REPO}:{SGLANG_VERSION}"
    found = existing_image(client, tag, key)
    return found or build_test_image(client, standin_files(wheel, SGLANG_VERSION), tag, key, base_image)


@pytest.fixture(scope="session")
def sglang_standin_wrong(client: Any, sglang_standin: str) -> str:
    """The stand-in, but its metadata claims sglang 0.5.22."""
    tag = f"{STANDIN_REPO}:0.5.22-claim"
    key = hashlib.sha256(f"{sglang_standin}:wrong-v1".encode()).hexdigest()[:16]
    old, new = f"{SITE}/sglang-{SGLANG_VERSION}.dist-info", f"{SITE}/sglang-0.5.22.dist-info"
    dockerfile = ("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n"
                  f"RUN mv {old} {new} && sed -i 's/^Version: .*/Version: 0.5.22/' {new}/METADATA\n")
    found = existing_image(client, tag, key)
    return found or build_test_image(client, dockerfile_only(dockerfile), tag, key, sglang_standin)
