"""The report's workload section: what the requests carried (``workload/index.json``) and, per level, how the
server's ``usage.prompt_tokens`` compared with the workload's own count (the records' ``prompt_flag``). Read from
the bundle's files as ``kit.report.overhead`` is; nothing here changes a figure or a verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kit.files.workload import WorkloadIndex
from kit.plumbing.jsontypes import loads

MAX_LINES = 10_000_000
MAX_CLIENT_BYTES = 16 << 20


@dataclass
class LevelCheck:
    requests: int = 0
    flagged: int = 0
    unchecked: int = 0  # no usage.prompt_tokens from the server
    expected: list[int] = field(default_factory=list)
    served: list[int] = field(default_factory=list)
    first_flag: str | None = None


def level_checks(root: Path) -> dict[int, LevelCheck]:
    out: dict[int, LevelCheck] = {}
    for f in sorted(root.glob("cells/*/level-*/records.jsonl")):
        level = int(f.parent.name.split("-", 1)[1])
        c = out.setdefault(level, LevelCheck())
        with f.open("rb") as lines:
            for n, line in enumerate(lines):
                if n >= MAX_LINES:
                    break
                try:
                    rec = loads(line)
                except ValueError:
                    continue
                if "prompt_tokens_expected" not in rec:
                    continue
                c.requests += 1
                if isinstance(rec.get("prompt_tokens_expected"), int):
                    c.expected.append(rec["prompt_tokens_expected"])
                if isinstance(rec.get("usage_prompt_tokens"), int):
                    c.served.append(rec["usage_prompt_tokens"])
                else:
                    c.unchecked += 1
                if rec.get("prompt_flag"):
                    c.flagged += 1
                    c.first_flag = c.first_flag or str(rec["prompt_flag"])
    return {k: v for k, v in out.items() if v.requests}


def _span(values: list[int]) -> str:
    if not values:
        return "–"
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}–{hi}"


def connection_section(root: Path) -> list[str]:
    """How the load reached the server, from the first level's client.json: nothing for http; https verified
    (against which CA file), or a loud warning when verify_tls was off."""
    for f in sorted(root.glob("cells/*/level-*/client.json"))[:1]:
        try:
            spec = loads(f.read_bytes()[:MAX_CLIENT_BYTES]).get("spec") or {}
        except (ValueError, AttributeError):
            return []
        url = str(spec.get("base_url", ""))
        if not url.startswith("https://"):
            return []
        if spec.get("verify_tls") is False:
            return ["## Connection", "", f"> **⚠ UNVERIFIED https** to `{url}`: load.request.verify_tls was false, "
                    "so any certificate was accepted (a server other than the one meant could have answered).", ""]
        ca = spec.get("ca_bundle")
        return ["## Connection", "", f"https to `{url}`, the certificate and name verified against "
                + (f"`{ca}` (load.request.ca_bundle, its sha256 in the signed manifest)." if ca else
                   "the system's CA certificates."), ""]
    return []


def workload_section(root: Path) -> list[str]:
    path = root / "workload" / "index.json"
    if not path.is_file():
        return []
    try:
        index = WorkloadIndex.model_validate_json(path.read_bytes())
    except ValueError:
        return ["## Workload", "", "> ⚠ workload/index.json cannot be read.", ""]
    tok = index.tokenizer + (f" (tokenizer.json sha256 {index.tokenizer_sha256[:12]}…)" if index.tokenizer_sha256
                             else "")
    lines = ["## Workload", "", f"Dataset `{index.dataset}`, counted by `{tok}`"
             + (f"; the chat template adds {index.template_overhead} tokens to one user message" if
                index.template_overhead else "") + ". Sources: "
             + ", ".join(f"`{s.path}` (sha256 {s.sha256[:12]}…, {s.bytes} bytes)" for s in index.sources) + ".", "",
             "| level | requests | prompt tokens (workload) | prompt tokens (server) | off by > 1 |",
             "|---:|---:|---|---|---:|"]
    checks = level_checks(root)
    for level, c in sorted(checks.items()):
        flag = f"**⚠ {c.flagged}**" if c.flagged else "0"
        lines.append(f"| {level} | {c.requests} | {_span(c.expected)} | {_span(c.served)}"
                     + (f" ({c.unchecked} without usage)" if c.unchecked else "") + f" | {flag} |")
    flagged = [(lv, c) for lv, c in sorted(checks.items()) if c.flagged]
    if flagged:
        lines += ["", "> **⚠ The server counted other prompt lengths than the workload's tokenizer** on "
                  + ", ".join(f"{c.flagged} request(s) at c={lv}" for lv, c in flagged)
                  + f" (first: {flagged[0][1].first_flag}): the prompts it ran are not the lengths asked for. Is "
                  "load.tokenizer the served model's?"]
    return [*lines, ""]
