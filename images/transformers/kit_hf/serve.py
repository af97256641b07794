"""kit's launcher for ``transformers serve``: version check, optional OEA, optional experts implementation,
then transformers' own serve CLI, in this process.

    python -m kit_hf.serve MODEL_DIR [--served-name NAME] [--experts-implementation grouped_mm|batched_mm|eager] \\
        --continuous-batching --device cpu --host 127.0.0.1 --port 8000 ...

Every argument it does not know goes to ``transformers serve`` unchanged (the same Typer app the
``transformers`` console script runs, without its once-a-day PyPI update check).

- ``--served-name``: ``transformers serve`` pins a preloaded model to the exact string it was given and
  refuses any other ``model`` in a request, so a model given by its absolute path would have to be requested
  by that path. With ``--served-name`` the launcher makes a private temporary directory holding one
  symlink ``NAME -> MODEL_DIR``, changes into it and preloads ``NAME``: clients send ``NAME``. The directory
  goes when the server ends, SIGTERM included (uvicorn re-raises the SIGTERM it caught once it has shut down,
  which ends the process before any exit handler runs: the launcher's SIGTERM handler removes the directory, then
  dies of the signal as before; not SystemExit, which would wait on transformers' non-daemon threads).

- transformers must be exactly ``PINNED`` (the version the OEA hook and kit's request dialect were checked
  against); anything else stops the server with a message naming both versions.
- ``KIT_OEA_K0`` unset: nothing of transformers is patched (the baseline). Set: it must be an integer in
  [1, top_k] (checked against every Qwen3-MoE router of the loaded model; an error otherwise stops the
  server), and ``kit_hf.oea_patch`` reroutes the router's output on decode steps only.
- ``--experts-implementation``: ``model.set_experts_implementation(...)`` right after the model loads (both
  arms alike); without it transformers picks its default (``grouped_mm`` where it can dispatch).

- ``GET /metrics`` (``kit_hf.metrics``): Prometheus gauges of the continuous batch (running, waiting, KV-cache
  use, read from transformers' CB scheduler and cache) and of the HTTP requests in flight, on the server's port.

One line per loaded model on stderr (``kit_hf: ...``) says what ran: experts implementation, OEA k0 and how
many routers it reaches, so the server log of every cell records it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

PINNED = "5.24.0"
EXPERTS = ("grouped_mm", "batched_mm", "eager")
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1"}


class LaunchError(Exception):
    """Why the server must not start (printed, exit 2)."""


def installed_version() -> str | None:
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


def check_version(found: str | None) -> None:
    if found != PINNED:
        got = f"transformers {found} is installed" if found else "transformers is not installed"
        raise LaunchError(f"kit_hf needs transformers {PINNED} (the version its OEA hook and request dialect were "
                          f"checked against), but {got}: pip install 'transformers[serving]=={PINNED}'")


def _log(msg: str) -> None:
    print(f"kit_hf: {msg}", file=sys.stderr, flush=True)


def wrap_model_loading(experts: str | None, k0: int | None) -> None:
    """Set the experts implementation and check OEA against each model as it loads, and say so."""
    from transformers.cli.serving.model_manager import ModelManager

    from kit_hf import oea_patch

    load = ModelManager._load_model

    def _load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        model = load(self, *args, **kwargs)
        if experts is not None:
            model.set_experts_implementation(experts)
        oea = "off (transformers unchanged)"
        if k0 is not None:
            n = oea_patch.check_model(model, k0)
            oea = f"k0={k0} on {n} Qwen3-MoE routers, decode steps only"
        impl = getattr(model.config, "_experts_implementation", None)
        _log(f"loaded {type(model).__name__} on {model.device} ({model.dtype}); experts implementation {impl}; "
             f"OEA {oea}")
        return model

    ModelManager._load_model = _load_model  # type: ignore[method-assign]


def add_metrics() -> str:
    """kit_hf's ``GET /metrics`` (kit_hf.metrics) on the server's own port, or why not."""
    try:
        from kit_hf import metrics
    except ImportError as e:  # prometheus_client missing: the server runs, kit's cells get GPU telemetry only
        return f"no /metrics ({e})"
    metrics.wrap_build_server()
    return "GET /metrics (kit_hf.metrics)"


@dataclass(frozen=True)
class Options:
    experts: str | None
    served_name: str | None
    rest: list[str]  # for transformers serve


def parse(argv: list[str]) -> Options:
    p = argparse.ArgumentParser(prog="python -m kit_hf.serve", allow_abbrev=False)
    p.add_argument("--experts-implementation", choices=EXPERTS, default=None)
    p.add_argument("--served-name", default=None, help="the name clients send as 'model' (default: MODEL_DIR as given)")
    own, rest = p.parse_known_args(argv)
    return Options(own.experts_implementation, own.served_name, rest)


def serve_as(rest: list[str], name: str) -> tuple[list[str], Path]:
    """Replace the model directory (the first argument for transformers serve) by ``name``, reachable from a
    new private working directory (returned, for the caller to remove) as a symlink to the model directory."""
    if not rest or rest[0].startswith("-"):
        raise LaunchError("--served-name needs the model directory first: python -m kit_hf.serve MODEL_DIR ...")
    if not name or "/" in name or name in (".", ".."):
        raise LaunchError(f"--served-name {name!r}: give a plain name without '/'")
    model = Path(rest[0]).resolve()
    if not (model / "config.json").is_file():
        raise LaunchError(f"{rest[0]}: no model directory there (no config.json); make it with "
                          "python -m kit_hf.make_model SHAPE DIR")
    home = Path(tempfile.mkdtemp(prefix="kit-hf-"))
    (home / name).symlink_to(model, target_is_directory=True)
    os.chdir(home)
    return [name, *rest[1:]], home


def _remove_on_sigterm(home: Path) -> None:
    """On SIGTERM: remove ``home``, then end of the signal itself (the default action)."""
    def handler(signum: int, _frame: object) -> None:
        shutil.rmtree(home, ignore_errors=True)
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    try:
        opts = parse(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return 0 if e.code == 0 else 2
    for k, v in OFFLINE_ENV.items():
        os.environ.setdefault(k, v)
    try:
        check_version(installed_version())
        from kit_hf import oea_patch

        k0 = oea_patch.k0_from_env()
        if k0 is not None:
            oea_patch.install(k0)
        wrap_model_loading(opts.experts, k0)
        metrics = add_metrics()
        rest, home = serve_as(opts.rest, opts.served_name) if opts.served_name else (opts.rest, None)
    except (LaunchError, ValueError, ImportError) as e:
        _log(f"{type(e).__name__}: {e}" if isinstance(e, ImportError) else str(e))
        return 2
    if home is not None:
        _remove_on_sigterm(home)
    try:
        return _serve(rest, opts, k0, metrics, home)
    finally:
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)


def _serve(rest: list[str], opts: Options, k0: int | None, metrics: str, home: Path | None) -> int:
    from transformers.cli.transformers import app

    from kit_hf import oea_patch

    _log(f"transformers {PINNED}; OEA {'k0=' + str(k0) if k0 else 'off'}; "
         f"experts implementation {opts.experts or 'transformers default'}; {metrics}; serve {' '.join(rest)}"
         + (f" (in {home})" if home else ""))
    try:
        app(args=["serve", *rest], prog_name="transformers", standalone_mode=True)
    except SystemExit as e:
        return int(e.code) if isinstance(e.code, int) else (0 if e.code is None else 1)
    except oea_patch.OeaConfigError as e:  # raised at model load (k0 above the model's top-k, no Qwen3-MoE router)
        _log(str(e))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
