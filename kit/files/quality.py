"""``cells/<arm>-r<k>/quality.json``: the untimed few-shot accuracy check of one cell (manifest ``quality``)."""

from __future__ import annotations

import math
from typing import ClassVar

from pydantic import BaseModel, Field

from kit.files.base import BundleFile


class QualityItem(BaseModel):
    index: int = Field(description="The item's line in the dataset (0-based).")
    label: str
    predicted: str | None = Field(description="The last number of the answer, or null when it has none.")
    ok: bool
    error: str | None = Field(None, description="Why there is no answer (HTTP status, timeout, bad body).")


class QualityFile(BundleFile):
    file_pattern: ClassVar[str] = "cells/*/quality.json"

    dataset: str
    dataset_sha256: str
    shots: int
    concurrency: int
    max_tokens: int
    asked: int
    correct: int
    no_number: int = Field(description="Answers without a number (counted wrong).")
    errors: int = Field(description="Questions without an answer (counted wrong).")
    accuracy: float
    interval_95: tuple[float, float] = Field(description="Wilson score interval of the accuracy.")
    wall_s: float
    items: list[QualityItem]


def wilson(correct: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of ``correct`` out of ``n`` (95 % by default): what ``interval_95`` holds."""
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(max(0.0, centre - half), 6), round(min(1.0, centre + half), 6)
