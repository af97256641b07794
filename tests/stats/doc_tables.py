"""Rewrite a simulation's table in a docs page: the lines between its begin and end markers (`make seq-table`)."""

from __future__ import annotations

from pathlib import Path


def replace_between(path: Path, begin: str, end: str, rows: list[str]) -> None:
    text = path.read_text()
    start, stop = text.index(begin) + len(begin), text.index(end)
    path.write_text(text[:start] + "\n" + "\n".join(rows) + "\n" + text[stop:])
