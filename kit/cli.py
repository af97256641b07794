"""The `kit` command line: each command parses, calls one library function and renders.

Commands whose room needs the Docker SDK (compose, clean, lock) or matplotlib (report) import it when
they run, so that every other command starts without them.

Errors are mapped to exit codes in exactly one place, ``KitGroup``; a reader that closes stdout early
(`kit plan M | head`) ends any command quietly with 141 (128 + SIGPIPE, what a shell reports for `yes | head`).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from kit import __version__, cli_slurm
from kit.bundle import archive as make_archive
from kit.cleanup import clean_all, raise_if_unchecked
from kit.cli_options import (
    asked_json,
    echo,
    emit,
    json_option,
    json_start,
    json_written,
    key_output_file,
    output_dir,
    output_file,
    trust_option,
    user_name,
)
from kit.cli_options import echo_json as _echo_json
from kit.cli_plan import plan
from kit.cli_reproduce import compare, reproduce
from kit.compose import render_compose
from kit.errors import FIX_SPACE, ExitCode, KitError, UsageError, storage_error
from kit.experiment import RunOptions, run_experiment
from kit.experiment.signals import signals_as_interrupts
from kit.files import JsonObject
from kit.files.schema import bundle_schema_text
from kit.gates import doctor
from kit.images import lock_manifest
from kit.images.context import image_contexts
from kit.manifest import load_manifest, on_this_host, refuse_placeholders, schema_text
from kit.plumbing.interrupts import OutputClosed, forget_blocks, ignore_from_now, silence_output
from kit.plumbing.printable import printable
from kit.plumbing.redact import redact
from kit.progress import RichEvents, render_result
from kit.report.rebuild import rebuild
from kit.signing import generate_key, load_signing_key, sign_manifest, user_trust_file
from kit.verify import verify_target


def _fail(message: str, code: int) -> NoReturn:
    echo(f"Error: {redact(message)}", err=True)  # an error may quote a server (kit.plumbing.redact)
    raise click.exceptions.Exit(code)


def _traceback() -> None:
    """--debug: the traceback, secrets masked and control characters escaped as in every message (its exception may
    quote a server)."""
    sys.stderr.write(printable(redact(traceback.format_exc())))


def _broken_pipe() -> NoReturn:
    """The output's reader went away: nothing more can be shown, so end quietly (stdout and stderr onto /dev/null
    first, so that the interpreter's last flush meets no closed pipe either)."""
    silence_output()
    raise click.exceptions.Exit(ExitCode.BROKEN_PIPE)


class KitGroup(click.Group):
    """Maps KitError to its exit code; shows a traceback only with --debug; a closed stdout ends quietly (also
    while options are parsed: --help, --version)."""

    ignore_signals_after = False  # run_cli: the process exits once the command is done (kit.experiment.signals)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except BrokenPipeError:
            _broken_pipe()

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(ctx.params.get("debug")) or os.environ.get("KIT_DEBUG") == "1"
        as_json = asked_json(ctx.args)  # read now: click empties the group's arguments as it invokes the command
        json_start()
        try:
            # SIGTERM, SIGHUP as Ctrl-C: every command cleans up (temp files)
            try:
                with signals_as_interrupts(then_ignore=self.ignore_signals_after):
                    return super().invoke(ctx)
            finally:
                if self.ignore_signals_after:
                    forget_blocks()  # one an interrupt left behind too: from here on a signal is ignored
                    ignore_from_now()
        except (BrokenPipeError, OutputClosed):
            _broken_pipe()
        except KitError as e:
            if debug:
                _traceback()
            if as_json and not json_written():  # --json: stdout stays machine-readable on failure (text: stderr)
                _echo_json({"ok": False, "exit_code": int(e.exit_code), "error": redact(e.message),
                            "notes": [redact(n) for n in e.notes], "hint": redact(e.hint) if e.hint else None})
            _fail(str(e), int(e.exit_code))
        except click.ClickException as e:
            if as_json and not json_written():  # a usage error (a bad option, a missing file): JSON too
                _echo_json({"ok": False, "exit_code": e.exit_code, "error": redact(e.format_message()), "notes": [],
                            "hint": None})
            raise
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except Exception as e:  # noqa: BLE001 - the one place that turns bugs into exit code 1
            if debug:
                _traceback()
            if full := storage_error(e, f"{FIX_SPACE}, then run the command again"):
                _fail(str(full), int(full.exit_code))  # a full or failing disk is no bug (kit archive, report, ...)
            _fail(f"internal error: {type(e).__name__}: {e} (run with --debug for the traceback)", ExitCode.INTERNAL)


def _for_each(paths: list[Path], one: Callable[[Path], tuple[str, JsonObject]], as_json: bool) -> None:
    """Run ``one`` on every path, report each, and exit with the first failure's code (all are checked)."""
    results = []
    first: KitError | None = None
    for path in paths:
        try:
            text, details = one(path)
            results.append({"target": str(path), "ok": True, **details})
            if not as_json:
                echo(f"ok: {path}: {text}")
        except KitError as e:
            extra = getattr(e, "details", None)  # e.g. who signed an untrusted bundle
            results.append({**(extra if isinstance(extra, dict) else {}), "target": str(path), "ok": False,
                            "error": str(e)})
            first = first or e
            if not as_json:
                echo(f"Error: {e}", err=True)
    if as_json:
        _echo_json(results)
    if first is not None:
        raise click.exceptions.Exit(int(first.exit_code))


def _paths(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> list[Path]:
    return [Path(v) for v in value]


@click.group(cls=KitGroup, context_settings={"help_option_names": ["-h", "--help"]},
             commands=[cli_slurm.submit, cli_slurm.jobs])  # kit submit, kit jobs: Slurm (kit/cli_slurm.py)
@click.version_option(__version__, prog_name="kit")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def main(debug: bool) -> None:
    """Reproducible A/B experiments for LLM serving engines."""


# --------------------------------------------------------------------------- manifests


@main.command()
@click.argument("manifests", nargs=-1, required=True, callback=_paths)
@click.option("--allow-unpinned", is_flag=True, help="Accept image bases not pinned by digest.")
@json_option
def validate(manifests: list[Path], allow_unpinned: bool, as_json: bool) -> None:
    """Check manifests against the schema and the models, image digests, and model.path on this host."""

    def one(path: Path) -> tuple[str, JsonObject]:
        lm = load_manifest(path, allow_unpinned=allow_unpinned)
        refuse_placeholders(lm)
        m, notes = lm.manifest, on_this_host(lm)
        text = f"{m.name}, {len(m.arms)} arms" + (", a template: it validates and plans, never runs" * m.template)
        return text + "".join(f"\n  note: {n}" for n in notes), {"name": m.name, "template": m.template, "notes": notes}

    _for_each(manifests, one, as_json)


@main.command()
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), callback=output_file,
              help="Write to FILE.")
@click.option("--bundle", "bundle_files", is_flag=True,
              help="The bundle files' JSON Schema (bundle.schema.json) instead of the manifest's.")
def schema(output: Path | None, bundle_files: bool) -> None:
    """Print (or write) the manifest JSON Schema, or with --bundle the bundle files', generated from the models."""
    emit(bundle_schema_text() if bundle_files else schema_text(), output)


ROLES = {"manifest": ("kit-manifest", "approve manifests (what may run)"),
         "bundle": ("kit-bundle", "vouch for result bundles (which runner measured)")}


@main.command()
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              callback=key_output_file,
              help="Key file to write (default: ~/.config/kit/id_ed25519; a missing directory is made); FILE.pub "
                   "is written too.")
@click.option("-C", "--comment", default=None, help="Key comment, e.g. you@lab (default: user@host).")
@click.option("--role", type=click.Choice(sorted(ROLES)), default="manifest", show_default=True,
              help="What the suggested trust line lets the key do: approve manifests (kit-manifest) or vouch for "
                   "bundles (kit-bundle); never both.")
def keygen(output: Path | None, comment: str | None, role: str) -> None:
    """Make an ssh-ed25519 signing key (OpenSSH format, usable by ssh-keygen too)."""
    path = output or user_trust_file().parent / "id_ed25519"
    who = comment or f"{user_name()}@{os.uname().nodename}"
    key = generate_key(path, who)
    namespace, does = ROLES[role]
    echo(f"wrote {path} and {path}.pub ({key.fingerprint})")
    echo(f"to let this key {does}, whoever trusts it adds this line to their allowed_signers "
               f"(~/.config/kit/allowed_signers or a --trust file), after checking the fingerprint with you:")
    echo(f'{who.replace(" ", "_") or "signer"} namespaces="{namespace}" {key.public_line()}')


@main.command()
@click.argument("manifest", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--key", "key_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="ssh-ed25519 private key (e.g. ~/.ssh/id_ed25519).")
@click.option("--allow-unpinned", is_flag=True, help="Sign even if an image base is not pinned.")
def sign(manifest: Path, key_path: Path, allow_unpinned: bool) -> None:
    """Sign a manifest's exact bytes (detached DSSE envelope MANIFEST.sig); adds to existing signatures."""
    lm = load_manifest(manifest, allow_unpinned=allow_unpinned)
    refuse_placeholders(lm)  # a placeholder digest is signed only in a template
    key = load_signing_key(key_path, os.environ.get("KIT_KEY_PASSPHRASE"))
    sig, n = sign_manifest(manifest, lm.raw, key, image_contexts(lm))
    echo(f"signed {manifest} with {key.fingerprint} -> {sig} ({n} signature(s))")


@main.command()
@click.argument("targets", nargs=-1, required=True, callback=_paths)
@trust_option
@click.option("--integrity-only", is_flag=True,
              help="Bundles: check the files against the signed provenance and recompute the summary, but make no "
                   "trust decision (the answer says UNTRUSTED).")
@json_option
def verify(targets: list[Path], trust: tuple[Path, ...], integrity_only: bool, as_json: bool) -> None:
    """Verify manifests' signatures, or result bundles (directories or `kit archive` files), under your policy.

    A bundle verifies (exit 0) only when a key your trust files allow for kit-bundle signed it; the first line
    says who signed, whether your policy trusts that key (and by which line), and how to trust it (exit 9)."""

    def one(target: Path) -> tuple[str, JsonObject]:
        res = verify_target(target, list(trust), integrity_only=integrity_only)
        return res.summary, res.details

    _for_each(targets, one, as_json)


# --------------------------------------------------------------------------- runs and bundles


@main.command()
@click.argument("manifest", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
              show_default=True, callback=output_dir, help="Directory for new bundles.")
@click.option("--resume", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Finish an interrupted or failed run: only missing or failed cells run. The bundle must verify "
                   "as signed by a runner your policy trusts (kit-bundle); the manifest is checked again under "
                   "your policy, and --allow-* flags count only when given here.")
@click.option("--redo", type=click.Choice(["client-bound", "failed"]), multiple=True, metavar="REASON",
              help="With --resume: re-run the cells whose attempt was client-bound (a level the load generator "
                   "limited: its verdict withheld) or failed, in the plan's order, even in a complete bundle "
                   "(REASON: client-bound or failed; repeatable). Each original stays in the bundle (redone/; a "
                   "failed one in failed/) and is recorded in run.json; the statistics use the re-run; kit verify "
                   "checks every replaced attempt was flagged or failed (docs/statistics.md).")
@click.option("--allow-unsigned", is_flag=True, help="Run an unsigned or untrusted manifest (recorded).")
@click.option("--allow-unpinned", is_flag=True, help="Accept image bases not pinned by digest (recorded).")
@trust_option
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path),
              help="Runner key that signs the bundle's provenance (default: ~/.config/kit/runner_ed25519).")
def run(manifest: Path | None, out_dir: Path, resume: Path | None, redo: tuple[str, ...], allow_unsigned: bool,
        allow_unpinned: bool, trust: tuple[Path, ...], key: Path | None) -> None:
    """Run an experiment end to end into a signed result bundle."""
    if redo and resume is None:
        raise UsageError("--redo re-runs cells of an existing bundle: give it with --resume DIRECTORY")
    opts = RunOptions(out_dir=out_dir, resume=resume, allow_unsigned=allow_unsigned, allow_unpinned=allow_unpinned,
                      trust=list(trust), key=key, argv=["kit", *sys.argv[1:]], redo=tuple(dict.fromkeys(redo)))
    result = run_experiment(manifest, opts, RichEvents())
    render_result(result)


@main.command()
@click.argument("bundle", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path), help="Runner key to re-sign with.")
@trust_option
def report(bundle: Path, key: Path | None, trust: tuple[Path, ...]) -> None:
    """Recompute summary.json from the records, re-render report.md and plots, and re-sign where they changed.

    The bundle must verify under your policy first; the runner key that re-signs must be one your policy allows for
    kit-bundle. Where nothing changed, nothing is rewritten and the original signature stays."""
    for line in rebuild(bundle, key, trust):
        echo(line)


@main.command()
@click.argument("bundle", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              callback=output_file, help="Archive to write (its name ends .tar.gz or .tgz).")
def archive(bundle: Path, output: Path) -> None:
    """Write a deterministic .tar.gz of a bundle (same bundle, same bytes)."""
    digest = make_archive(bundle, output)
    echo(f"wrote {output} (sha256 {digest})")


# --------------------------------------------------------------------------- machines


@main.command()
@click.argument("manifest", type=click.Path(dir_okay=False, path_type=Path))
@json_option
def gates(manifest: Path, as_json: bool) -> None:
    """Run the GPU, port and leftover gates now, like a doctor (exit 5 when one fails)."""
    report_ = doctor(manifest)
    if as_json:
        _echo_json(report_.as_dict())
    else:
        for c in report_.checks:
            echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name} ({c.duration_s * 1000:.0f} ms): {c.message}")
    report_.raise_if_failed()


@main.command()
@click.option("--images", "with_images", is_flag=True, help="Also remove images built by kit.")
@json_option
def clean(with_images: bool, as_json: bool) -> None:
    """Remove every container (and with --images, image) carrying kit labels, and leftover server groups."""

    result = clean_all(images=with_images)
    if as_json:
        _echo_json(result)
        raise_if_unchecked(result)
        return
    labels = {"containers": "containers removed", "images": "images removed", "images_kept": "images kept",
              "server_process_groups": "server process groups stopped", "stale_records": "stale records removed",
              "server_process_groups_still_running": "server process groups still running after SIGKILL (records kept)",
              "docker_skipped": "Docker not reachable, containers not checked",
              "docker_unreachable": "Docker not answering, containers NOT checked"}
    for kind, items in result.items():
        echo(f"{labels.get(kind, kind)}: {len(items)}")
        for item in items:
            echo(f"  {item}")
    raise_if_unchecked(result)


@main.command()
@click.argument("manifest", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), callback=output_file,
              help="Write to FILE.")
def compose(manifest: Path, output: Path | None) -> None:
    """Generate a compose file with the same servers, runnable by hand (docker compose --profile ARM up)."""

    emit(render_compose(load_manifest(manifest, allow_unpinned=True),
                         base_dir=output.resolve().parent if output is not None else None), output)


@main.command()
@click.argument("manifest", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--update", is_flag=True, help="Also re-resolve bases that are already pinned.")
def lock(manifest: Path, update: bool) -> None:
    """Resolve image tags to digests from the registry and write them back (then sign again)."""

    changes = lock_manifest(manifest, update=update)
    for change in changes:
        echo(str(change))
    if changes:
        template = load_manifest(manifest, allow_unpinned=True).manifest.template
        made_real = " (and remove `template: true` once it can run)" if template else ""
        echo(f"the manifest changed: sign it again with `kit sign {manifest} --key KEY`{made_real}")
    else:
        echo("every base is already pinned; nothing changed")


main.add_command(plan)
main.add_command(reproduce)
main.add_command(compare)


def run_cli() -> None:
    """The `kit` process: its command's outermost block leaves SIGINT, SIGTERM and SIGHUP ignored, since the process
    ends right after (in-process callers, CliRunner in tests, keep their handlers)."""
    KitGroup.ignore_signals_after = True
    main(prog_name="kit")


if __name__ == "__main__":
    run_cli()
