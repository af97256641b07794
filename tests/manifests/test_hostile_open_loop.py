"""Open-loop settings the run could not honour are refused by the manifest models (exit 3, naming the field).

- A rate so low that the level's requests span more than a day (1e-6 requests/s: years).
- An open-loop cap above the requests the level schedules (levels [50_000_000] with 36 requests): it can never
  bind, and the driver would start one Locust user per unit of cap.
- A burstiness below 0.01 (1e-5: every gamma gap underflows to 0 and the level is one burst at t = 0); the
  schedule itself refuses a collapse rather than return it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from kit.load.arrivals import Arrival, schedule_s
from kit.manifest.load import Load

ROOT = Path(__file__).resolve().parents[2]


def _load(**arrival: object) -> dict[str, object]:
    return {"levels": [16], "requests_per_level": [36], "arrival": {"process": "poisson", "rates": [4], **arrival}}


def test_a_rate_that_makes_a_level_last_years_is_refused() -> None:
    with pytest.raises(ValidationError):
        Load.model_validate(_load(rates=[1e-6]))


def test_an_open_loop_cap_far_above_the_requests_is_refused() -> None:
    with pytest.raises(ValidationError):
        Load.model_validate({**_load(), "levels": [50_000_000]})


def test_a_tiny_burstiness_keeps_the_rate_or_is_refused() -> None:
    try:
        Load.model_validate(_load(process="gamma", burstiness=1e-5))
    except ValidationError:
        return
    due = schedule_s(Arrival("gamma", 4.0, 1e-5, 1), 36)
    assert due[-1] == pytest.approx(36 / 4.0)


def test_each_refusal_names_the_field_and_the_fix() -> None:
    for extra, words in [({"arrival": {"process": "poisson", "rates": [1e-6]}}, "load.arrival.rates[0]"),
                         ({"levels": [50_000_000]}, "load.levels[0] = 50000000"),
                         ({"arrival": {"process": "gamma", "rates": [4], "burstiness": 1e-5}}, "burstiness")]:
        with pytest.raises(ValidationError, match=re.escape(words)):
            Load.model_validate({**_load(), **extra})
    # the smallest burstiness accepted keeps its rate, and the schedule refuses what the models refuse
    assert schedule_s(Arrival("gamma", 4.0, 0.01, 1), 36)[-1] == pytest.approx(9.0)
    with pytest.raises(ValueError, match=r"burstiness must be >= 0\.01"):
        schedule_s(Arrival("gamma", 4.0, 1e-5, 1), 36)
    with pytest.raises(ValueError, match="span"):
        schedule_s(Arrival("poisson", 1e-6, 1.0, 1), 36)


def test_kit_plan_exits_3_naming_the_rate(tmp_path: Path) -> None:
    text = (ROOT / "experiments" / "demo-poisson.yaml").read_text().replace("rates: [4, 12]", "rates: [4, 1.0e-6]")
    path = tmp_path / "slow.yaml"
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "kit", "plan", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 3, proc.stderr
    assert "load.arrival.rates[1] = 1e-06" in proc.stderr and "Traceback" not in proc.stderr
