"""A base image made from this machine's own Python, without a registry: the parts of / a Python needs (its
interpreter, standard library and site-packages with torch/triton/transformers, the system's programs and
shared libraries, a few files of /etc) as one tar, then `docker import` through the Docker SDK. The NVIDIA
driver is left out (the container gets the host's, mounted by kit's `devices` GPU mode), and so are secrets:
of /etc only the files a program needs to start are taken, never the whole folder.

    python3 benchmarks/host_python_image.py TAR                 write the root filesystem tar (prints its size)
    python3 benchmarks/host_python_image.py TAR --import NAME:TAG   ... and import it: prints the image ID

DOCKER_HOST names the engine. Used by benchmarks/h200_docker.sh on the H200 machine; tested here with this
machine's Python (tests/docker/test_host_python_image.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

SYSTEM = ["/bin", "/sbin", "/lib", "/lib64", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/libexec",
          "/usr/include", "/usr/local/bin", "/usr/local/lib", "/usr/local/include", "/usr/share/zoneinfo"]
ETC = ["passwd", "group", "nsswitch.conf", "ld.so.conf", "ld.so.conf.d", "ld.so.cache", "os-release",
       "debian_version", "alternatives", "localtime", "mime.types", "ssl/openssl.cnf"]
# never into the image: the driver (mounted from the host at run time), docs, caches, this repository's .pth
EXCLUDE = ["usr/local/nvidia", "usr/local/cuda*", "usr/lib/x86_64-linux-gnu/libcuda.so*",
           "usr/lib/x86_64-linux-gnu/libnvidia-*", "usr/lib/x86_64-linux-gnu/libcudadebugger*",
           "usr/lib/x86_64-linux-gnu/nvidia", "usr/bin/nvidia-*", "*/kit-dev.pth", "*/__pycache__/*.pyc.*",
           "usr/share/doc", "usr/share/man", "usr/lib/jvm", "usr/lib/firmware", "lib/firmware",
           "usr/lib/modules", "lib/modules"]
EMPTY = {"tmp": 0o1777, "var/tmp": 0o1777, "root": 0o700, "home": 0o755, "run": 0o755, "opt": 0o755,
         "mnt": 0o755}
MAX_BYTES = 40 << 30  # refuse a root filesystem larger than this (the disk and the time it takes)


def python_paths() -> list[str]:
    """The interpreter (and the links to it), its standard library, and every site-packages it reads."""
    exe = Path(sys.executable)
    paths = {str(exe), str(exe.resolve()), str(Path(sys.base_prefix) / "bin")}
    for scheme in sysconfig.get_paths().values():
        paths.add(scheme)
    paths.update(site.getsitepackages())
    paths.update(shared_libraries(exe.resolve()))
    if sys.prefix != sys.base_prefix:  # a virtual environment: its pyvenv.cfg makes its python use its packages
        paths.add(str(Path(sys.prefix) / "pyvenv.cfg"))
    for p in sys.path:
        if os.path.isabs(p) and os.path.isdir(p) and not p.startswith(("/tmp", "/home", "/root", str(Path.cwd()))):
            paths.add(p)
    return sorted(p for p in paths if os.path.exists(p))


def shared_libraries(exe: Path) -> set[str]:
    """What the interpreter loads (ldd): its own libpython may live beside it (a RUNPATH), not in /usr/lib."""
    r = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, check=False)
    out = set()
    for line in r.stdout.splitlines():
        path = line.split("=>")[-1].strip().split(" (")[0]
        if path.startswith("/") and os.path.exists(path):
            out.update({path, os.path.realpath(path)})
    return out


def members() -> list[str]:
    """Absolute paths that go into the tar, as they exist here (symlinked /bin and friends stay links)."""
    etc = [f"/etc/{n}" for n in ETC]
    # a path through a symlinked folder (/lib/x86_64-linux-gnu/libc.so.6 where /lib -> usr/lib) as its real path
    spelled = [os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p)) for p in python_paths()]
    found = [p for p in dict.fromkeys([*SYSTEM, *etc, *spelled]) if os.path.lexists(p)]
    # a path inside another one (site-packages inside /usr/local/lib, the interpreter inside its prefix) would be
    # stored twice, which docker import refuses; a symlinked folder (/lib -> usr/lib) is stored as the link
    dirs = [q.rstrip("/") + "/" for q in found if os.path.isdir(q) and not os.path.islink(q)]
    return [p for p in found if not any(p.startswith(q) for q in dirs if q != p.rstrip("/") + "/")]


def write_tar(tar: Path) -> int:
    paths = [p.lstrip("/") for p in members()]
    part = tar.with_name(tar.name + ".part")
    empty = Path(tempfile.mkdtemp(prefix="kit-rootfs-"))  # the folders a root filesystem has, empty
    for d, mode in EMPTY.items():
        (empty / d).mkdir(parents=True, exist_ok=True)
        # a Python kept under /root (pyenv) must be reachable by the image's USER (images/transformers: 65534)
        (empty / d).chmod(0o755 if d == "root" and any(p.startswith("root/") for p in paths) else mode)
    cmd = ["tar", "--create", "--file", str(part), "--numeric-owner", "--hard-dereference", "--ignore-failed-read",
           "--warning=no-file-changed", *(f"--exclude={e}" for e in EXCLUDE), "--directory", str(empty), *EMPTY,
           "--directory", "/", *paths]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    shutil.rmtree(empty)
    if r.returncode not in (0, 1):  # 1: a file changed as it was read
        raise SystemExit(f"tar failed ({r.returncode}): {r.stderr[-2000:]}")
    part.rename(tar)
    size = tar.stat().st_size
    print(json.dumps({"tar": str(tar), "bytes": size, "seconds": round(time.monotonic() - t0, 1),
                      "python": sys.version.split()[0], "executable": sys.executable, "members": paths}),
          file=sys.stderr)
    if size > MAX_BYTES:
        raise SystemExit(f"{tar}: {size} bytes is more than {MAX_BYTES}: refusing to import it")
    return size


def import_tar(tar: Path, ref: str) -> str:
    import docker  # the SDK, as kit uses it (DOCKER_HOST)

    repo, _, tag = ref.partition(":")
    client = docker.from_env(version="auto", timeout=1800)
    py = sys.executable
    changes = [
        f"ENV PATH={Path(py).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        f'CMD ["{py}"]',
        "LABEL kit.base=1",
        f"LABEL org.opencontainers.image.description=host-python-{sys.version.split()[0]}",
    ]
    t0 = time.monotonic()
    out = client.api.import_image(src=str(tar), repository=repo, tag=tag or "latest", changes=changes)
    image = client.images.get(ref if tag else f"{repo}:latest")
    print(json.dumps({"import": ref, "id": image.id, "seconds": round(time.monotonic() - t0, 1),
                      "engine_said": str(out)[-300:]}), file=sys.stderr)
    return str(image.id)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tar", type=Path)
    ap.add_argument("--import", dest="ref", help="NAME:TAG to import the tar as (prints the image ID)")
    args = ap.parse_args()
    if not args.tar.exists():
        write_tar(args.tar)
    if args.ref:
        print(import_tar(args.tar, args.ref))


if __name__ == "__main__":
    main()
