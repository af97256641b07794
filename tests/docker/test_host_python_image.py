"""benchmarks/host_python_image.py, the H200 base image's root filesystem: what goes into the tar (no path twice,
which `docker import` refuses; the driver and the repository's .pth never; the empty folders a root filesystem has),
read back with tarfile. The whole step (this machine's Python imported into a scratch dockerd) is
`benchmarks/h200_docker.sh engine-check`."""

from __future__ import annotations

import importlib.util
import sys
import sysconfig
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("host_python_image", ROOT / "benchmarks" / "host_python_image.py")
    assert spec is not None and spec.loader is not None
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_members_hold_this_python_once() -> None:
    h = module()
    found = h.members()
    def covered(path: str) -> bool:
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in found)

    assert covered(sysconfig.get_paths()["stdlib"]) and covered(sysconfig.get_paths()["purelib"])
    assert covered(str(Path(sys.executable).resolve()))
    dirs = [p for p in found if Path(p).is_dir() and not Path(p).is_symlink()]
    inside = [(p, q) for p in found for q in dirs if p != q and p.startswith(q.rstrip("/") + "/")]
    assert inside == []
    assert "/etc/shadow" not in found and "/etc" not in found  # only the named files of /etc


def test_tar_leaves_out_the_driver_and_has_a_root_filesystems_folders(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    h = module()
    fake = tmp_path / "root"
    for rel in ["usr/lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/libcuda.so.1",
                "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "usr/local/nvidia/lib64/libcuda.so.1",
                "usr/local/lib/python3.12/site-packages/torch/__init__.py",
                "usr/local/lib/python3.12/site-packages/kit-dev.pth", "usr/bin/nvidia-smi", "usr/bin/python3"]:
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(rel)
    # the tar is made with paths relative to /: point the members at the fake tree instead
    monkeypatch.setattr(h, "members", lambda: [str(fake / "usr")])
    monkeypatch.setattr(h, "EXCLUDE", [f"{str(fake).lstrip('/')}/{e}" for e in h.EXCLUDE])
    out = tmp_path / "rootfs.tar"
    h.write_tar(out)
    with tarfile.open(out) as t:
        names = [m.name.removeprefix(str(fake).lstrip("/") + "/") for m in t.getmembers()]
        modes = {m.name: m.mode for m in t.getmembers() if m.isdir()}
    assert len(names) == len(set(names))
    assert "usr/lib/x86_64-linux-gnu/libc.so.6" in names and "usr/bin/python3" in names
    assert "usr/local/lib/python3.12/site-packages/torch/__init__.py" in names
    left_out = ["libcuda.so.1", "libnvidia-ml.so.1", "nvidia-smi", "kit-dev.pth", "usr/local/nvidia"]
    assert [n for n in names if any(n.endswith(x) or x + "/" in n for x in left_out)] == []
    assert modes["tmp"] == 0o1777 and modes["var/tmp"] == 0o1777 and modes["root"] == 0o700
