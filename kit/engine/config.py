"""Configuration of the embedded engine's model (pure data; no numpy import)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_MIN_STEP_S = 10.0  # the most --min-step-ms may ask of a decode step (scheduler and command line)


@dataclass(frozen=True)
class ModelConfig:
    """Shape and routing of the random MoE decoder.

    ``oea_k0 == 0`` means plain top-``top_k`` routing on decode steps; ``1 <= oea_k0 <= top_k`` turns on
    OEA for decode steps (prefill always uses plain top-k).
    ``router_skew`` is the standard deviation of a fixed per-expert router bias: trained routers are
    not uniform (some experts are more popular than others), and without it random tokens would spread
    over all experts far more evenly than a real model does.
    ``context_memory`` is the longest time constant (in tokens) of the cheap causal context mixer that
    stands in for attention: its channels decay with time constants spread from 2 to this many tokens.
    """

    seed: int = 0
    experts: int = 64
    top_k: int = 8
    oea_k0: int = 0
    layers: int = 4
    hidden: int = 256
    expert_ffn: int = 512
    vocab: int = 1024
    router_skew: float = 1.5
    context_memory: int = 16

    def validate(self) -> None:
        """Raise ``ValueError`` for an inconsistent configuration."""
        for name in ("experts", "top_k", "layers", "hidden", "expert_ffn", "vocab"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) must not exceed experts ({self.experts})")
        if not 0 <= self.oea_k0 <= self.top_k:
            raise ValueError(f"oea_k0 must be 0 (off) or in [1, top_k={self.top_k}], got {self.oea_k0}")
        if self.router_skew < 0:
            raise ValueError(f"router_skew must be >= 0, got {self.router_skew}")
        if self.context_memory < 2:
            raise ValueError(f"context_memory must be >= 2, got {self.context_memory}")

    @property
    def expert_bytes(self) -> int:
        """Bytes of one expert's weights (W1 and W2, float32)."""
        return 2 * self.hidden * self.expert_ffn * 4

    @property
    def weight_bytes(self) -> int:
        """Approximate bytes of all weights."""
        per_layer = self.experts * self.expert_bytes + self.hidden * self.experts * 4 + self.experts * 4
        return self.layers * per_layer + self.vocab * self.hidden * 4
