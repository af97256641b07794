"""The manifest's ``design`` section: how cells (arm x repeat) are ordered, and (optionally) a sequential
design that stops when the primary family is decided. Its own module so that models.py stays under the size
limit."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from kit.manifest.fields import Seed, _Model


class Futility(_Model):
    """Non-binding futility: a comparison is decided "no effect as large as the margin" at a look when its
    two-sided ``confidence`` interval of the ratio lies inside [1/(1 + margin), 1 + margin]. Non-binding: the
    efficacy boundaries are computed as if it never stopped anything, so the family-wise error holds whether
    or not it does."""

    margin_pct: Annotated[float, Field(gt=0, le=100)] = Field(
        description="The smallest change of the primary metric that matters, in percent (e.g. 5: ±5 %).")
    confidence: Annotated[float, Field(ge=0.5, lt=1)] = 0.9


class Sequential(_Model):
    """Run until decided, within a budget: after each ABBA block (every arm twice) an interim look at the
    primary family with alpha spending; stop when every primary comparison is decided (efficacy or futility),
    at design.repeats (the maximum), or when max_minutes would be passed by another block."""

    spending: Literal["obrien-fleming", "pocock"] = Field(
        "obrien-fleming", description="Lan-DeMets alpha spending: O'Brien-Fleming-type (default: little alpha "
        "early, nearly the fixed design's at the end) or Pocock-type (more early, more at the end).")
    max_minutes: Annotated[float, Field(gt=0, le=10080)] | None = Field(
        None, description="A time budget: no block starts that the run's cells so far say would end past it; "
        "the look that stops for it spends all the alpha left.")
    futility: Futility | None = None


class Design(_Model):
    """How cells (arm x repeat) are ordered."""

    repeats: Annotated[int, Field(ge=1, le=1000)] = Field(
        3, description="Repeats per arm (cells per arm); with design.sequential, the most a run may make.")
    order: Literal["abba", "interleaved", "counterbalanced", "blocked", "random"] = Field(
        "abba",
        description="abba (default): counterbalanced A B B A A B ... with a random start (A B B A or B A A B, "
        "drawn with 'seed', recorded in plan.json; cancels linear drift, use an even number of repeats); "
        "interleaved: A B A B ...; counterbalanced: A B B A ... starting with the first arm; "
        "blocked: A A B B; random: shuffled with 'seed'.",
    )
    seed: Seed = Field(0, description="Seeds abba's start and random's shuffle (a 64-bit signed integer).")
    sequential: Sequential | None = Field(
        None, description="Absent: a fixed design (every planned cell runs). Present: look after each block "
                          "and stop when decided; see docs/statistics.md.")
    redo_client_bound: Annotated[int, Field(ge=0, le=3)] | None = Field(
        None, description="How often a cell whose load client was flagged client-bound (the guardrail that withholds "
                          "its level's verdict) is measured again right after it, before the next cell or look; every "
                          "flagged attempt stays in the bundle (redone/), recorded in run.json, excluded from the "
                          "statistics. Default: 1 where looks may stop the run (design.sequential, kit reproduce "
                          "--until-decided: a flagged cell would withhold every later look), else 0 (`kit run --resume "
                          "DIR --redo client-bound` re-measures after the run).")

    @model_validator(mode="after")
    def _blocks(self) -> Design:
        if self.sequential is not None and (self.order not in ("abba", "counterbalanced") or self.repeats % 2
                                            or self.repeats < 4):
            raise ValueError("design.sequential looks after each block of A B B A: it needs order abba or "
                             f"counterbalanced and an even design.repeats of at least 4 (got order {self.order}, "
                             f"repeats {self.repeats})")
        return self
