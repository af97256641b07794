"""``reproduce.json`` and run.json's ``reproduces``: what `kit reproduce` re-ran, from which source, and whether it
reproduced (the method: docs/reproduce.md).

A reproduction bundle is an ordinary bundle of the same manifest, plus ``reproduce.json`` (the verdict, the setup
diff, the image identities), ``reproduce.md`` (the same in words) and ``source/`` (the source bundle's signed
provenance and the files the verdict and diff were drawn from, byte for byte: whoever holds the new bundle can check
that ``source/summary.json`` is what the source's runner signed, and recompute the verdict from the two summaries).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from kit.files import JsonObject
from kit.files.base import BundleFile, Loose

Verdict = Literal["reproduced", "inconsistent", "imprecise", "not_reproduced", "inconclusive"]
"""reproduced: the A/B effect (and, with analysis.reproduce.same_hardware, each arm) equivalent within the
pre-registered margin, its direction held; inconsistent: the new run lies outside the original's prediction interval
(the Holm-adjusted test of no difference rejects); imprecise: neither, or the comparison is withheld (client-bound,
too few cells). ``not_reproduced`` and ``inconclusive`` are what kits before the effect rule wrote (beyond / straddling
an absolute margin on every comparison): still read, never written."""


class SourceRef(Loose):
    """The source bundle as it was verified: where it came from and what identifies it."""

    path: str  # as given on the command line
    kind: Literal["directory", "archive"]
    top: str  # the bundle directory's name
    provenance_sha256: str  # sha256 of its provenance.dsse.json: it names every file's sha256, so the bundle
    archive_sha256: str | None = None  # transport checksum of the archive (kind archive)
    run_id: str
    experiment: str
    manifest_sha256: str
    signer: str  # kit verify's first line for it (who signed, trusted or not, by which line)
    trusted: bool  # the user's policy trusts its signer for kit-bundle
    allow_untrusted_source: bool = False  # --allow-untrusted-source was given (needed when trusted is false)


class Reproduces(Loose):
    """run.json's ``reproduces``: this bundle is a reproduction of the source (and what came of it)."""

    source: SourceRef
    verdict: Verdict
    file: str = "reproduce.json"


class Interval(Loose):
    low: float | None
    high: float | None


class CellCounts(Loose):
    original: int
    new: int


class ReproComparison(Loose):
    """One comparison of the two runs on the primary metric at one level.

    kind ``arm``: the arm's level in the new run against the original (ratio new/original of the geometric means of
    the cell statistics); kind ``effect``: the A/B effect (arm/baseline) in the new run against the original's
    (ratio of the two ratios). ``ratio_ci`` is the (1 - 2 alpha) interval whose inclusion in the margin is TOST.
    """

    kind: Literal["arm", "effect"]
    arm: str
    baseline: str | None = None  # kind effect
    level: int
    metric: str
    original: float | None  # kind arm: the cells' geometric mean; kind effect: the ratio arm/baseline
    new: float | None
    ratio: float | None  # new / original
    ratio_ci: Interval | None
    interval_confidence: float  # 1 - 2 alpha
    margin: float
    log_estimate: float | None
    log_se: float | None
    df: float | None
    p_equivalent: float | None  # TOST: the larger of the two one-sided p-values (< alpha: within the margin)
    p_different: float | None = None  # kits before the effect rule: the minimum-effect test (never written now)
    cells: CellCounts  # kind arm: that arm's ok cells; kind effect: the fewer of the two arms', per run
    status: str  # reproduced | inconsistent | imprecise | shift (an arm, not judged) | too_few_cells |
    #              client_bound | ttft_client_bound | error_rate_differs | ab_withheld | output_lengths_differ
    verdict: Verdict | None  # None: an arm's shift reported as a fact about the machines, outside the verdict
    repeats_needed: int | None = None  # imprecise: cells per arm in each run for 80 % TOST power at no difference
    reason: str = ""
    text: str
    judged: bool = True  # counts in the overall verdict (an effect; an arm only with same_hardware)
    p_zero: float | None = None  # two-sided p of no difference (the new run inside the prediction interval)
    p_zero_adjusted: float | None = None  # Holm-adjusted over the family (< alpha: inconsistent)
    margin_basis: Literal["effect", "absolute"] | None = None  # effect: margin x the original's effect
    direction_held: bool | None = None  # an effect the original found: the new run's points the same way


class Conclusion(Loose):
    """Does the original's A/B conclusion (primary metric, arm vs baseline, one level) hold in the new run?"""

    arm: str
    baseline: str
    level: int
    original_status: str  # the summaries' comparison status: significant | not_significant | <withheld reason>
    new_status: str
    original_change_pct: float | None
    new_change_pct: float | None
    held: bool | None  # None: withheld in either run, so not judged
    text: str


class SetupRow(Loose):
    what: str
    original: object = None
    new: object = None
    same: bool
    note: str = ""


class ImageIdentity(Loose):
    """One arm's image: the original's against the rebuilt one (docker runtime), or its server command (process)."""

    arm: str
    status: Literal["identical", "same_recipe", "different", "not_recorded"]
    original: str | None  # image ID, or the server command
    new: str | None
    differences: list[str] = Field(default_factory=list)


class ClientRow(Loose):
    """The load client at one level, in each run (worst cell): a client-bound level is never reproduced."""

    level: int
    run: Literal["original", "new"]
    processes: int | None
    usable_cores: int | None
    cpu_share_max: float | None
    lag_p99_ms_max: float | None
    client_bound_cells: list[str]


class UntilDecided(Loose):
    """`kit reproduce --until-decided`: where the new run stopped and why (its looks: reproduce-looks/<k>.json)."""

    looks: int  # taken
    most_looks: int  # design.repeats / 2
    stop: Literal["decided", "max_repeats"] | None
    stopped: str  # in words: "decided at look 2 of 6: every judged effect reproduced"
    cells_used: int  # the new run's cells the last look used
    cells_planned: int
    spending: str
    files: str = "reproduce-looks/"


class ReproduceFile(BundleFile):
    """The whole ``reproduce.json``."""

    file_pattern: ClassVar[str] = "reproduce.json"

    source: SourceRef
    verdict: Verdict
    primary: str
    margin: float  # analysis.reproduce_margin: the absolute margin (no effect found; arms with same_hardware)
    confidence: float  # the analysis' confidence: alpha = 1 - confidence per one-sided test
    counts: dict[str, int]  # verdict -> comparisons
    comparisons: list[ReproComparison]
    conclusion_held: bool | None
    conclusions: list[Conclusion]
    setup: list[SetupRow]
    images: list[ImageIdentity]
    client: list[ClientRow]
    notes: list[str] = Field(default_factory=list)
    method: str = "docs/reproduce.md"
    effect_margin: float | None = None  # analysis.reproduce.margin (None: written by a kit before the effect rule)
    same_hardware: bool = False  # analysis.reproduce.same_hardware: the arms' shifts count in the verdict
    until_decided: UntilDecided | None = None  # --until-decided: the verdict is its last look's

    def to_json(self) -> JsonObject:
        """Every field, defaults included: the file is written once, whole, by `kit reproduce`."""
        data: JsonObject = self.model_dump(mode="json")
        return data
