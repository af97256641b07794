"""Rendering of a run's progress on the terminal (rich); the loop itself knows nothing of it."""

from __future__ import annotations

import io
import sys
from typing import IO, TextIO, cast

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from kit.experiment.options import RunResult
from kit.plan import Cell, LevelPlan
from kit.plumbing.interrupts import output_closed
from kit.plumbing.printable import printable


class _Closable(io.TextIOBase):
    """stderr for the progress lines: a write that meets a closed pipe (`kit run M 2>&1 | head`) stops the run as
    an interrupt does (``kit.plumbing.interrupts.output_closed``), instead of failing whatever wrote it."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, s: str) -> int:
        try:
            n = self.raw.write(s)
            self.raw.flush()
        except BrokenPipeError:
            output_closed()
        return n

    def flush(self) -> None:
        try:
            self.raw.flush()
        except BrokenPipeError:
            output_closed()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()


class RichEvents:
    """Shows cell, level, requests done, tokens/s and ETA; plain lines when not on a terminal."""

    def __init__(self, console: Console | None = None) -> None:
        # stderr closed (`2>&-`, a daemon): rich's own fallback, a console writing nowhere
        self.console = console or (Console(file=cast(IO[str], _Closable(sys.stderr))) if sys.stderr is not None
                                   else Console(stderr=True))
        self.live = self.console.is_terminal
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.cell_label = ""

    def message(self, text: str) -> None:
        self.console.print(printable(text), markup=False, highlight=False)

    def cell_started(self, cell: Cell, position: int, total: int) -> None:
        self.cell_label = f"[{position}/{total}] {cell.id}"
        self.console.print(f"cell {self.cell_label}: starting server", markup=False, highlight=False)

    def level_started(self, cell: Cell, level: LevelPlan) -> None:
        if not self.live:
            return
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} req"),
            TextColumn("{task.fields[rate]}"), TextColumn("ETA {task.fields[eta]}"), TimeElapsedColumn(),
            console=self.console, transient=True,
        )
        self.progress.start()
        self.task = self.progress.add_task(f"{self.cell_label} c={level.concurrency}", total=level.requests,
                                           rate="", eta="?")

    def level_progress(self, cell: Cell, level: LevelPlan, done: int, total: int, tokens_per_s: float,
                       eta_s: float | None) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=done, rate=f"{tokens_per_s:,.0f} tok/s",
                                 eta=f"{eta_s:.0f}s" if eta_s is not None else "?")

    def level_done(self, cell: Cell, level: LevelPlan, ok: int, errors: int, client_bound: bool) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        flag = "  CLIENT-BOUND: not a clean result" if client_bound else ""
        self.console.print(f"  {cell.id} c={level.concurrency}: {ok} ok, {errors} errors{flag}",
                           markup=False, highlight=False)

    def cell_done(self, cell: Cell, status: str, reason: str | None) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        tail = f": {reason.splitlines()[0]}" if reason else ""
        self.console.print(printable(f"cell {cell.id}: {status}{tail}"), markup=False, highlight=False)


def render_result(result: RunResult, out: TextIO = sys.stdout) -> None:
    lines = [f"bundle: {result.bundle}", f"status: {result.status}", *(f"note: {n}" for n in result.notices)]
    if result.verdicts:
        lines += ["verdicts:", *(f"  {line}" for line in result.verdicts)]
    lines += [f"next: {step}" for step in result.next_steps]
    for line in lines:
        print(printable(line), file=out)  # a notice may quote a server's words
