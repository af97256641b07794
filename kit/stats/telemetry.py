"""The telemetry of a level, read descriptively: the decode batch the server actually ran (running requests,
median and max over the samples), whether the level was queue-bound, and the GPUs' clocks, power and use.

Queue-bound (a level that measured queueing, not a batch of ``c``): in more than half of the samples requests were
queued while others ran (queued > 0 and running > 0: a request alone in its prefill, which servers count as queued,
is not queueing). The first tick is skipped (it falls in the level's start, before every user has sent), and at least
``MIN_SAMPLES`` samples after it are needed; otherwise None ("too short to tell"). A running batch that never reached
the level's concurrency is *not* queue-bound by itself (an open loop's ``c`` is only the cap on requests in flight,
which an under-loaded server never reaches): it is a separate, descriptive note (``batch_note``). Nothing here is
tested between arms.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import ValidationError

from kit.errors import BundleError
from kit.files.read import read_file
from kit.files.telemetry import LevelTelemetry, TelemetryFile, TelemetrySample
from kit.plumbing.jsontypes import loads
from kit.stats.numbers import round_sig
from kit.stats.shapes import SummaryDoc

MIN_SAMPLES = 10  # samples after the first tick; fewer: too short to tell
MAX_LINE = 1 << 20  # a sample line: at most max_series short series and a few GPUs (well under this)
MAX_LINES = 1_000_000


def read_samples(path: Path) -> Iterator[TelemetrySample]:
    """The samples of a ``telemetry.jsonl`` (lines that are too long or do not validate are skipped)."""
    try:
        with open(path, "rb") as f:
            for n, raw in enumerate(iter(lambda: f.readline(MAX_LINE + 1), b"")):
                if n >= MAX_LINES:
                    return
                if len(raw) > MAX_LINE:
                    while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
                        pass
                    continue
                try:
                    yield TelemetrySample.model_validate(loads(raw))
                except (ValueError, ValidationError):  # TooDeep is a ValueError
                    continue
    except FileNotFoundError:
        return
    except OSError as e:
        raise BundleError(f"{path}: cannot read: {e}") from None


def _med(xs: Sequence[float]) -> float | None:
    return round_sig(float(statistics.median(xs))) if xs else None


def _max(xs: Sequence[float]) -> float | None:
    return round_sig(float(max(xs))) if xs else None


def queue_bound(running: Sequence[float], queued: Sequence[float], concurrency: int) -> tuple[bool | None, str | None]:
    """(queue-bound?, why) from the running and queued series of a level at ``concurrency`` (sample order; the
    first tick is skipped). None: cannot tell (no running metric, no queued metric, or too few samples)."""
    if not running:
        return None, "the server exposes no running-request metric"
    if len(queued) != len(running):
        return None, "the server exposes no queued-request metric in every sample"
    both = list(zip(running[1:], queued[1:], strict=True))
    if len(both) < MIN_SAMPLES:
        return None, f"too short to tell ({len(both)} samples after the first tick, fewer than {MIN_SAMPLES})"
    waiting = sum(q > 0 and r > 0 for r, q in both)
    share = 100 * waiting / len(both)
    if waiting / len(both) > 0.5:
        return True, f"requests queued behind a running batch in {share:.0f} % of samples"
    return False, None


def batch_note(running: Sequence[float], concurrency: int) -> str | None:
    """A descriptive note when the running batch never reached ``concurrency`` (not by itself queue-bound)."""
    if not running or max(running) >= concurrency:
        return None
    return f"the running batch never reached {concurrency} (max {max(running):g})"


def level_telemetry(level_dir: Path, concurrency: int) -> LevelTelemetry | None:
    """The figures of one cell's level (None: it has no telemetry)."""
    samples = list(read_samples(level_dir / "telemetry.jsonl"))
    if not samples:
        return None
    server = [s.server for s in samples if s.server is not None]
    running = [v.running for v in server if v.running is not None]
    queued = [v.queued for v in server if v.queued is not None]
    kv = [v.kv_cache_usage for v in server if v.kv_cache_usage is not None]
    gen = [(s.t_s, s.server.generated_tokens) for s in samples
           if s.server is not None and s.server.generated_tokens is not None]
    tok_s = None
    if len(gen) >= 2 and gen[-1][0] > gen[0][0]:
        tok_s = round_sig((gen[-1][1] - gen[0][1]) / (gen[-1][0] - gen[0][0]))
    gpus = [s.gpus for s in samples if s.gpus]
    clocks = [float(g.sm_clock_mhz) for gs in gpus for g in gs if g.sm_clock_mhz is not None]
    power = [sum(g.power_w for g in gs if g.power_w is not None) for gs in gpus
             if any(g.power_w is not None for g in gs)]
    util = [float(g.util_pct) for gs in gpus for g in gs if g.util_pct is not None]
    mem = [float(g.memory_used_mib) for gs in gpus for g in gs if g.memory_used_mib is not None]
    # the series of samples that carry both counts, in order (queue_bound pairs them)
    pairs = [(v.running, v.queued) for v in server if v.running is not None and v.queued is not None]
    if pairs:
        bound, why = queue_bound([r for r, _ in pairs], [q for _, q in pairs], concurrency)
    else:
        bound, why = queue_bound(running, [], concurrency)
    cpu = None
    if (level_dir / "telemetry.json").is_file():
        try:
            tf = read_file(level_dir, "telemetry.json", TelemetryFile)
        except BundleError:
            tf = None
        cpu = tf.cpu_pct if tf is not None else None
        if tf is not None and not running and tf.first_metrics_error:  # say why, not "exposes none"
            why = f"no running-request metric was read: {tf.first_metrics_error}"
    return LevelTelemetry(
        samples=len(samples), gpus=max((len(g) for g in gpus), default=0), running_median=_med(running),
        running_max=_max(running),
        queued_median=_med(queued), queued_max=_max(queued),
        queued_share=round_sig(sum(q > 0 for q in queued) / len(queued)) if queued else None,
        kv_cache_usage_max=_max(kv), server_tok_s=tok_s, sm_clock_mhz_median=_med(clocks),
        power_w_median=_med(power), util_pct_median=_med(util), memory_used_mib_max=_max(mem),
        queue_bound=bound, queue_bound_reason=why if bound or bound is None else None,
        batch_note=batch_note(running, concurrency), sampler_cpu_pct=cpu)


def with_telemetry(doc: SummaryDoc, root: Path) -> SummaryDoc:
    """``doc`` with each cell level's telemetry figures under ``cells[].levels[c].telemetry`` (where it has
    any); everything else unchanged."""
    for cell in doc["cells"]:
        for level, figures in cell["levels"].items():
            got = level_telemetry(Path(root) / "cells" / cell["id"] / f"level-{level}", int(level))
            if got is not None:
                out = got.model_dump(mode="json")
                if out.get("batch_note") is None:  # added later, descriptive: absent when there is none, so
                    out.pop("batch_note", None)    # summaries written before it still recompute
                figures["telemetry"] = out  # type: ignore[typeddict-unknown-key]
    return doc
