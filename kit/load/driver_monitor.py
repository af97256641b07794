"""Driver-process side (imported only inside ``python -m kit.load.driver``): the record writer thread and
the self-monitoring greenlets (scheduling lag, CPU per window) of one level."""

from __future__ import annotations

import locust  # noqa: F401  (first: gevent monkey-patching, see kit.load.driver)

# isort: split
import _queue
import json
import os
import resource
import time
from array import array

import gevent
from gevent.monkey import get_original

from kit.load._config import DriverConfig

perf_ns = time.perf_counter_ns
_native_thread = get_original("_thread", "start_new_thread")
_native_lock = get_original("_thread", "allocate_lock")
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class RecordWriter:
    """Serialises and appends records on a native thread, so a slow disk never stalls the event loop.

    Each record is written (unbuffered: one ``write``) as soon as the thread gets it. The thread also keeps
    every content-chunk offset, for the gap statistics at the end of the level. It touches no gevent
    object: a native queue, a native lock.
    """

    def __init__(self, path: str) -> None:
        self.file = open(path, "ab", buffering=0)  # noqa: SIM115 - closed by the thread
        self.queue: _queue.SimpleQueue[tuple[dict[str, object], list[int]] | None] = _queue.SimpleQueue()
        self.offsets = array("q")   # chunk_ns of every record, concatenated
        self.lengths = array("q")   # number of chunks per record
        self.error: BaseException | None = None
        self._done = _native_lock()
        self._done.acquire()
        _native_thread(self._run, ())

    def put(self, rec: dict[str, object], chunk_ns: list[int]) -> None:
        """``chunk_ns`` is ``rec["chunk_ns"]``, passed typed for the gap statistics."""
        self.queue.put((rec, chunk_ns))

    def close(self) -> None:
        """Flush everything and stop the thread; blocks the process (only at the end of the level)."""
        self.queue.put(None)
        self._done.acquire()
        if self.error is not None:
            raise RuntimeError(f"writing records failed: {self.error!r}") from self.error

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - reported by close()
            self.error = exc
        finally:
            self.file.close()
            self._done.release()

    def _loop(self) -> None:
        q, dumps, write = self.queue, _ENCODER.encode, self.file.write
        while True:
            item = q.get()
            if item is None:
                return
            rec, chunks = item
            write((dumps(rec) + "\n").encode())  # unbuffered: one write per record
            self.offsets.extend(chunks)
            self.lengths.append(len(chunks))
            if not q.empty():
                os.sched_yield()  # let the event loop in between records (it matters under SCHED_FIFO)




class Monitor:
    """Self-monitoring during the level: scheduling lag and CPU per window."""

    def __init__(self, cfg: DriverConfig) -> None:
        self.cfg = cfg
        self.lag_ns = array("q")
        self.cpu_windows: list[float] = []
        self.greenlets: list[gevent.Greenlet] = []

    def start(self) -> None:
        for fn in (self._lag_probe, self._cpu_sampler):
            self.greenlets.append(gevent.spawn(fn))

    def stop(self) -> None:
        gevent.killall(self.greenlets)

    def _lag_probe(self) -> None:
        interval = self.cfg.lag_probe_interval_s
        want = int(interval * 1e9)
        while True:
            t = perf_ns()
            gevent.sleep(interval)
            now = perf_ns()
            self.lag_ns.append(max(0, now - t - want))

    def _cpu_sampler(self) -> None:
        interval = self.cfg.cpu_sample_interval_s
        c0, t0 = cpu_seconds(), time.perf_counter()
        while True:
            gevent.sleep(interval)
            c1, t1 = cpu_seconds(), time.perf_counter()
            self.cpu_windows.append((c1 - c0) / max(t1 - t0, 1e-9))
            c0, t0 = c1, t1


