"""The one UTC timestamp format of kit's files (RFC 3339, microseconds, ``Z``) and the compact stamp
used in bundle names."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> str:
    """``2026-12-01T03:41:55.123456Z``: every time kit writes into a file."""
    return format_utc(datetime.now(UTC))


def format_utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_utc(text: object) -> datetime | None:
    """A timestamp as kit's files hold it (``utc_now``'s, or any ISO 8601 one) read back; None where it is none."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def utc_compact() -> str:
    """``20261201T034155Z``: the time in a bundle's directory name."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
