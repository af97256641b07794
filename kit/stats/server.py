"""The embedded engine's counters over a level: deltas between the scrapes before and after it."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping

from kit.stats.shapes import ServerFigures

Labels = tuple[tuple[str, str], ...]

_SAMPLE_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?$")
_LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _parse_samples(samples: object) -> dict[tuple[str, Labels], float]:
    out: dict[tuple[str, Labels], float] = {}
    if not isinstance(samples, Mapping):
        return out
    for key, value in samples.items():
        m = _SAMPLE_RE.match(str(key).strip())
        if m is None or not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            continue
        labels = tuple(sorted(_LABEL_RE.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(value)
    return out


def server_figures(metrics: Mapping[str, object] | None) -> ServerFigures | None:
    """Deltas of the embedded engine's counters over a level (None when the server exposes none of them)."""
    if not metrics or not isinstance(metrics.get("before"), Mapping) or not isinstance(metrics.get("after"), Mapping):
        return None  # without both scrapes there is no delta over the level
    before, after = _parse_samples(metrics["before"]), _parse_samples(metrics["after"])

    def delta(name: str, labels: Labels = ()) -> float | None:
        if (name, labels) not in after:
            return None
        return after[(name, labels)] - before.get((name, labels), 0.0)

    def mean_of(base: str, labels: Labels = ()) -> float | None:
        s, c = delta(base + "_sum", labels), delta(base + "_count", labels)
        return s / c if s is not None and c else None

    by_layer: dict[str, float] = {}
    for name, labels in sorted(after):
        if name == "kit_engine_unique_experts_sum":
            value = mean_of("kit_engine_unique_experts", labels)
            layer = dict(labels).get("layer", "")
            if value is not None:
                by_layer[layer] = value
    step = mean_of("kit_engine_step_seconds")
    out: ServerFigures = {
        "unique_experts_per_step": statistics.fmean(by_layer.values()) if by_layer else None,
        "unique_experts_by_layer": dict(sorted(by_layer.items(), key=lambda kv: _layer_key(kv[0]))),
        "step_ms": None if step is None else step * 1e3,
        "steps": delta("kit_engine_step_seconds_count"),
        "decode_batch": mean_of("kit_engine_batch_size"),
    }
    return out if any(v not in (None, {}) for v in out.values()) else None


def _layer_key(layer: str) -> tuple[int, str]:
    return (int(layer), "") if layer.isdigit() else (1 << 30, layer)
