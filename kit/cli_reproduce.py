"""`kit reproduce` and `kit compare` (registered on ``kit.cli.main``): parse, call ``kit.reproduce.reproduce`` or
``kit.compare.compare_bundles``, render; the verdict's exit code (10 not reproduced, 11 inconclusive; `kit compare`
only with --strict) comes from kit's one error mapping."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kit.cli_options import echo_json, json_option, trust_option
from kit.compare import compare_bundles, comparison_json, raise_for_verdict, render_comparison
from kit.plan import parse_fraction
from kit.progress import RichEvents
from kit.reproduce import ReproduceOptions
from kit.reproduce import reproduce as reproduce_bundle


@click.command()
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
              show_default=True, help="Directory for the new bundle.")
@click.option("--resume", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Finish a reproduction of SOURCE that failed or was interrupted (or judge a finished one again): "
                   "the bundle it started.")
@click.option("--project", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="The project whose images/ holds the build contexts the manifest names (docker runtime; default: "
                   "the current directory, or the nearest one above it with an images/ folder).")
@click.option("--dry-run", is_flag=True,
              help="Verify SOURCE and print what would be rebuilt and run, and for how long; build, start and write "
                   "nothing.")
@click.option("--allow-untrusted-source", is_flag=True,
              help="Reproduce a bundle whose runner your policy does not trust for kit-bundle (recorded).")
@click.option("--allow-unsigned", is_flag=True,
              help="Run the source's manifest even if your policy does not approve its signer (recorded).")
@click.option("--allow-unpinned", is_flag=True, help="Accept image bases not pinned by digest (recorded).")
@trust_option
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path),
              help="Runner key that signs the new bundle (default: ~/.config/kit/runner_ed25519).")
@json_option
def reproduce(source: Path, out_dir: Path, resume: Path | None, project: Path | None, dry_run: bool,
              allow_untrusted_source: bool, allow_unsigned: bool, allow_unpinned: bool, trust: tuple[Path, ...],
              key: Path | None, as_json: bool) -> None:
    """Re-run a shared bundle (directory or .tar.gz) and say whether it reproduced.

    Verifies SOURCE under your policy, re-runs its manifest (its exact bytes and signature: the same plan, seeds
    and levels) into a new bundle whose provenance names SOURCE, then judges the primary metric at every level,
    each arm and each A/B effect, with an equivalence test (margin analysis.reproduce_margin, default 5 %; see
    docs/reproduce.md). The setup differences come first. Exit 0: reproduced; 10: not reproduced; 11: inconclusive.
    """
    opts = ReproduceOptions(source=source, out_dir=out_dir, project=project, trust=list(trust),
                            allow_untrusted_source=allow_untrusted_source, allow_unsigned=allow_unsigned,
                            allow_unpinned=allow_unpinned, key=key, resume=resume, dry_run=dry_run,
                            argv=["kit", *sys.argv[1:]])
    result = reproduce_bundle(opts, RichEvents())
    if as_json:
        echo_json({"bundle": str(result.bundle), **result.report.to_json()} if result.report
                  else {"dry_run": result.lines})
    else:
        for line in result.lines:
            click.echo(line)
        if result.bundle is not None:
            click.echo(f"bundle: {result.bundle}")
    result.raise_for_verdict()


@click.command()
@click.argument("bundle_a", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.argument("bundle_b", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--margin", metavar="FRACTION",
              help="Equivalence margin, e.g. 5% or 0.05 (default: A's manifest's analysis.reproduce_margin).")
@click.option("--strict", is_flag=True,
              help="Exit as kit reproduce does: 10 when B does not reproduce A, 11 when inconclusive (else 0).")
@json_option
def compare(bundle_a: Path, bundle_b: Path, margin: str | None, strict: bool, as_json: bool) -> None:
    """Compare two bundles: setup, each arm x level's figures (B / A), and whether B reproduces A.

    The verdicts are kit reproduce's (docs/reproduce.md), with A as the original and B as the new run: the primary
    metric per level, each arm and each A/B effect, with an equivalence test, and whether the A/B conclusion held.
    Exit 0 whatever the verdict, unless --strict.
    """
    result = compare_bundles(bundle_a, bundle_b, parse_fraction(margin, "--margin"))
    if as_json:
        echo_json(comparison_json(result))
    else:
        for line in render_comparison(result):
            click.echo(line)
    if strict:
        raise_for_verdict(result)
