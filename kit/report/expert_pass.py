"""The expert pass in report.md: per arm, the distinct experts per MoE layer of a decode step (mean, p50, p90 over
the pass's decode steps, layer by layer) and by batch size, from ``experts/<arm>/expert_distribution.json``.
Descriptive: an untimed server per arm, never tested, never part of a verdict."""

from __future__ import annotations

from pathlib import Path

from kit.errors import BundleError
from kit.files.expert_pass import ExpertPassFile
from kit.files.read import read_file
from kit.files.summary import Summary


def arm_passes(root: Path, summary: Summary) -> dict[str, ExpertPassFile]:
    """arm -> its expert_distribution.json, for the arms that have one (unreadable ones are skipped)."""
    out: dict[str, ExpertPassFile] = {}
    for arm in dict.fromkeys(c.arm for c in summary.cells):
        try:
            out[arm] = read_file(root, f"experts/{arm}/expert_distribution.json", ExpertPassFile)
        except BundleError:
            continue
    return out


def expert_pass_section(passes: dict[str, ExpertPassFile]) -> list[str]:
    if not passes:
        return []
    first = next(iter(passes.values()))
    lines = ["## Distinct experts per MoE layer per decode step (untimed, descriptive: not tested, not in any "
             "verdict)", "",
             f"One extra server per arm after the timed cells, with `{' '.join(first.server_args)}`: {first.requests} "
             f"requests of {first.prompt_tokens} words and {first.output_tokens} tokens, {first.concurrency} at a "
             f"time (seed {first.seed}). A decode step is a forward pass of at most {first.concurrency} tokens "
             f"(its count per layer / top-{first.top_k}); the number is the experts with a non-zero count.", "",
             "| arm | decode steps | mean | per layer: mean / p50 / p90 | by batch: mean |", "|---|---|---|---|---|"]
    for arm, f in passes.items():
        if f.status != "ok":
            lines.append(f"| {arm} | - | - | failed: {f.error} | - |")
            continue
        layers = ", ".join(f"L{x.layer} {x.mean:.2f} / {x.p50:g} / {x.p90:g}" for x in f.layers)
        batches = ", ".join(f"{b.batch}: {b.mean:.2f}" for b in f.by_batch)
        lines.append(f"| {arm} | {f.decode_passes} | {f.mean_distinct:.2f} of {f.experts} | {layers} | {batches} |")
    return [*lines, ""]
