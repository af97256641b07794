"""Whether a valid manifest can run, and run here: only a template pins a placeholder digest, and a template never
runs; model.path must exist on the host that serves it. ``kit validate``, ``kit plan`` and ``kit sign`` refuse
placeholder digests (``refuse_placeholders``), validate and plan ask ``on_this_host`` (errors for what would fail
here, notes for what only the nodes can check); ``kit run`` and ``kit submit`` ask ``check_runnable`` before anything
starts (kit submit on the host it submits from: a docker or process manifest's model.path must be there too).
Loading itself refuses none of this: `kit lock` must read a placeholder to replace it, and a bundle's manifest is
read on machines without its model."""

from __future__ import annotations

from kit import safeyaml
from kit.errors import ManifestError, ModelPathMissing
from kit.manifest.hostpaths import missing_model_path, missing_programs
from kit.manifest.loading import LoadedManifest, is_placeholder_digest
from kit.manifest.workload import PIN_HINT, Problem, ca_problem, dataset_file_bound, file_problem

MADE_REAL = ("pin every base by its real digest (`kit lock {path}` where the registry is reachable), give model.path "
             "as it is on the machine that runs it, remove `template: true`, and sign it again (`kit sign {path} --key "
             "KEY`)")


def refuse_placeholders(lm: LoadedManifest) -> None:
    """A base pinned by a placeholder digest (all zeros, one character, a short repeat) is a template's only:
    elsewhere exit 3, naming the line and the fix."""
    m = lm.manifest
    for idx, arm in enumerate(m.arms):
        base = arm.image.base if arm.image is not None else None
        if base is None or m.template or not is_placeholder_digest(base):
            continue
        line = safeyaml.load(lm.raw).line_of(("arms", idx, "image", "base"))
        raise ManifestError(
            f"{lm.path}: line {line}: arms[{idx}].image.base: {base!r} pins a placeholder digest "
            f"(sha256:{base.rpartition('sha256:')[2][:8]}...), not an image's",
            hint=f"pin the real digest (`kit lock {lm.path}` where the registry is reachable) and sign again; or "
                 "mark the manifest `template: true` (it then validates and plans but never runs)",
        )


def on_this_host(lm: LoadedManifest) -> list[str]:
    """Notes on what cannot be checked here; raises ManifestError (exit 3) for a model.path this host would serve
    but does not have. Runtime docker mounts it from this host and the process runtime opens it here: both must
    have it. Runtime slurm's ranks open it on their nodes (kit validates and submits on a login node), so a missing
    one is a note, as is a template's (it is made real where it runs)."""
    m = lm.manifest
    if m.runtime == "process" and not m.template and (programs := missing_programs(m)):
        raise ManifestError(f"{lm.path}: {'; '.join(programs)} (the process runtime starts it here)",
                            hint="install it, or give its path in server.command (relative paths are taken from "
                                 "where kit runs)")
    missing = missing_model_path(m)
    if missing is None:
        return []
    if m.template:
        return [f"{missing}; this template must have it where it is made real"]
    if m.runtime == "slurm":
        return [f"{missing}; runtime slurm: every node of the allocation must have it"]
    where = "the directory mounted into the container" if m.runtime == "docker" else "what the server is given"
    make = make_command(lm.raw, m.model.path or "")
    raise ModelPathMissing(f"{lm.path}: {missing} ({where})",
                        hint=f"make it with the command the manifest gives, from where kit runs: `{make}`" if make
                        else "give the model's directory as it is on this machine (relative paths are taken from "
                             "where kit runs), or create it (e.g. download or build the weights) before the run")


def make_command(raw: bytes, path: str) -> str | None:
    """The command a manifest's own comments give for making ``path`` (its model.path): a comment line that starts
    with a command (python, python3, make, a ./ or .venv/ program) and holds the path as one word, as the
    shipped manifests' headers do (`#   python -m kit_hf.make_model tiny-cpu build/models/... --seed 0`)."""
    for line in raw.decode(errors="replace").splitlines()[:MAX_COMMENT_LINES]:
        words = line.strip().lstrip("#").split()
        if (line.lstrip().startswith("#") and path in words[1:] and len(line) <= 1000
                and (words[0] in ("python", "python3", "make") or words[0].startswith(("./", ".venv/")))):
            return " ".join(words)
    return None


MAX_COMMENT_LINES = 200  # lines of a manifest searched for the command that makes its model


def check_runnable(lm: LoadedManifest) -> None:
    """Refuse a template, a placeholder digest and a model.path this host does not have (exit 3), before anything
    starts."""
    if lm.manifest.template:
        raise ManifestError(f"{lm.path}: is a template (template: true): it validates and plans, but never runs",
                            hint="to run it, " + MADE_REAL.format(path=lm.path))
    refuse_placeholders(lm)
    on_this_host(lm)
    ds = lm.manifest.load.dataset  # the load runs here: its pinned data file must be here, with its bytes
    pinned = getattr(ds, "file", None) if ds is not None else None
    # by its kind's own bound: a text kind reads 64 MiB, records 1 GiB (what kit.workload will read it by)
    why: str | None = None
    if ds is not None and pinned is not None:
        why = file_problem(pinned, limit=dataset_file_bound(ds))
    ca = lm.manifest.load.request.ca_bundle  # https: the CA file every connection verifies the server with
    why = why or (ca_problem(ca) if ca is not None else None)
    if why:
        raise ManifestError(f"{lm.path}: {why}", hint=why.hint if isinstance(why, Problem) else PIN_HINT)
