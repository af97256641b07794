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

Verdict = Literal["reproduced", "not_reproduced", "inconclusive"]
"""reproduced: equivalent within the margin; not_reproduced: different beyond it (or failure rates differ);
inconclusive: the interval straddles a margin bound, or the comparison is withheld (client-bound, too few cells)."""


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
    p_equivalent: float | None  # TOST: the larger of the two one-sided p-values (< alpha: reproduced)
    p_different: float | None  # minimum-effect test: beyond the margin on the estimate's side (< alpha: not)
    cells: CellCounts  # kind arm: that arm's ok cells; kind effect: the fewer of the two arms', per run
    status: str  # reproduced | not_reproduced | inconclusive | too_few_cells | client_bound | ttft_client_bound |
    #              error_rate_differs | ab_withheld | output_lengths_differ
    verdict: Verdict
    repeats_needed: int | None = None  # cells per arm in each run for the interval to decide (inconclusive)
    reason: str = ""
    text: str


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


class ReproduceFile(BundleFile):
    """The whole ``reproduce.json``."""

    file_pattern: ClassVar[str] = "reproduce.json"

    source: SourceRef
    verdict: Verdict
    primary: str
    margin: float
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

    def to_json(self) -> JsonObject:
        """Every field, defaults included: the file is written once, whole, by `kit reproduce`."""
        data: JsonObject = self.model_dump(mode="json")
        return data
