"""What the server really ran: samplers of the server's Prometheus metrics and of NVML that run in a thread while
a level runs and append a time series to the cell (``kit.files.telemetry``); ``kit.stats.telemetry`` reads it,
the load driver never does."""

from __future__ import annotations

import ssl

from kit.telemetry.prom import ScrapeError, all_samples, fetch
from kit.telemetry.sampler import LevelSampler, Limits

__all__ = ["LevelSampler", "Limits", "ScrapeError", "scrape_all"]


_LIMITS = Limits()


def scrape_all(url: str, limits: Limits = _LIMITS, timeout_s: float = 5.0,
               context: ssl.SSLContext | None = None) -> tuple[dict[str, float] | None, str | None]:
    """Every sample of ``url`` (a server's /metrics) as ``{"name{labels}": value}``, bounded like the sampler's
    scrapes (``timeout_s`` for the GET: it runs between levels, not once a second); None and why when it cannot be
    had (no /metrics, or one refused for a bound: the report says which)."""
    try:
        body = fetch(url, timeout_s=timeout_s, max_bytes=limits.max_response_bytes, context=context)
        return all_samples(body.decode("utf-8"), max_parsed=limits.max_parsed_samples), None
    except ScrapeError as e:
        return None, str(e)
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 ({e.reason} at byte {e.start})"
