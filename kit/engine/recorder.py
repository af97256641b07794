"""sglang's expert-distribution recorder for the embedded engine, as far as kit reads it: the same flag
(``--expert-distribution-recorder-mode per_pass``), the same endpoints (``/start_expert_distribution_record``,
``/stop_expert_distribution_record``, ``/dump_expert_distribution_record``, GET or POST, 200 with a line of text;
500 when the recorder is off) and the same dump: ``torch.save`` of ``{"records": [{"forward_pass_id", "rank",
"gatherer_key", "global_physical_count": int32 [layers, experts]}], "last_physical_to_logical_map": int64
[layers, experts]}`` into ``$SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR`` (default /tmp) as
``expert_distribution_recorder_<time>_0.pt`` (sglang 0.5.23's ``_DetailAccumulator``). As sglang's, it counts
every routed slot (``topk_ids``) of every forward pass, prefill and decode, after OEA. Writing the dump needs
torch (imported only then); without it the dump answers 500."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
from aiohttp import web

MODES = ("per_pass",)
DUMP_ENV = "SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"
MAX_RECORDS = 100_000  # passes kept while recording; later ones are dropped (the dump says how many)


class ExpertRecorder:
    def __init__(self, mode: str | None = None) -> None:
        self.mode = mode
        self.recording = False
        self.pass_id = 0
        self.records: list[tuple[int, npt.NDArray[np.int64]]] = []
        self.dropped = 0

    def on_pass(self, counts: npt.NDArray[np.int64]) -> None:
        """One forward pass's counts per layer and expert."""
        self.pass_id += 1
        if not self.recording:
            return
        if len(self.records) >= MAX_RECORDS:
            self.dropped += 1
            return
        self.records.append((self.pass_id, counts))

    def start(self) -> None:
        self.records, self.dropped, self.recording = [], 0, True

    def stop(self) -> None:
        self.recording = False

    def dump(self) -> Path:
        import torch  # only here: the engine itself needs numpy alone

        layers, experts = self.records[0][1].shape if self.records else (0, 0)
        data = {"records": [{"forward_pass_id": i, "rank": 0, "gatherer_key": "primary",
                             "global_physical_count": torch.from_numpy(c.astype(np.int32))} for i, c in self.records],
                "last_physical_to_logical_map": torch.arange(experts, dtype=torch.int64).repeat(layers, 1)}
        folder = Path(os.environ.get(DUMP_ENV, "/tmp"))
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"expert_distribution_recorder_{time.time()}_0.pt"
        torch.save(data, str(path))
        self.records, self.dropped = [], 0
        return path


def add_recorder_routes(app: web.Application, recorder: ExpertRecorder) -> None:
    async def control(request: web.Request) -> web.Response:
        if recorder.mode is None:
            return web.Response(status=500, text="Please set --expert-distribution-recorder-mode to use the "
                                "expert distribution recorder.\n")
        action = request.path.split("_", 1)[0].lstrip("/")
        if action == "start":
            recorder.start()
            return web.Response(text="Start recording the expert distribution.\n")
        if action == "stop":
            recorder.stop()
            return web.Response(text="Stop recording the expert distribution.\n")
        try:
            recorder.dump()
        except (ImportError, OSError) as e:
            return web.Response(status=500, text=f"dump failed: {e}\n")
        return web.Response(text="Dump expert distribution record.\n")

    for action in ("start", "stop", "dump"):
        app.router.add_route("*", f"/{action}_expert_distribution_record", control)
