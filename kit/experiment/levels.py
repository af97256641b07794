"""One level of one cell: scrape the server's metrics, drive the load, scrape again, judge the result.

The scrapes before and after a level are every sample of /metrics as {"name{labels}": value} (None when the
server has none), bounded and parsed by prometheus_client (``kit.telemetry.scrape_all``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kit.bundle import Bundle
from kit.errors import LoadError, ServerError
from kit.experiment.options import Events
from kit.experiment.workloads import Workloads
from kit.files.cell import LevelOutcome
from kit.load import LevelSpec, LoadSession, Progress
from kit.manifest import Manifest
from kit.plan import Cell, LevelPlan
from kit.runtime import RunningServer, ServerSpec
from kit.telemetry import LevelSampler, scrape_all


def level_spec(m: Manifest, cell: Cell, lv: LevelPlan, base_url: str,
               workload: tuple[str, int] | None = None) -> LevelSpec:
    """``workload``: the level's workload file and its largest max_tokens (kit.experiment.workloads)."""
    req = m.load.request
    return LevelSpec(
        base_url=base_url, endpoint=m.load.endpoint, model=m.model.served_name,
        concurrency=lv.concurrency, requests=lv.requests, warmup_requests=lv.warmup,
        prompt_tokens=m.load.prompt_tokens, output_tokens=workload[1] if workload else m.load.output_tokens,
        seed=m.load.seed + lv.concurrency, request_timeout_s=m.load.request_timeout_s,
        processes=0 if m.load.processes == "auto" else m.load.processes, dialect=m.load.dialect,
        cpus=m.load.cpus, tags={"arm": cell.arm, "repeat": cell.repeat, "level": lv.concurrency},
        **m.load.arrival_at(lv.concurrency), window=m.load.arrival.window,
        workload=workload[0] if workload else None, body_fields=dict(req.body_fields()),
        seed_per_request=req.seed_per_request, headers=dict(req.headers), header_env=dict(req.header_env),
        secret_env=list(m.server.pass_env),
        ca_bundle=req.ca_bundle.resolved() if req.ca_bundle else None, verify_tls=req.verify_tls,
    )


@dataclass
class LevelRunner:
    """Runs the levels of the cells of one run against a live server."""

    m: Manifest
    bundle: Bundle
    events: Events
    gpus: list[int] = field(default_factory=list)  # NVML indices the telemetry samples (empty: none)
    workloads: Workloads | None = None

    def run(self, cell: Cell, lv: LevelPlan, server: RunningServer, spec: ServerSpec,
            load: LoadSession) -> LevelOutcome:
        rel = f"cells/{cell.id}/level-{lv.concurrency}"
        self.events.level_started(cell, lv)
        metrics = spec.base_url + "/metrics"
        before, unscraped = scrape_all(metrics, context=spec.ssl_context)

        def progress(p: Progress) -> None:
            rate = p.out_tokens / p.elapsed_s if p.elapsed_s > 0 else 0.0
            eta = (p.total - p.done) * p.elapsed_s / p.done if p.done else None
            self.events.level_progress(cell, lv, p.done, p.total, rate, eta)

        def server_gone() -> bool:
            try:
                server.check_alive()
            except ServerError:
                return True
            return False

        if self.workloads is None:
            self.workloads = Workloads(self.m, self.bundle)
        workload = self.workloads.path_for(lv)
        # ---- telemetry (kit.telemetry): /metrics (when the server has one) and NVML about once a second
        series = f"{rel}/telemetry.jsonl"
        with LevelSampler(metrics if before is not None else None, self.gpus,
                          lambda s: self.bundle.append_jsonl(series, s.model_dump(mode="json")),
                          context=spec.ssl_context, metrics_note=unscraped) as sampler:
            res = load.run_level(level_spec(self.m, cell, lv, spec.base_url, workload), self.bundle.path(rel),
                                 on_progress=progress, should_stop=server_gone)
        self.bundle.write_json(f"{rel}/telemetry.json", sampler.stop())
        # ---- end telemetry
        after, _ = scrape_all(metrics, context=spec.ssl_context)
        if before is not None or after is not None:
            self.bundle.write_json(f"{rel}/server_metrics.json", {"before": before, "after": after})
        self.events.level_done(cell, lv, res.ok, res.errors, res.client_bound)
        server.check_alive()  # a server that died mid-level fails the cell with its exit code and log tail
        if res.ok == 0:
            raise LoadError(f"level {lv.concurrency} of {cell.id}: all {res.errors} requests failed",
                            hint=f"see {rel}/records.jsonl and cells/{cell.id}/server.log")
        return LevelOutcome(ok=res.ok, errors=res.errors, wall_s=round(res.wall_s, 3), warmup_s=round(res.warmup_s, 3),
                            client_bound=res.client_bound, client_bound_reasons=res.client_bound_reasons)
