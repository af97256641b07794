"""The manifest's ``design`` section: how cells (arm x repeat) are ordered. Its own module so that models.py
stays under the size limit and the design's growth (sequential designs) has a place."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kit.manifest.fields import _Model


class Design(_Model):
    """How cells (arm x repeat) are ordered."""

    repeats: Annotated[int, Field(ge=1, le=1000)] = 3
    order: Literal["abba", "interleaved", "counterbalanced", "blocked", "random"] = Field(
        "abba",
        description="abba (default): counterbalanced A B B A A B ... with a random start (A B B A or B A A B, "
        "drawn with 'seed', recorded in plan.json; cancels linear drift, use an even number of repeats); "
        "interleaved: A B A B ...; counterbalanced: A B B A ... starting with the first arm; "
        "blocked: A A B B; random: shuffled with 'seed'.",
    )
    seed: int = Field(0, description="Seeds abba's start and random's shuffle.")
