"""Cumulative engine counters rendered in the Prometheus text format.

All counters only grow, so a client can scrape ``/metrics`` before and after a window and take the
differences. ``*_sum``/``*_count`` pairs are exposed as Prometheus summaries (without quantiles).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def _fmt(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) and not value.is_integer() else str(int(value))


@dataclass
class EngineMetrics:
    """Counters updated by the scheduler (on the event loop thread only)."""

    layers: int
    info: dict[str, str]
    decode_steps: int = 0
    prefill_steps: int = 0
    decode_tokens: int = 0
    prefill_tokens: int = 0
    batch_size_sum: int = 0
    step_seconds_sum: float = 0.0
    prefill_seconds_sum: float = 0.0
    requests_running: int = 0
    requests_waiting: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    unique_experts_sum: list[int] = field(default_factory=list)
    unique_experts_count: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.unique_experts_sum = [0] * self.layers
        self.unique_experts_count = [0] * self.layers

    def record_decode(self, batch: int, seconds: float, unique_per_layer: list[int]) -> None:
        """Account one decode step of ``batch`` sequences."""
        self.decode_steps += 1
        self.decode_tokens += batch
        self.batch_size_sum += batch
        self.step_seconds_sum += seconds
        for layer, n in enumerate(unique_per_layer):
            self.unique_experts_sum[layer] += n
            self.unique_experts_count[layer] += 1

    def record_prefill(self, tokens: int, seconds: float) -> None:
        """Account one prefill step over ``tokens`` prompt tokens."""
        self.prefill_steps += 1
        self.prefill_tokens += tokens
        self.prefill_seconds_sum += seconds

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        out: list[str] = []

        def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{sample} {_fmt(value)}" for sample, value in samples)

        family(
            "kit_engine_steps_total",
            "counter",
            "Engine steps by phase.",
            [
                ('kit_engine_steps_total{phase="decode"}', self.decode_steps),
                ('kit_engine_steps_total{phase="prefill"}', self.prefill_steps),
            ],
        )
        family("kit_engine_decode_tokens_total", "counter", "Tokens produced by decode steps.",
               [("kit_engine_decode_tokens_total", self.decode_tokens)])
        family("kit_engine_prefill_tokens_total", "counter", "Prompt tokens run through prefill steps.",
               [("kit_engine_prefill_tokens_total", self.prefill_tokens)])
        family("kit_engine_batch_size", "summary", "Sequences per decode step.",
               [("kit_engine_batch_size_sum", self.batch_size_sum),
                ("kit_engine_batch_size_count", self.decode_steps)])
        unique: list[tuple[str, float]] = []
        for layer in range(self.layers):
            label = f'{{layer="{layer}"}}'
            unique.append((f"kit_engine_unique_experts_sum{label}", self.unique_experts_sum[layer]))
            unique.append((f"kit_engine_unique_experts_count{label}", self.unique_experts_count[layer]))
        family("kit_engine_unique_experts", "summary",
               "Distinct experts with nonzero weight per layer per decode step.", unique)
        family("kit_engine_step_seconds", "summary", "Wall time of decode steps.",
               [("kit_engine_step_seconds_sum", self.step_seconds_sum),
                ("kit_engine_step_seconds_count", self.decode_steps)])
        family("kit_engine_prefill_seconds", "summary", "Wall time of prefill steps.",
               [("kit_engine_prefill_seconds_sum", self.prefill_seconds_sum),
                ("kit_engine_prefill_seconds_count", self.prefill_steps)])
        family("kit_engine_requests_running", "gauge", "Requests in the running batch.",
               [("kit_engine_requests_running", self.requests_running)])
        family("kit_engine_requests_waiting", "gauge", "Requests waiting to join the batch.",
               [("kit_engine_requests_waiting", self.requests_waiting)])
        family("kit_engine_requests_finished_total", "counter", "Requests that generated all their tokens.",
               [("kit_engine_requests_finished_total", self.requests_finished)])
        family("kit_engine_requests_aborted_total", "counter",
               "Requests dropped before the end (client gone or server stopping).",
               [("kit_engine_requests_aborted_total", self.requests_aborted)])
        labels = ",".join(f'{key}="{value}"' for key, value in self.info.items())
        family("kit_engine_info", "gauge", "Static engine configuration.",
               [(f"kit_engine_info{{{labels}}}", 1)])
        return "\n".join(out) + "\n"
