"""`kit reproduce` and `kit compare` (registered on ``kit.cli.main``): parse, call ``kit.reproduce.reproduce`` or
``kit.compare.compare_paths``, render; the verdict's exit code (10 inconsistent, 11 imprecise; `kit compare`
only with --strict) comes from kit's one error mapping."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kit.cli_options import echo, echo_json, json_option, output_dir, trust_option
from kit.compare import compare_paths, comparison_json, raise_for_verdict, render_comparison
from kit.plan import parse_fraction
from kit.progress import RichEvents
from kit.reproduce import ReproduceOptions
from kit.reproduce import reproduce as reproduce_bundle


@click.command()
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
              show_default=True, callback=output_dir, help="Directory for the new bundle.")
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
@click.option("--until-decided", is_flag=True,
              help="Look at the verdict after each block of the new run (two repeats per arm) and stop once it is "
                   "decided, with group-sequential boundaries that keep its error rates (recorded; each look in "
                   "reproduce-looks/). Not for a source with design.sequential or same_hardware.")
@trust_option
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path),
              help="Runner key that signs the new bundle (default: ~/.config/kit/runner_ed25519).")
@json_option
def reproduce(source: Path, out_dir: Path, resume: Path | None, project: Path | None, dry_run: bool,
              allow_untrusted_source: bool, allow_unsigned: bool, allow_unpinned: bool, until_decided: bool,
              trust: tuple[Path, ...], key: Path | None, as_json: bool) -> None:
    """Re-run a shared bundle (directory or .tar.gz) and say whether it reproduced.

    Verifies SOURCE under your policy, re-runs its manifest (its exact bytes and signature: the same plan, seeds
    and levels) into a new bundle whose provenance names SOURCE, then judges each A/B effect of the primary metric
    at every level against the original's: inconsistent when the new effect lies outside the original's prediction
    interval, reproduced when it is equivalent within analysis.reproduce.margin (default 50 % of the effect; 5 %
    where the original found none) and kept its direction, imprecise otherwise; each arm's shift between the
    machines is reported (judged only with analysis.reproduce.same_hardware). See docs/reproduce.md. The setup
    differences come first. With --until-decided the new run stops at the first look that decides the verdict.
    Exit 0: reproduced; 10: inconsistent; 11: imprecise.
    """
    opts = ReproduceOptions(source=source, out_dir=out_dir, project=project, trust=list(trust),
                            allow_untrusted_source=allow_untrusted_source, allow_unsigned=allow_unsigned,
                            allow_unpinned=allow_unpinned, key=key, resume=resume, dry_run=dry_run,
                            argv=["kit", *sys.argv[1:]], until_decided=until_decided)
    result = reproduce_bundle(opts, RichEvents())
    if as_json:
        echo_json({"bundle": str(result.bundle), **result.report.to_json()} if result.report
                  else {"dry_run": result.lines})
    else:
        for line in result.lines:
            echo(line)
        if result.bundle is not None:
            echo(f"bundle: {result.bundle}")
    result.raise_for_verdict()


@click.command()
@click.argument("bundle_a", type=click.Path(exists=True, path_type=Path))
@click.argument("bundle_b", type=click.Path(exists=True, path_type=Path))
@click.option("--margin", metavar="FRACTION",
              help="Equivalence margin on each A/B effect A found, as a fraction of it, e.g. 50% (default: A's "
                   "manifest's analysis.reproduce.margin).")
@click.option("--absolute-margin", metavar="FRACTION",
              help="Margin where A found no effect (and on the arms with same_hardware), e.g. 5% (default: A's "
                   "manifest's analysis.reproduce_margin).")
@click.option("--strict", is_flag=True,
              help="Exit as kit reproduce does: 10 when B is inconsistent with A, 11 when imprecise (else 0).")
@json_option
def compare(bundle_a: Path, bundle_b: Path, margin: str | None, absolute_margin: str | None, strict: bool,
            as_json: bool) -> None:
    """Compare two bundles (directories or `kit archive` files): setup, each arm x level's figures (B / A), and
    whether B reproduces A.

    The verdicts are kit reproduce's (docs/reproduce.md), with A as the original and B as the new run: each A/B
    effect of the primary metric per level (inconsistent, reproduced or imprecise), each arm's shift, and whether
    the A/B conclusion held.
    Exit 0 whatever the verdict, unless --strict. Who signed either bundle is not judged here (`kit verify` does);
    an archive is extracted only as far as its signed provenance names its files (exit 9 for any other member).
    """
    result = compare_paths(bundle_a, bundle_b, parse_fraction(margin, "--margin"),
                             parse_fraction(absolute_margin, "--absolute-margin"))
    if as_json:
        echo_json(comparison_json(result))
    else:
        for line in render_comparison(result):
            echo(line)
    if strict:
        raise_for_verdict(result)
