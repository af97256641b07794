"""Server set-ups the OEA hook refuses, because under them it would silently compute something else.

Called once per non-draft MoE layer by the patched ``TopK.__init__`` (images/oea/apply.py) when the layer's k0
is set, at model load, after sglang has resolved and published its arguments. Each refusal names the flag and
the fix. Reads sglang's resolved configuration (``sglang.srt.runtime_context``: what the model runner uses, after
deprecated spellings such as ``--enable-dp-attention`` have been folded in), never the raw command line.

- DP attention (``--attn-dp-size`` > 1, or the deprecated ``--dp-size N --enable-dp-attention``): an attention-DP
  rank with no requests runs IDLE, not DECODE, and skips OEA while the others apply it to the same gathered
  tokens, so the TP shards of one expert see different routings; padded gather rows cannot be masked either.
- all-to-all expert parallelism (``--moe-a2a-backend`` other than none: deepep, mooncake, ...): each rank routes
  only its own tokens, so the active set becomes per rank (the paper's per-device variant, not this one).
- speculative decoding (``--speculative-algorithm``): target forwards are TARGET_VERIFY, never DECODE, so OEA
  would never run and the "OEA" arm would be the baseline with a forced STANDARD top-k format.
- padded decode graphs (``--disable-cuda-graph-padding`` not set): in TP-only serving sglang keeps no count of a
  padded batch's real rows, so padding rows would join OEA's active set and change real tokens' experts.
"""

from __future__ import annotations

from dataclasses import dataclass


class OeaSetupError(ValueError):
    """The server's configuration is one the OEA hook cannot serve; the message names the flags and the fixes."""


@dataclass(frozen=True)
class ServerSetup:
    """The resolved sglang settings the refusals look at."""

    attn_dp_size: int
    moe_a2a_backend: str
    speculative_algorithm: str | None
    disable_cuda_graph_padding: bool


def refusals(s: ServerSetup) -> list[str]:
    """One line per unsupported setting (empty: OEA may run)."""
    out = []
    if s.attn_dp_size > 1:
        out.append(
            f"DP attention (--attn-dp-size {s.attn_dp_size}, or --dp-size N --enable-dp-attention): an idle"
            " attention-DP rank runs IDLE and skips OEA while the others apply it to the same gathered tokens;"
            " serve TP-only (--attn-dp-size 1, no --enable-dp-attention)"
        )
    if s.moe_a2a_backend != "none":
        out.append(
            f"all-to-all expert parallelism (--moe-a2a-backend {s.moe_a2a_backend}): each rank routes only its own"
            " tokens, so OEA's active set would be per rank; use --moe-a2a-backend none"
        )
    if s.speculative_algorithm is not None:
        out.append(
            f"speculative decoding (--speculative-algorithm {s.speculative_algorithm}): target forwards are"
            " TARGET_VERIFY, never DECODE, so OEA would never run; remove --speculative-algorithm (and its"
            " --speculative-* options)"
        )
    if not s.disable_cuda_graph_padding:
        out.append(
            "padded decode CUDA graphs (--disable-cuda-graph-padding is not set): sglang keeps no count of a padded"
            " batch's real rows in TP-only serving, so padding rows would join OEA's active set; set"
            " --disable-cuda-graph-padding in every arm (with --cuda-graph-max-bs-decode at most"
            " --max-running-requests, so that every decode batch size is captured exactly)"
        )
    return out


def check(s: ServerSetup, k0: int) -> None:
    """Raise OeaSetupError naming every unsupported setting."""
    problems = refusals(s)
    if problems:
        raise OeaSetupError(
            f"SGLANG_OEA_K0={k0} (kit OEA patch) refuses this server configuration: " + "; ".join(problems)
        )


def setup_from_sglang() -> ServerSetup:
    """The resolved settings from sglang 0.5.23's published configuration (the same reads sglang itself makes:
    ``get_parallel().attn_dp_size``, ``get_exec().moe.moe_a2a_backend``, ``get_spec().speculative_algorithm``,
    ``get_exec().graph.disable_cuda_graph_padding``)."""
    from sglang.srt.runtime_context import get_exec, get_parallel, get_spec

    algorithm = get_spec().speculative_algorithm
    return ServerSetup(
        attn_dp_size=int(get_parallel().attn_dp_size),
        moe_a2a_backend=str(get_exec().moe.moe_a2a_backend),
        speculative_algorithm=None if algorithm is None else str(algorithm),
        disable_cuda_graph_padding=bool(get_exec().graph.disable_cuda_graph_padding),
    )


def refuse_unsupported_setup(k0: int) -> None:
    """What the patched ``TopK.__init__`` calls for a layer whose k0 is set."""
    check(setup_from_sglang(), k0)
