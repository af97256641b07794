"""Fixtures for the embedded engine tests (helpers live in engine_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from engine_helpers import SMALL, EngineProcess


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    """A small baseline engine shared by a test module."""
    proc = EngineProcess(SMALL, tmp_path_factory.mktemp("engine") / "engine.log")
    yield proc
    proc.stop()


@pytest.fixture
def start_engine(tmp_path: Path) -> Iterator[Callable[[list[str]], EngineProcess]]:
    """Factory: start engines with given args; all are stopped at the end of the test."""
    started: list[EngineProcess] = []

    def start(args: list[str]) -> EngineProcess:
        proc = EngineProcess(args, tmp_path / f"engine{len(started)}.log")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()
