"""`kit reproduce`: verify the source bundle, re-run its manifest (exactly its bytes and signature) with the same
plan into a new bundle, then judge the new run against the original and seal the verdict into the new bundle.

The new bundle is an ordinary run of the manifest (kit.experiment), afterwards given ``reproduce.json``,
``reproduce.md``, ``source/`` (the source's signed provenance and the files the verdict and setup diff were read
from), run.json's ``reproduces`` and a provenance whose parameters name the source bundle by the sha256 of its
provenance; then signed again with the runner's key. A failed or interrupted reproduction is finished with
``kit reproduce SOURCE --resume BUNDLE`` (which also re-judges a complete one; only a bundle kit reproduce started
from this same source, never the source itself: kit.reproduce.resume).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kit.bundle import Bundle, runner_key, sign_provenance, verify_integrity
from kit.errors import Imprecise, Inconsistent, SignatureError, UsageError
from kit.experiment import Events, RunOptions
from kit.experiment.inputs import RunInputs, inputs_of, resume_sources, verify_before_resume
from kit.experiment.run import run_inputs
from kit.experiment.signals import deferred_interrupts, signals_as_interrupts
from kit.files.plan import PlanFile
from kit.files.read import read_file
from kit.files.reproduce import ReproduceFile, Reproduces
from kit.files.reproduce_looks import REPRODUCE_LOOKS_DIR
from kit.files.run import RunFile, RunFlags
from kit.files.summary import Summary
from kit.hints import reproduce_command
from kit.manifest import load_manifest
from kit.plan import make_plan
from kit.reproduce.decide import Rule
from kit.reproduce.dryrun import dry_run_lines
from kit.reproduce.identity import identities
from kit.reproduce.looks import UntilDecided
from kit.reproduce.render import headline, lines, markdown
from kit.reproduce.resume import refuse_unless_reproduction_of
from kit.reproduce.sealing import copy_source, predicate
from kit.reproduce.setup import client_rows, setup_rows
from kit.reproduce.source import Source, opened
from kit.reproduce.until import apply_looks, headline_verdict, note, refuse_unless_possible, section
from kit.reproduce.verdict import counts, judge, overall
from kit.runtime import Runtime
from kit.stats.bundle import recorded_looks


@dataclass
class ReproduceOptions:
    source: Path
    out_dir: Path = Path("results")
    project: Path | None = None  # the project whose images/ holds the build contexts (default: the current dir)
    trust: list[Path] = field(default_factory=list)
    allow_untrusted_source: bool = False
    allow_unsigned: bool = False
    allow_unpinned: bool = False
    key: Path | None = None
    resume: Path | None = None
    dry_run: bool = False
    argv: list[str] = field(default_factory=list)
    runtime: Runtime | None = None  # injected in tests; default from the manifest
    until_decided: bool = False  # a look at the verdict after each block of the new run; stop once it is decided


@dataclass
class ReproduceResult:
    bundle: Path | None  # None for --dry-run
    report: ReproduceFile | None
    lines: list[str]

    def raise_for_verdict(self) -> None:
        """Exit 10 (inconsistent) or 11 (imprecise) through kit's one error mapping; reproduced: nothing."""
        if self.report is None or self.report.verdict == "reproduced":
            return
        where = f"the verdict, level by level, with the setup differences first: {self.bundle}/reproduce.md"
        error = Inconsistent if self.report.verdict == "inconsistent" else Imprecise
        raise error(headline(self.report), hint=where)


def _run_options(opts: ReproduceOptions, src: Source) -> RunOptions:
    def hint(root: Path, runner: Ed25519PublicKey) -> str:  # an interrupted reproduction: finish it and judge it
        return reproduce_command(opts.source, root, trust=opts.trust, project=opts.project, key=opts.key,
                                 allow_untrusted_source=opts.allow_untrusted_source, runner=runner,
                                 allow_unsigned=opts.allow_unsigned, allow_unpinned=opts.allow_unpinned,
                                 until_decided=opts.until_decided)

    return RunOptions(out_dir=opts.out_dir, resume=opts.resume, allow_unsigned=opts.allow_unsigned,
                      allow_unpinned=opts.allow_unpinned, trust=list(opts.trust), key=opts.key, argv=opts.argv,
                      runtime=opts.runtime, resume_hint=hint,
                      stop_rule=UntilDecided(src.root) if opts.until_decided else None,
                      # the source's files in source/ from the start (--until-decided copies them itself): a resume
                      # of a reproduction not sealed yet knows its source (kit.reproduce.resume)
                      prepare=None if opts.until_decided else functools.partial(copy_source, src.root))


def _inputs(src: Source, opts: ReproduceOptions, run_opts: RunOptions) -> RunInputs:
    """The source's manifest bytes and signature, checked under the user's policy (kit-manifest) as `kit run` checks
    a manifest file; when resuming, the bundle's, which must be the same bytes."""
    raw = src.read_bytes("manifest.yaml") or b""
    if opts.resume is not None:
        inputs = _resumed_inputs(src, opts.resume, run_opts)
        if inputs.lm.raw != raw:
            raise UsageError(f"{opts.resume} is a run of another manifest than the source {opts.source} "
                             f"(sha256 {src.ref.manifest_sha256[:16]}...)",
                             hint="give the reproduction bundle that `kit reproduce` started from this source")
        return inputs
    # where the run records its manifest came from: a constant name, never the source's run id (the source's runner
    # wrote it), in the project that holds images/ (a resume of the reproduction builds from there again)
    origin = (opts.project or Path.cwd()) / "reproduce-source.yaml"
    label = opts.source / "manifest.yaml"  # what every message names: the manifest as the user can find it
    sig = src.read_bytes("manifest.yaml.sig")
    try:
        if sig is None and not opts.allow_unsigned:
            raise SignatureError(f"{label}: not signed (the source bundle has no manifest.yaml.sig)",
                                 hint="pass --allow-unsigned to re-run it anyway (recorded)")
        inputs = inputs_of(label, raw, sig, run_opts, origin=origin)
    except SignatureError as e:
        raise e.note(f"the manifest is the source bundle's ({opts.source}: manifest.yaml and manifest.yaml.sig); "
                     "your policy must approve its signer for kit-manifest, or pass --allow-unsigned (recorded)") \
            from None
    return replace(inputs, lm=replace(inputs.lm, path=origin, origin=None))  # recorded so, as before


def _resumed_inputs(src: Source, root: Path, run_opts: RunOptions) -> RunInputs:
    """``load_for_run``'s resume (the bundle verified once), refused unless the bundle is a reproduction of ``src``
    (kit.reproduce.resume) before anything of it is believed further."""
    trust = verify_before_resume(root, run_opts.trust)
    refuse_unless_reproduction_of(src.ref, root, trust)
    rs = resume_sources(root, None, trust)
    try:
        return inputs_of(root / "manifest.yaml", rs.raw, rs.sig, run_opts, trust.note, origin=rs.original)
    except SignatureError as e:
        raise e.note("a resume re-checks the manifest under your current trust policy and never takes "
                     "--allow-unsigned from the bundle's run.json: pass it again if you accept an unapproved "
                     "manifest") from None


def _same_plan(src: Source, inputs: RunInputs) -> None:
    planned = make_plan(inputs.lm.manifest).to_file()
    recorded = read_file(src.root, "plan.json", PlanFile)
    if not recorded.same_design(planned):
        raise UsageError(
            f"the plan this kit makes from the source's manifest ({inputs.lm.manifest.name}) differs from the source's "
            f"plan.json (the cells, their order or the levels; the source ran kit {src.run.kit_version or '?'}): a "
            "re-run would not be the same experiment",
            hint=f"reproduce with kit {src.run.kit_version or 'as the source recorded'}")


def reproduce(opts: ReproduceOptions, events: Events | None = None) -> ReproduceResult:
    """Verify, re-run, judge and seal (or with ``dry_run``, only say what would be done)."""
    with opened(opts.source, opts.trust, allow_untrusted=opts.allow_untrusted_source) as src:
        run_opts = _run_options(opts, src)
        inputs = _inputs(src, opts, run_opts)
        _same_plan(src, inputs)
        if opts.until_decided:
            refuse_unless_possible(inputs.lm.manifest)
        if opts.dry_run:
            return ReproduceResult(None, None, dry_run_lines(src, inputs, opts.out_dir, opts.resume,
                                                                  opts.until_decided))
        result = run_inputs(inputs, run_opts, events)  # interrupted: its resume hint is kit reproduce's
        with signals_as_interrupts():  # the run's outcome closed the command's stretch: judging stays stoppable
            report = seal(src, result.bundle, opts)
        return ReproduceResult(result.bundle, report, lines(report))


def sequential_note(original: Summary, new: Summary) -> str | None:
    """What a sequential design did in the two runs: each stopped by its own A/B looks, and the verdict is the
    fixed-sample rule on the cells each used (docs/reproduce.md, "Sequential originals")."""
    if original.sequential is None and new.sequential is None:
        return None
    parts = [f"{name}: {q.stopped} ({q.cells_used} of {q.cells_planned} cells)"
             for name, q in (("the original", original.sequential), ("the new run", new.sequential)) if q is not None]
    return ("sequential design: " + "; ".join(parts) + ". Each run stopped on its own A/B looks, not on this "
            "verdict; the verdict judges the cells each run used with the fixed-sample rule, which does not "
            "account for where either run stopped")


def notes(src: Source, new_run: RunFile, inputs_signed: bool, runtime: str, model_path: str | None,
          model_digest: bool = False) -> list[str]:
    out = []
    if src.run.status != "complete":
        out.append(f"the original run ended {src.run.status!r}; its failed cells are left out, as in its own report")
    if not src.ref.trusted:
        out.append("the source's runner is not trusted by your policy (reproduced with --allow-untrusted-source): "
                   "its numbers are only as good as whoever ran it")
    if not inputs_signed:
        out.append("the manifest is not approved by your policy (re-run with --allow-unsigned)")
    if runtime == "process":
        model = "" if not model_path else (
            f"; the model files at {model_path} are compared by the sha256 tree each run's signed provenance records "
            "(model.digest, in the setup)" if model_digest else
            f"; the model files at {model_path} are not hashed (model.digest is off), so their identity is not checked")
        out.append("process runtime: no images; each arm's server command is compared instead" + model)
    if new_run.resumed:
        out.append(f"the new run was resumed {len(new_run.resumed)} time(s)")
    return out


def seal(src: Source, root: Path, opts: ReproduceOptions) -> ReproduceFile:
    """Judge the finished new bundle against the source, write the verdict and the source's files into it, name the
    source in run.json and the provenance, and sign it again."""
    verify_integrity(root)  # exactly what the run signed is what is judged and re-signed
    bundle = Bundle.open(root)
    new = bundle.read("summary.json", Summary)
    m = load_manifest(bundle.path("manifest.yaml"), allow_unpinned=True).manifest
    comps, concl = judge(src.summary, new, Rule.of(m.analysis, even=m.design.order == "abba"),
                         same_hardware=m.analysis.reproduce.same_hardware)
    run = bundle.read("run.json", RunFile)
    looks = recorded_looks(root, REPRODUCE_LOOKS_DIR) if opts.until_decided else []  # verified with the bundle
    until = section(looks, m, len(new.cells)) if opts.until_decided else None
    comps = apply_looks(comps, looks)
    held = [c.held for c in concl if c.held is not None]
    report = ReproduceFile(
        source=src.ref, verdict=headline_verdict(looks) if until else overall(comps), until_decided=until,
        primary=m.analysis.primary, margin=m.analysis.reproduce_margin,
        confidence=m.analysis.confidence, effect_margin=m.analysis.reproduce.margin,
        same_hardware=m.analysis.reproduce.same_hardware,
        counts=counts(comps),
        comparisons=comps, conclusion_held=(all(held) if held else None), conclusions=concl,
        setup=setup_rows(src.root, root), images=identities([a.name for a in m.arms], m.runtime, src.root, root),
        client=client_rows(src.root, root, [lv.concurrency for lv in src.summary.levels]),
        notes=notes(src, run, bool(run.trust.get("signed")), m.runtime, m.model.path, m.model.digest)
        + [n for n in [sequential_note(src.summary, new), note(until) if until else None] if n])
    pieces = predicate(bundle)
    key, _ = runner_key(opts.key)
    with deferred_interrupts():  # unsealed to sealed again in one step, as kit report does
        bundle.remove_provenance()
        copy_source(src.root, bundle)
        bundle.write_json("reproduce.json", report)
        bundle.write_bytes("reproduce.md", markdown(report, str(root)).encode())
        flags = run.flags.model_dump()
        if opts.allow_untrusted_source or "allow_untrusted_source" in flags:
            flags["allow_untrusted_source"] = bool(flags.get("allow_untrusted_source")) or opts.allow_untrusted_source
        run.flags = RunFlags.model_validate(flags)
        run.reproduces = Reproduces(source=src.ref, verdict=report.verdict, file="reproduce.json")
        bundle.write_json("run.json", run)
        sign_provenance(bundle, key, predicate=pieces.with_source(src.ref, flags))
    return report
