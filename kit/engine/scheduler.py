"""Continuous batching for the embedded engine.

One asyncio task owns the batch. Each iteration of its loop

1. admits waiting requests (up to ``max_batch`` running in all, and up to ``prefill_budget`` prompt tokens
   per iteration, at least one request), prefills them together with plain top-k routing and emits
   their first token;
2. runs one decode step for the whole running batch (OEA when the model is configured for it) and
   emits one token per sequence, at the end of the step: ``min_step_s`` (``--min-step-ms``) gives a step a
   floor, the rest of it spent asleep, as an accelerator's fixed step time would be (long levels at little CPU).

Model steps run in a single worker thread (``loop.run_in_executor``) so the event loop keeps streaming
tokens while numpy works. Requests finish after ``max_tokens`` tokens (the toy model has no EOS, so
``ignore_eos`` is always in effect).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from kit.engine.config import MAX_MIN_STEP_S
from kit.engine.metrics import EngineMetrics
from kit.engine.model import MoEModel, StepResult
from kit.engine.recorder import ExpertRecorder

log = logging.getLogger("kit.engine")


class Finished:
    """Queue sentinel: the request generated all of its tokens."""


class Aborted:
    """Queue sentinel: the request was dropped (the server is stopping)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


Event = int | Finished | Aborted


@dataclass(eq=False)
class Request:
    """One generation request in the scheduler."""

    prompt: list[int]
    max_tokens: int
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    generated: int = 0
    last_token: int = -1
    state: np.ndarray | None = None
    cancelled: bool = False
    done: bool = False

    def cancel(self) -> None:
        """Called by the handler when the client went away; the scheduler drops it at the next step."""
        self.cancelled = True


class Scheduler:
    """Owns the waiting queue, the running batch and the model steps."""

    def __init__(
        self, model: MoEModel, metrics: EngineMetrics, max_batch: int, prefill_budget: int = 2048,
        recorder: ExpertRecorder | None = None, min_step_s: float = 0.0,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if not 0 <= min_step_s <= MAX_MIN_STEP_S:
            raise ValueError(f"min_step_s must be in [0, {MAX_MIN_STEP_S}], got {min_step_s}")
        self.model = model
        self.metrics = metrics
        self.max_batch = max_batch
        self.prefill_budget = prefill_budget
        self.min_step_s = min_step_s  # a decode step lasts at least this long (the rest asleep: no CPU)
        self.recorder = recorder or ExpertRecorder()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._wake = asyncio.Event()
        self._stopping = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kit-engine-step")
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the scheduler loop on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="kit-engine-scheduler")

    async def stop(self, timeout: float = 1.0) -> None:
        """Stop after the current step; abort every request still waiting or running."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            except TimeoutError:
                log.warning("scheduler step still running after %.1fs; aborting requests anyway", timeout)
        self._abort_all("server shutting down")
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._executor.shutdown(wait=False)

    def submit(self, request: Request) -> None:
        """Queue a request; it joins the batch at the next step."""
        if self._stopping:
            request.events.put_nowait(Aborted("server shutting down"))
            return
        self.waiting.append(request)
        self._update_gauges()
        self._wake.set()

    # ---------------------------------------------------------------------------------------- loop

    async def _loop(self) -> None:
        try:
            while not self._stopping:
                self._drop_cancelled()
                if not self.waiting and not self.running:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                admitted = self._admit()
                if admitted:
                    await self._prefill(admitted)
                if self.running and not self._stopping:
                    await self._decode()
        except Exception:  # pragma: no cover - a bug; fail every request loudly rather than hang
            log.exception("scheduler loop failed")
            self._abort_all("engine error")
            raise

    def _admit(self) -> list[Request]:
        admitted: list[Request] = []
        budget = self.prefill_budget
        while self.waiting and len(self.running) + len(admitted) < self.max_batch:
            nxt = self.waiting[0]
            if nxt.cancelled:
                self.waiting.popleft()
                self._finish(nxt, Aborted("client disconnected"))
                continue
            if admitted and len(nxt.prompt) > budget:
                break
            budget -= len(nxt.prompt)
            admitted.append(self.waiting.popleft())
        return admitted

    async def _prefill(self, admitted: list[Request]) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        result: StepResult = await loop.run_in_executor(
            self._executor, self.model.prefill, [r.prompt for r in admitted]
        )
        self.metrics.record_prefill(result.tokens, time.perf_counter() - t0)
        self.recorder.on_pass(result.expert_counts)
        for i, req in enumerate(admitted):
            req.state = result.state[i]
            self._emit(req, int(result.next_tokens[i]))
            if not req.done:
                self.running.append(req)
        self._update_gauges()

    async def _decode(self) -> None:
        batch = list(self.running)
        tokens = np.array([r.last_token for r in batch], dtype=np.int64)
        state = np.stack([r.state for r in batch if r.state is not None])
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        result: StepResult = await loop.run_in_executor(self._executor, self.model.decode, tokens, state)
        if (rest := self.min_step_s - (time.perf_counter() - t0)) > 0:
            await asyncio.sleep(rest)  # the step's floor: its tokens leave at its end, as an accelerator's would
        self.metrics.record_decode(len(batch), time.perf_counter() - t0, result.unique_experts)
        self.recorder.on_pass(result.expert_counts)
        for i, req in enumerate(batch):
            req.state = result.state[i]
            self._emit(req, int(result.next_tokens[i]))
        self.running = [r for r in self.running if not r.done]
        self._update_gauges()

    # ------------------------------------------------------------------------------------- helpers

    def _emit(self, req: Request, token: int) -> None:
        if req.done:
            return
        if req.cancelled:
            self._finish(req, Aborted("client disconnected"))
            return
        req.last_token = token
        req.generated += 1
        req.events.put_nowait(token)
        if req.generated >= req.max_tokens:
            self._finish(req, Finished())

    def _finish(self, req: Request, event: Finished | Aborted) -> None:
        if req.done:
            return
        req.done = True
        req.state = None
        req.events.put_nowait(event)
        if isinstance(event, Finished):
            self.metrics.requests_finished += 1
        else:
            self.metrics.requests_aborted += 1

    def _drop_cancelled(self) -> None:
        for req in self.running:
            if req.cancelled:
                self._finish(req, Aborted("client disconnected"))
        self.running = [r for r in self.running if not r.done]
        self._update_gauges()

    def _abort_all(self, reason: str) -> None:
        for req in list(self.waiting) + self.running:
            self._finish(req, Aborted(reason))
        self.waiting.clear()
        self.running = []
        self._update_gauges()

    def _update_gauges(self) -> None:
        self.metrics.requests_running = len(self.running)
        self.metrics.requests_waiting = len(self.waiting)
