"""Review: open-loop settings the manifest models accept although the run cannot be what was asked for.

- ``rates`` has no lower bound: 1e-6 requests/s is a level that lasts years (``kit plan`` prints ~1e6 min, exit 0).
- An open-loop cap is not tied to the requests: levels [50_000_000] with 36 requests passes, and the driver
  spawns one Locust user (a greenlet and a connection pool) per unit of cap (kit/load/_level.py:49 splits
  ``spec.concurrency``), before the level's clock starts.
- ``burstiness`` only needs > 0: at 1e-5 every gamma gap underflows to 0, the schedule collapses to t = 0 and the
  normalisation to count / rate is skipped (arrivals.schedule_s: ``factor = 1.0``), so the level is one burst.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kit.load.arrivals import Arrival, schedule_s
from kit.manifest.load import Load


def _load(**arrival: object) -> dict[str, object]:
    return {"levels": [16], "requests_per_level": [36], "arrival": {"process": "poisson", "rates": [4], **arrival}}


@pytest.mark.xfail(strict=True, reason="review: no lower bound on an open-loop rate")
def test_a_rate_that_makes_a_level_last_years_is_refused() -> None:
    with pytest.raises(ValidationError):
        Load.model_validate(_load(rates=[1e-6]))


@pytest.mark.xfail(strict=True, reason="review: an open-loop cap far above the requests spawns that many users")
def test_an_open_loop_cap_far_above_the_requests_is_refused() -> None:
    with pytest.raises(ValidationError):
        Load.model_validate({**_load(), "levels": [50_000_000]})


@pytest.mark.xfail(strict=True, reason="review: a tiny burstiness collapses the schedule to one burst at t=0")
def test_a_tiny_burstiness_keeps_the_rate_or_is_refused() -> None:
    try:
        Load.model_validate(_load(process="gamma", burstiness=1e-5))
    except ValidationError:
        return
    due = schedule_s(Arrival("gamma", 4.0, 1e-5, 1), 36)
    assert due[-1] == pytest.approx(36 / 4.0)  # today: 0.0, every request due at once
