"""Which host paths a server may be given (``model.path``): never the host's system directories, the Docker
socket, the whole home directory, or kit's own key and trust directory; a command's {model_path} needs one, and
on the host that serves it, it must exist."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from kit.plumbing.procs import program_path

if TYPE_CHECKING:
    from kit.manifest.models import Manifest

# Host directories no mount may expose: the directory itself and everything under it.
SYSTEM_TREES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/dev", "/proc",
                "/sys", "/var/run", "/run", "/var/lib/docker")
# Host directories no mount may expose as a whole (a subdirectory, e.g. /root/models, is fine).
SYSTEM_DIRS = ("/", "/root", "/home", "/var", "/opt", "/srv", "/mnt", "/media", "/tmp")


def _kit_config_dirs() -> list[Path]:
    """Where kit keeps its keys and trust (``$XDG_CONFIG_HOME/kit``, ``~/.config/kit``)."""
    dirs = [Path.home() / ".config" / "kit", Path(os.path.expanduser("~")) / ".config" / "kit"]
    if os.environ.get("XDG_CONFIG_HOME"):
        dirs.append(Path(os.environ["XDG_CONFIG_HOME"]) / "kit")
    return dirs


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: judged as written, made absolute
        return Path(os.path.abspath(path))


def _within(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def host_path_problem(value: str) -> str | None:
    """Why mounting host path ``value`` into a server would expose the host, or None.

    ``..`` and symlinks are resolved where the path exists (a relative path is taken from the current
    directory, as Docker and the process runtime would); ``~`` is checked as the home directory too."""
    candidates = {Path(os.path.abspath(value)), _real(Path(value)), _real(Path(os.path.expanduser(value)))}
    homes = {_real(Path.home()), _real(Path(os.path.expanduser("~")))}
    keys = {_real(d) for d in _kit_config_dirs()}
    for p in sorted(candidates):
        shown = f"{value!r}" + (f" (resolves to {str(p)!r})" if str(p) != value else "")
        if p.name.endswith("docker.sock") or any(_within(p, Path(s)) for s in ("/var/run/docker.sock",
                                                                              "/run/docker.sock")):
            return f"{shown} is the Docker socket: whoever holds it is root on the host"
        top = next((t for t in SYSTEM_TREES if _within(p, Path(t))), None)
        if top is not None or str(p) in SYSTEM_DIRS:
            return f"{shown} is {'inside ' if top and str(p) != top else ''}the host's system directory {top or p}"
        if p in homes:
            return f"{shown} is the whole home directory (it holds kit's keys, ssh keys, tokens)"
        key = next((k for k in keys if _within(p, k) or _within(k, p)), None)
        if key is not None:
            return f"{shown} is or contains kit's runner key and trust directory {key}"
    return None


def check_model_placeholder(m: Manifest) -> None:
    """A command that passes {model_path} needs a model.path (without one, the server would get '' or an empty
    mount point)."""
    uses = [a.name for a in m.arms if any("{model_path}" in x for x in [*(a.command or m.server.command), *a.args])]
    if uses and m.model.path is None:
        raise ValueError(f"the command of arm(s) {', '.join(uses)} passes {{model_path}} but model.path is not set: "
                         "set model.path to the directory with the weights")


def missing_model_path(m: Manifest) -> str | None:
    """What is wrong when model.path does not exist here (relative paths are taken from the current directory, as
    the runtimes take them), or None."""
    path = m.model.path
    if path is None or os.path.exists(os.path.expanduser(path)):
        return None
    full = os.path.abspath(os.path.expanduser(path))
    return f"model.path {path!r}{f' ({full})' if full != path else ''} does not exist on this host"


def missing_programs(m: Manifest) -> list[str]:
    """What is wrong with each server program a process-runtime arm would be started with here (its own command, or
    server.command where it has none): not on the PATH its server gets (the arm's or server.env's PATH, else kit's:
    the shim looks it up there), or no executable file (a path: ``~`` expanded, a relative one from the current
    directory, as kit starts it). A placeholder ({python}) is kit's own."""
    out: dict[str, str] = {}
    for arm in m.arms:
        command = arm.command or m.server.command
        program = command[0] if command else ""
        if not program or "{" in program:
            continue
        path = arm.env.get("PATH") or m.server.env.get("PATH") or os.environ.get("PATH", os.defpath)
        full = program_path(program)
        if "/" not in full:  # a bare name
            if shutil.which(program, path=path) is None:
                out.setdefault(program, f"server program {program!r} is not on the PATH its server gets ({path})")
            continue
        if not (os.path.isfile(full) and os.access(full, os.X_OK)):
            out.setdefault(program, f"server program {program!r}{f' ({full})' if full != program else ''} is no "
                                    "executable file on this host")
    return list(out.values())
