"""The manifest's name rule (experiments, arms, the baseline): one place for models.py and analysis.py."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

NAME_RE = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
Name = Annotated[str, Field(pattern=NAME_RE, description="Lower-case name: letters, digits, '_', '.', '-'.")]
