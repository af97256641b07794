"""The manifest's ``expert_pass``: per arm, after the timed cells, one more server of that arm with the
expert-distribution recorder on (``server_args``), never timed. kit starts the recorder, sends a fixed, seeded
set of requests through the load's endpoint, stops and dumps, reads rank 0's dump from the folder it gave the
server (``dump_env``) and keeps, per MoE layer, the distinct experts of every decode step
(``experts/<arm>/expert_distribution.json``). The timed cells never run with the recorder: sglang captures its
hooks into the decode CUDA graphs, so a server with the recorder on pays for it in every step (docs/oea.md)."""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import shutil
import ssl
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from kit.errors import KitError
from kit.experiment.cells import CellRunner, gate_report
from kit.experiment.expert_dump import DumpError, DumpStats, read_dump
from kit.experiment.quality import ask_completion
from kit.experiment.signals import deferred_interrupts, signals_as_interrupts
from kit.files.expert_pass import MAX_RAW_PASSES, ExpertPassFile
from kit.load.prompts import ENDPOINT_PATHS
from kit.manifest import Manifest
from kit.manifest.expert_pass import ExpertPass
from kit.plan import Cell
from kit.plumbing.net import request
from kit.plumbing.redact import redact
from kit.runtime import RunningServer, ServerSpec
from kit.server_spec import server_spec

RECORDER_PATHS = ("/start_expert_distribution_record", "/stop_expert_distribution_record",
                  "/dump_expert_distribution_record")  # sglang 0.5.23's http_server.py (GET or POST)
IN_CONTAINER = "/kit-expert-dump"
_TEXT = ("the of and to in is was for on that with as by at from his her an which or be are this had not but they "
         "were one all their has have been who its new more after also first two can time would other some into "
         "over than only such made most years city state world when then between")


def prompts(p: ExpertPass) -> list[str]:
    """The pass's prompts: ``requests`` texts of ``prompt_tokens`` words drawn with ``seed`` (the same per arm)."""
    rng, words = random.Random(p.seed), _TEXT.split()
    return [" ".join(rng.choice(words) for _ in range(p.prompt_tokens)) for _ in range(p.requests)]


def _control(base_url: str, path: str, timeout: float, context: ssl.SSLContext | None) -> None:
    try:
        status, _ = request(base_url + path, method="POST", body=b"", timeout=timeout, max_bytes=64 * 1024,
                            context=context)
    except (OSError, ValueError, http.client.HTTPException) as e:
        raise DumpError(f"POST {path}: {e}") from None
    if not 200 <= status < 300:
        raise DumpError(f"POST {path}: HTTP {status} (is the recorder on? server_args)")


def drive(p: ExpertPass, m: Manifest, base_url: str, context: ssl.SSLContext | None = None) -> int:
    """Send the pass's requests, ``concurrency`` at a time; the number answered."""
    url = base_url + ENDPOINT_PATHS[m.load.endpoint]

    def one(text: str) -> bool:
        fields = {"model": m.model.served_name, "max_tokens": p.output_tokens, "temperature": 0, "ignore_eos": True}
        payload = {**fields, "messages": [{"role": "user", "content": text}]} if m.load.endpoint == "chat" else {
            **fields, "prompt": text}
        return ask_completion(url, json.dumps(payload).encode(), p.request_timeout_s, context)[1] is None

    with ThreadPoolExecutor(max_workers=p.concurrency) as pool:
        return sum(pool.map(one, prompts(p)))


def record(p: ExpertPass, m: Manifest, base_url: str, dump_dir: Path, out: ExpertPassFile,
           context: ssl.SSLContext | None = None) -> None:
    """start -> requests -> stop -> dump on a ready server (https verified by ``context``), then read rank 0's
    dump into ``out``."""
    _control(base_url, RECORDER_PATHS[0], p.request_timeout_s, context)
    out.answered = drive(p, m, base_url, context)
    _control(base_url, RECORDER_PATHS[1], p.request_timeout_s, context)
    _control(base_url, RECORDER_PATHS[2], p.request_timeout_s, context)
    files = sorted(dump_dir.glob("expert_distribution_recorder_*_0.pt")) or sorted(
        dump_dir.glob("expert_distribution_recorder_*.pt"))
    if not files:
        raise DumpError(f"the server wrote no expert_distribution_recorder_*.pt into {p.dump_env}")
    path = files[-1]
    stats = DumpStats(read_dump(path), p.top_k, p.concurrency)  # bounded: MAX_DUMP_BYTES
    with path.open("rb") as f:
        out.dump_file, out.dump_bytes = path.name, path.stat().st_size
        out.dump_sha256 = hashlib.file_digest(f, "sha256").hexdigest()
    out.passes, out.decode_passes, out.prefill_passes = stats.passes, len(stats.decode), stats.prefill
    out.experts, out.layers, out.by_batch = stats.experts, stats.layers(), stats.by_batch()
    out.mean_distinct, out.raw = stats.mean(), stats.raw()
    out.raw_truncated = len(stats.decode) > MAX_RAW_PASSES
    if not stats.decode:
        raise DumpError(f"no decode pass among the dump's {stats.passes} passes")


def pass_spec(cells: CellRunner, arm: str, dump_dir: Path) -> ServerSpec:
    m, p = cells.m, cells.m.expert_pass
    assert p is not None
    log = cells.bundle.path(f"experts/{arm}/server.log")
    spec = server_spec(m, Cell(index=len(cells.plan.cells), arm=arm, repeat=0), cells.bundle.run_id, log,
                       image=cells.image_ids.get(arm), gpus=cells.gpu_ids,
                       nodes=cells.nodes.hosts if cells.nodes else ())
    docker = m.runtime == "docker"
    return replace(spec, name=f"{spec.name[:100]}-experts", command=[*spec.command, *p.server_args],
                   env={**spec.env, p.dump_env: IN_CONTAINER if docker else str(dump_dir)},
                   labels={**spec.labels, "kit.cell": f"experts-{arm}"},
                   dump_mount=(str(dump_dir), IN_CONTAINER) if docker else None)


def run_expert_passes(cells: CellRunner) -> None:
    """Every arm's pass not yet ``ok`` in the bundle (a resumed run keeps those it has)."""
    p = cells.m.expert_pass
    if p is None:
        return
    for arm in (a.name for a in cells.m.arms):
        rel = f"experts/{arm}/expert_distribution.json"
        if cells.bundle.exists(rel) and cells.bundle.read(rel, ExpertPassFile).status == "ok":
            continue
        keep_attempt(cells.bundle.path(f"experts/{arm}"))
        cells.bundle.path(f"experts/{arm}").mkdir(parents=True, exist_ok=True)
        cells.events.message(f"expert pass ({arm}): untimed, with {' '.join(p.server_args)}")
        gates(cells, arm, "before")
        cells.bundle.write_json(rel, one_pass(cells, arm))
        gates(cells, arm, "after")


def keep_attempt(folder: Path) -> None:
    """An earlier attempt of an arm's pass (a resumed run) moves to ``<folder>-a<n>``: never deleted."""
    if not folder.is_dir():
        return
    n = 1
    while folder.with_name(f"{folder.name}-a{n}").exists():
        n += 1
    folder.rename(folder.with_name(f"{folder.name}-a{n}"))


def gates(cells: CellRunner, arm: str, phase: str) -> None:
    """The cells' gates around the pass's server, kept in ``experts/<arm>/gates.jsonl``."""
    report = gate_report(cells.m, phase, cells.bundle.run_id, cells.nodes)
    cells.bundle.append_jsonl(f"experts/{arm}/gates.jsonl", report.as_dict())
    if report.gpus:
        cells.gpu_ids = [g["uuid"] for g in report.gpus]
    report.raise_if_failed()


def one_pass(cells: CellRunner, arm: str) -> ExpertPassFile:
    p = cells.m.expert_pass
    assert p is not None
    out = ExpertPassFile(arm=arm, status="failed", requests=p.requests, concurrency=p.concurrency,
                         prompt_tokens=p.prompt_tokens, output_tokens=p.output_tokens, top_k=p.top_k, seed=p.seed,
                         server_args=p.server_args)
    dump_dir = Path(tempfile.mkdtemp(prefix="kit-expert-dump-"))
    dump_dir.chmod(0o777)  # a container's user writes the dump
    servers: list[RunningServer] = []
    t0 = time.monotonic()
    with deferred_interrupts():  # first: a Ctrl-C anywhere in the pass still stops its server
        try:
            with signals_as_interrupts():
                spec = pass_spec(cells, arm, dump_dir)
                with deferred_interrupts():  # started and recorded in one step
                    servers.append(cells.runtime.start(spec))
                servers[0].wait_ready()
                record(p, cells.m, spec.base_url, dump_dir, out, spec.ssl_context)
            out.status = "ok"
        except (KitError, DumpError, OSError) as e:
            out.error = redact(e.message if isinstance(e, KitError) else str(e))  # it may quote the server
        finally:
            for server in servers:
                try:
                    server.stop()
                except KitError as e:
                    out.status, out.error = "failed", f"{out.error or ''} stopping the server: {e.message}".strip()
            shutil.rmtree(dump_dir, ignore_errors=True)
    out.wall_s = round(time.monotonic() - t0, 3)
    return out
