"""``LoadSession``: the driver processes of a run, started once and reused level after level, cell after cell.

Starting a driver means a Python interpreter and ``import locust`` (about a second, more on a busy
machine: 0.66 s of CPU measured on 2 cores); a session pays that once per process instead of once per level
(``kit run`` holds one for all its cells: a run of 24 cells started 24 drivers before, now one). Every level
is still measured on its own: the driver builds fresh connections, users, counters and self-monitoring for
each level, so records, ``client.json`` and its flags mean exactly what they mean for a lone ``run_level``.

A level that does not end cleanly (an error, ``should_stop``, ``KeyboardInterrupt``) stops its drivers
at once; the next level starts new ones. A level needing more processes than the session holds starts
the missing ones; one needing fewer leaves the rest idle. ``close()`` (the end of the ``with`` block,
on every exit path) stops every process through ``kit.plumbing.procs.stop_group``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from kit.load._level import LevelRun, ProgressRelay, finish, plan
from kit.load._procs import EXIT_WAIT_S, DriverProcess
from kit.load.spec import LevelResult, LevelSpec, Progress, preflight, process_count, validate
from kit.plumbing.affinity import parse_cpulist, pinned
from kit.plumbing.poll import poll_until


class LoadSession:
    """``with LoadSession(processes=1) as load: load.run_level(spec, out_dir)`` for each level of a cell.

    ``processes`` driver processes start at ``__enter__`` (they import Locust while the caller does
    something else, e.g. waits for the server); more start when a level needs them.
    """

    def __init__(self, processes: int = 1, cpus: str | None = None) -> None:
        self.prestart = max(0, processes)
        self.cpus = parse_cpulist(cpus) if cpus else None  # every driver runs on these (load.cpus)
        self._procs: list[DriverProcess] = []
        self._dir: Path | None = None
        self._spawned = 0

    def __enter__(self) -> LoadSession:
        try:
            self._take(self.prestart)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """The driver processes held now (for tests and diagnostics)."""
        return [p.pid for p in self._procs]

    def warm(self, processes: int) -> None:
        """Have ``processes`` live driver processes, starting the missing ones now (they import Locust while the
        caller does something else, e.g. waits for the server of the next cell)."""
        self._take(processes)

    def run_level(self, spec: LevelSpec, out_dir: Path, *, on_progress: Callable[[Progress], None] | None = None,
                  should_stop: Callable[[], bool] | None = None) -> LevelResult:
        """Run one level; see ``kit.load`` for what lands in ``out_dir``."""
        validate(spec)
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        records_path, client_path = out_dir / "records.jsonl", out_dir / "client.json"
        records_path.write_bytes(b"")
        client_path.unlink(missing_ok=True)
        preflight(spec.base_url)
        work = out_dir / ".driver"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        procs = self._take(process_count(spec))
        run = LevelRun(plan(spec, procs, work, records_path), records_path)
        relay = ProgressRelay(spec.requests, on_progress, run)
        finished: bool | None = None
        try:
            finished = run.run(relay.tick, should_stop)
        finally:
            if not finished:  # an error, should_stop or an interrupt: these drivers are not reused
                self._discard(procs)
            run.merge_parts()
        result = finish(spec, run.slots, records_path, client_path, bool(finished), run.start_ns)
        relay.final(result)
        shutil.rmtree(work, ignore_errors=True)
        return result

    def close(self) -> None:
        """Stop every driver process (end of input first, so idle ones leave on their own); idempotent."""
        procs, self._procs = self._procs, []
        try:
            for p in procs:
                p.close_input()
            poll_until(lambda: not any(p.alive() for p in procs), EXIT_WAIT_S)
        finally:
            self._discard(procs)
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None

    def _take(self, n: int) -> list[DriverProcess]:
        """The first ``n`` live processes, starting the missing ones (a process that died idle is replaced)."""
        for p in [p for p in self._procs if not p.alive()]:
            self._procs.remove(p)
            self._discard([p])
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="kit-load-"))
        while len(self._procs) < n:
            with pinned(self.cpus):
                self._procs.append(DriverProcess(self._dir / f"driver-{self._spawned}.stderr"))
            self._spawned += 1
        return self._procs[:n]

    def _discard(self, procs: list[DriverProcess]) -> None:
        """Stop these processes and drop them from the session, every one even if stopping one fails."""
        first: BaseException | None = None
        for p in procs:
            if p in self._procs:
                self._procs.remove(p)
            try:
                p.stop()
            except BaseException as exc:  # noqa: BLE001 - the others are stopped first, then it is raised
                first = first or exc
        if first is not None:
            raise first
