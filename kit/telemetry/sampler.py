"""The level sampler: a thread of the parent process that, while a level runs, reads the server's ``/metrics``
and NVML about once a second and appends each reading to the level's ``telemetry.jsonl``.

It never touches the load: the load runs in the driver processes (``kit.load``), and the sampler only asks
the server the questions a Prometheus server would. Its own cost is measured (``time.thread_time``: the CPU
this thread used) and written into ``telemetry.json``. Bounded: per scrape (``kit.telemetry.prom``), per level
(``max_samples`` ticks), and in time (it stops with the level; ``stop`` waits at most one scrape's timeout).
A tick that fails to scrape still records NVML, and says why the scrape failed; any other failure of a tick (a bug,
a value kit did not foresee) is counted as that tick's error and sampling goes on. If the thread ends early anyway,
``telemetry.json``'s ``stopped_early`` says why: a dead sampler is never silent.
"""

from __future__ import annotations

import math
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from kit.files.telemetry import GpuSample, TelemetryBounds, TelemetryFile, TelemetrySample
from kit.nvml import GpuProbe, NvmlError, NvmlProbe
from kit.telemetry.gpu import open_probe, read_gpu
from kit.telemetry.prom import ScrapeError, scrape

Writer = Callable[[TelemetrySample], object]


MAX_CPU_SHARE = 0.05  # of one core the /metrics scrapes may take on average: past it, ticks are skipped


@dataclass(frozen=True)
class Limits:
    interval_s: float = 1.0
    scrape_timeout_s: float = 0.8
    max_response_bytes: int = 8 << 20
    max_parsed_samples: int = 200_000
    max_series: int = 512
    max_samples: int = 86_400  # a day of one level at 1 Hz

    def bounds(self) -> TelemetryBounds:
        return TelemetryBounds(interval_s=self.interval_s, scrape_timeout_s=self.scrape_timeout_s,
                               max_response_bytes=self.max_response_bytes,
                               max_parsed_samples=self.max_parsed_samples, max_series=self.max_series,
                               max_samples=self.max_samples)


class LevelSampler:
    """``with LevelSampler(...) as s: run the level``; then ``s.result`` is the level's ``TelemetryFile``.

    ``metrics_url`` None: no server metrics (GPU only); ``gpus`` empty: no NVML. ``write`` receives each
    sample as it is taken (the caller appends it to the bundle); ``context``: an https server's TLS settings."""

    def __init__(self, metrics_url: str | None, gpus: list[int], write: Writer, *,
                 probe: Callable[[], GpuProbe] | None = None, limits: Limits = Limits(),
                 context: ssl.SSLContext | None = None, metrics_note: str | None = None) -> None:
        self.metrics_url = metrics_url
        self.context = context
        self.gpus = list(gpus)
        self.write = write
        self.limits = limits
        self._probe_factory = probe
        self._stop = threading.Event()
        self._closed = False  # set by stop(), under _write_lock: no sample is written after stop() returns
        self._write_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="kit-telemetry", daemon=True)
        self._t0 = 0.0
        self._unix0: float | None = None
        self._cpu_s = 0.0
        self.samples = 0
        self.missed = 0
        self.throttled = 0
        self.errors = 0
        # no metrics_url: why /metrics was not sampled (the scrape before the level failed, e.g. refused for a bound)
        self.first_error: str | None = (f"/metrics before the level: {metrics_note}; not sampled"
                                        if metrics_url is None and metrics_note else None)
        self._scrape_cpu_s = 0.0  # the CPU the last scrape took (kit.telemetry.prom.parse), for the throttle
        self.dropped = 0
        self.sources: dict[str, str] = {}
        self.gpu_unavailable: str | None = None
        self.stopped_early: str | None = None
        self.result: TelemetryFile | None = None

    def __enter__(self) -> LevelSampler:
        self._t0 = time.monotonic()
        self._unix0 = time.time()
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> TelemetryFile:
        """End sampling (waits for the tick in progress, at most one scrape's timeout and NVML's reads)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.limits.scrape_timeout_s + 5.0)
            if self._thread.is_alive():
                self.stopped_early = self.stopped_early or "the sampler thread did not stop in time"
        with self._write_lock:  # a thread still in its tick writes nothing more (its level may be signed next)
            self._closed = True
        wall = time.monotonic() - self._t0
        self.result = TelemetryFile(
            metrics_url=self.metrics_url, started_unix=self._unix0, gpus=self.gpus,
            gpu_unavailable=self.gpu_unavailable,
            sources=dict(sorted(self.sources.items())), bounds=self.limits.bounds(), samples=self.samples,
            missed_ticks=self.missed, throttled_ticks=self.throttled, metrics_errors=self.errors,
            first_metrics_error=self.first_error,
            series_dropped=self.dropped, stopped_early=self.stopped_early, wall_s=round(wall, 3),
            cpu_s=round(self._cpu_s, 4), cpu_pct=round(100.0 * self._cpu_s / wall, 3) if wall > 0 else 0.0)
        return self.result

    # ---- the thread

    def _run(self) -> None:
        cpu0 = time.thread_time()
        probe: GpuProbe | None = None
        try:
            probe = self._open_gpus()
            nxt = self._t0 + self.limits.interval_s / 2  # the first tick once the level's requests are in flight
            while not self._stop.wait(max(0.0, nxt - time.monotonic())):
                if self.samples >= self.limits.max_samples:
                    self.stopped_early = f"reached max_samples {self.limits.max_samples}"
                    break
                try:
                    sample = self._tick(probe)
                except Exception as e:  # noqa: BLE001 -- one bad tick never ends the level's sampling
                    sample = self._failed(e)
                with self._write_lock:
                    if self._closed:
                        break
                    try:
                        self.write(sample)
                    except OSError as e:
                        self.stopped_early = f"could not write a sample: {e}"
                        break
                self.samples += 1
                self._cpu_s = time.thread_time() - cpu0
                nxt += self.limits.interval_s
                if (share := self._scrape_cpu_s / self.limits.interval_s) > MAX_CPU_SHARE:
                    # a costly /metrics is asked less often: the sampler must not load the machine it measures
                    extra = math.ceil(share / MAX_CPU_SHARE) - 1
                    self.throttled += extra
                    nxt += extra * self.limits.interval_s
                now = time.monotonic()
                if now > nxt:  # the tick ran past its slot: skip the slots it covered
                    skipped = int((now - nxt) // self.limits.interval_s) + 1
                    self.missed += skipped
                    nxt += skipped * self.limits.interval_s
        except Exception as e:  # noqa: BLE001 -- recorded in telemetry.json, not a traceback on stderr
            self.stopped_early = f"the sampler failed: {type(e).__name__}: {e}"[:500]
        finally:
            if probe is not None:
                try:
                    probe.shutdown()
                except Exception as e:  # noqa: BLE001
                    self.stopped_early = self.stopped_early or f"NVML shutdown failed: {type(e).__name__}: {e}"
            self._cpu_s = time.thread_time() - cpu0

    def _failed(self, e: Exception) -> TelemetrySample:
        """The sample of a tick that raised something other than a ScrapeError: counted as a metrics error."""
        why = f"the tick failed: {type(e).__name__}: {e}"[:500]
        self.errors += 1
        self.first_error = self.first_error or why
        return TelemetrySample(t_s=round(time.monotonic() - self._t0, 4), metrics_error=why)

    def _open_gpus(self) -> GpuProbe | None:
        if not self.gpus:
            return None
        probe: GpuProbe = NvmlProbe() if self._probe_factory is None else self._probe_factory()
        self.gpu_unavailable = open_probe(probe, self.gpus)
        return None if self.gpu_unavailable else probe

    def _tick(self, probe: GpuProbe | None) -> TelemetrySample:
        t = round(time.monotonic() - self._t0, 4)
        sample = TelemetrySample(t_s=t)
        if self.metrics_url is not None:
            lim = self.limits
            cpu0 = time.thread_time()
            try:
                got = scrape(self.metrics_url, timeout_s=lim.scrape_timeout_s, max_bytes=lim.max_response_bytes,
                             max_parsed=lim.max_parsed_samples, max_series=lim.max_series, context=self.context)
            except ScrapeError as e:
                self.errors += 1
                self.first_error = self.first_error or str(e)
                sample.metrics_error = str(e)
            else:
                sample.server, sample.series, sample.scrape_ms = got.quantities, got.series, round(got.elapsed_ms, 3)
                self.sources.update(got.sources)
                self.dropped += got.dropped
            finally:
                self._scrape_cpu_s = time.thread_time() - cpu0
        if probe is not None:
            gpus: list[GpuSample] = []
            try:
                gpus = [read_gpu(probe, i) for i in self.gpus]
            except NvmlError as e:
                sample.gpu_error = f"NVML: {e.reason}"
            else:
                sample.gpus = gpus
        return sample
