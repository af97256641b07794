"""`kit plan --itl-ms` takes a positive, finite time per token (review: 0, -1, nan and inf were accepted and printed
`about nan min` or `assuming -1 ms/token`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli import main
from kit.plan_timing import MAX_ITL_MS

DEMO = str(Path(__file__).resolve().parents[2] / "experiments" / "demo.yaml")


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "-inf", str(MAX_ITL_MS * 2)])
def test_a_non_positive_or_non_finite_itl_is_a_usage_error(value: str) -> None:
    r = CliRunner().invoke(main, ["plan", DEMO, f"--itl-ms={value}"])
    assert r.exit_code == 2, r.output
    assert "--itl-ms" in r.output and "above 0 and at most" in r.output


def test_a_positive_itl_plans() -> None:
    r = CliRunner().invoke(main, ["plan", DEMO, "--itl-ms", "0.5"])
    assert r.exit_code == 0, r.output
    assert "assuming 0.5 ms/token" in r.output
