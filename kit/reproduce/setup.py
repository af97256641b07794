"""The setup of the two runs side by side, from what each bundle recorded: the manifest and its plan, kit, the host
(CPU, kernel, OS, Python and packages), the GPUs (model, count, driver, CUDA), the runtime (Docker engine), and the
load client at every level. Nothing here judges the numbers; it says what differs, first in the report.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import RootModel

from kit.bundle import PROVENANCE
from kit.bundle.verify import read_envelope
from kit.errors import BundleError
from kit.files.client import ClientReport
from kit.files.plan import PlanFile
from kit.files.read import read_file
from kit.files.reproduce import ClientRow, SetupRow
from kit.plumbing.files import sha256_file


class _Json(RootModel[dict[str, object]]):
    pass


def _doc(root: Path, rel: str) -> dict[str, object]:
    if not (root / rel).is_file():
        return {}
    try:
        return read_file(root, rel, _Json).root
    except BundleError:
        return {}


def _get(obj: object, dotted: str) -> object:
    for part in dotted.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _digest(root: Path, rel: str) -> str | None:
    return sha256_file(root / rel)[0] if (root / rel).is_file() else None


def _gpus(env: dict[str, object]) -> str | None:
    gpus = _get(env, "gpus.gpus")
    if not isinstance(gpus, list):
        return None if _get(env, "gpus") is None else "none available"
    names = [str(g.get("name")) for g in gpus if isinstance(g, dict)]
    return f"{len(names)} x {', '.join(sorted(set(names)))}" if names else "0"


FACTS: list[tuple[str, str]] = [  # (label, dotted path in environment.json)
    ("CPU", "host.cpu.model"),
    ("CPU cores usable", "host.cpu.usable_cores"),
    ("CPU cores logical", "host.cpu.logical_cores"),
    ("memory bytes", "host.memory_total_bytes"),
    ("kernel", "host.kernel.release"),
    ("OS", "host.os.PRETTY_NAME"),
    ("architecture", "host.kernel.machine"),
    ("Python", "host.python.version"),
    ("GPU driver", "gpus.driver_version"),
    ("CUDA driver", "gpus.cuda_driver_version"),
    ("git commit", "git.commit"),
    ("git tree dirty", "git.dirty"),
]
DOCKER: list[tuple[str, str]] = [
    ("Docker engine", "engine_version"), ("Docker API", "engine_api_version"), ("Docker storage", "storage_driver"),
    ("Docker image store", "image_store"), ("Docker default runtime", "default_runtime"),
    ("Docker cgroup", "cgroup_version"),
]


def _row(what: str, a: object, b: object, note: str = "") -> SetupRow:
    return SetupRow(what=what, original=a, new=b, same=a == b, note=note)


def _packages(a: object, b: object) -> SetupRow:
    pa = a if isinstance(a, dict) else {}
    pb = b if isinstance(b, dict) else {}
    changed = [f"{k} {pa.get(k)} → {pb.get(k)}" for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)]
    return SetupRow(what="Python packages", original=len(pa), new=len(pb), same=not changed, note="; ".join(changed))


def setup_rows(original: Path, new: Path) -> list[SetupRow]:
    """Every recorded fact of the two bundles that decides what ran, and where (same, or both values)."""
    ra, rb = _doc(original, "run.json"), _doc(new, "run.json")
    ea, eb = _doc(original, "environment.json"), _doc(new, "environment.json")
    rows = [_row(f"{name} sha256", _digest(original, name), _digest(new, name))
            for name in ("manifest.yaml", "manifest.yaml.sig")]
    rows.append(_plan_row(original, new))
    rows.append(_row("kit version", ra.get("kit_version"), rb.get("kit_version")))
    rows.append(_row("runtime", _get(ea, "runtime.runtime"), _get(eb, "runtime.runtime")))
    rows.append(_row("GPUs", _gpus(ea), _gpus(eb)))
    rows += [_row(label, _get(ea, path), _get(eb, path)) for label, path in FACTS]
    rows.append(_packages(_get(ea, "host.packages"), _get(eb, "host.packages")))
    if _get(ea, "runtime.runtime") == "docker" or _get(eb, "runtime.runtime") == "docker":
        rows += [_row(label, _get(ea, f"runtime.{k}"), _get(eb, f"runtime.{k}")) for label, k in DOCKER]
    rows.append(_row("flags", ra.get("flags"), rb.get("flags")))
    ma, mb = model_tree(original), model_tree(new)
    if ma is not None or mb is not None:  # model.digest on in either run
        rows.append(_row("model sha256 tree", ma, mb, note=_model_note(ma, mb)))
    return rows


def model_tree(root: Path) -> str | None:
    """The model directory's sha256 tree as the bundle's signed provenance records it (``model.digest: true``: a
    ``file://`` entry of resolvedDependencies, kit.experiment.finish), "not hashed: <why>" when the run could not
    read it or deferred it (it did not complete), or None when it was not recorded."""
    entry = model_entry(root)
    return entry[1] if entry is not None else None


def model_entry(root: Path) -> tuple[str, str] | None:
    """(the model directory's absolute path, its sha256 tree or "not hashed: <why>") from the signed provenance's
    ``file://`` entry, or None when not recorded (model.digest off)."""
    if not (root / PROVENANCE).is_file():
        return None
    try:
        _, _, stmt = read_envelope(root / PROVENANCE, str(root))
    except BundleError:
        return None
    deps = _get(stmt, "predicate.buildDefinition.resolvedDependencies")
    for d in deps if isinstance(deps, list) else []:
        uri = str(d.get("uri", "")) if isinstance(d, dict) else ""
        if isinstance(d, dict) and uri.startswith("file://"):
            digest = _get(d, "digest.sha256")
            if isinstance(digest, str):
                return uri.removeprefix("file://"), f"sha256:{digest}"
            why = _get(d, "annotations.error") or _get(d, "annotations.deferred") or "no digest recorded"
            return uri.removeprefix("file://"), f"not hashed: {why}"
    return None


def _model_note(a: str | None, b: str | None) -> str:
    if a is None or b is None:
        return f"model.digest was off in the {'original' if a is None else 'new'} run: only one side is hashed"
    return "" if a == b else "the model files differ (or one run could not hash them)"


def _plan_text(p: PlanFile) -> str:
    return f"{p.order}, {len(p.cells)} cells, levels {', '.join(str(lv.concurrency) for lv in p.levels)}"


def _plan_row(original: Path, new: Path) -> SetupRow:
    try:
        pa, pb = read_file(original, "plan.json", PlanFile), read_file(new, "plan.json", PlanFile)
    except BundleError as e:
        return SetupRow(what="plan (cells, order, levels)", same=False, note=e.message)
    same = pa.same_design(pb)
    return SetupRow(what="plan (cells, order, levels)", original=_plan_text(pa), new=_plan_text(pb), same=same,
                    note="" if same else "the cells, their order or the levels differ")


def _client_row(root: Path, level: int, run: str) -> ClientRow:
    """The worst cell at a level: the most load processes' CPU share and scheduling lag; the client-bound cells."""
    plan = read_file(root, "plan.json", PlanFile)
    shares: list[float] = []
    lags: list[float] = []
    procs: list[int] = []
    cores: list[int] = []
    bound: list[str] = []
    for cell in plan.cells:
        rel = f"cells/{cell.id}/level-{level}/client.json"
        if not (root / rel).is_file():
            continue
        try:
            rep = read_file(root, rel, ClientReport)
        except BundleError:
            continue
        procs.append(rep.processes)
        cores.append(rep.usable_cores)
        if rep.client_bound:
            bound.append(cell.id)
        for w in rep.workers:
            if w.cpu_share is not None:
                shares.append(w.cpu_share)
            if w.lag is not None and w.lag.p99_ms is not None:
                lags.append(w.lag.p99_ms)
    return ClientRow(level=level, run=run,  # type: ignore[arg-type]
                     processes=max(procs) if procs else None, usable_cores=min(cores) if cores else None,
                     cpu_share_max=max(shares) if shares else None, lag_p99_ms_max=max(lags) if lags else None,
                     client_bound_cells=bound)


def client_rows(original: Path, new: Path, levels: list[int]) -> list[ClientRow]:
    """Per level, the load client in the original and in the new run."""
    return [_client_row(root, lv, run) for lv in levels for run, root in (("original", original), ("new", new))]
