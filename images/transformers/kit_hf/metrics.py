"""A Prometheus ``GET /metrics`` for ``transformers serve`` (5.24.0 has none), added by kit's launcher.

Read at scrape time, never on the generation path: the route and the HTTP counter below are the only code it
adds to the server, and neither touches a token. Two sources, named in each family's help:

- **continuous batching** (``--continuous-batching``), read from transformers' own objects, the scheduler and
  the paged cache of the one ``ContinuousBatchingManager`` that ``GenerationState`` holds:
  ``kit_hf:num_requests_running`` = ``len(scheduler.active_requests)`` (requests admitted to the batch:
  prefilling or decoding, holding cache blocks), ``kit_hf:num_requests_waiting`` =
  ``len(scheduler.waiting_requests)`` + the manager's ``input_queue.qsize()`` (handed to CB, not yet
  scheduled) and ``kit_hf:kv_cache_usage_perc`` = 1 - ``cache.compute_free_capacity()`` (a fraction, as vLLM's
  ``vllm:kv_cache_usage_perc``). Before the first request the manager does not exist yet: running and waiting
  are 0 and the cache gauge is absent. Without continuous batching the three are absent.
- **tokens** (continuous batching), counters named as vLLM's and sglang's: ``kit_hf:generation_tokens_total`` =
  the tokens of requests the CB scheduler finished (or cancelled) + ``len(generated_tokens)`` of the requests it
  holds now, and ``kit_hf:prompt_tokens_total`` = the prompt tokens handed to ``ContinuousBatchingManager
  .add_request``. The finished part is the one thing here on the generation path: transformers' own
  ``Scheduler.finish_request`` and ``clear_cancelled_requests`` are wrapped to add the request's
  ``len(generated_tokens)`` as it leaves the batch (once per request, never per token; under a lock that the
  scrape takes too, so a request is counted once, never twice or not at all, and the counter never goes back). An
  offloaded request is finished and re-queued with its tokens in its prompt, so its later tokens count on; a
  parallel-sampling fork (n > 1, which kit never asks) would count its parent's tokens again.
- **the HTTP layer** (every server): ``kit_hf:http_requests_in_flight``, requests under ``/v1/`` whose
  response (streamed or not) has not finished, and the counters of those started and finished.

These are reads of a dict's length, a queue's size and free-block counts: atomic in CPython, taken without
transformers' locks; a read that fails anyway (the manager being replaced) drops that family from this one
answer and counts ``kit_hf:metrics_read_errors_total``.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

Scope = MutableMapping[str, Any]
Asgi = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]

GENERATED = "kit_hf:generation_tokens"  # exposed with prometheus_client's _total suffix for counters
PROMPT = "kit_hf:prompt_tokens"
RUNNING = "kit_hf:num_requests_running"
WAITING = "kit_hf:num_requests_waiting"
KV_USAGE = "kit_hf:kv_cache_usage_perc"
IN_FLIGHT = "kit_hf:http_requests_in_flight"
COUNTED_PREFIX = "/v1/"  # the OpenAI routes; /metrics, /health and /v1/models-style GETs are cheap either way


class HttpCounter:
    """Requests under ``/v1/`` started and finished (thread-safe; read by the collector)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = 0
        self.finished = 0

    def start(self) -> None:
        with self._lock:
            self.started += 1

    def finish(self) -> None:
        with self._lock:
            self.finished += 1

    def read(self) -> tuple[int, int]:
        with self._lock:
            return self.started, self.finished


class InFlightMiddleware:
    """Pure ASGI middleware: a ``/v1/`` request counts from its arrival until the app has sent its last body
    chunk (Starlette's StreamingResponse returns only then) or failed."""

    def __init__(self, app: Asgi, counter: HttpCounter) -> None:
        self.app = app
        self.counter = counter

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope.get("type") != "http" or not str(scope.get("path", "")).startswith(COUNTED_PREFIX):
            await self.app(scope, receive, send)
            return
        self.counter.start()
        try:
            await self.app(scope, receive, send)
        finally:
            self.counter.finish()


class TokenCounts:
    """Tokens of requests that left the CB batch, and prompt tokens handed to it (``count_tokens``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.left = 0      # generated tokens of requests finished or cancelled
        self.prompt = 0

    def generated(self, scheduler: Any) -> int:
        """The tokens generated so far: those of requests that left + those of the requests the batch holds."""
        with self.lock:  # a request leaving now is either still in active_requests or in self.left, never both
            return self.left + sum(len(s.generated_tokens) for s in list(scheduler.active_requests.values()))


COUNTS = TokenCounts()
_counting = threading.Lock()


def count_tokens(counts: TokenCounts = COUNTS) -> None:
    """Wrap transformers' CB scheduler and manager (once per process) so that ``counts`` follows them."""
    from transformers.generation.continuous_batching import continuous_api
    from transformers.generation.continuous_batching import scheduler as sched

    with _counting:
        base = sched.Scheduler
        if getattr(base, "_kit_hf_counts", None) is not None:
            return
        finish, clear = base.finish_request, base.clear_cancelled_requests
        add = continuous_api.ContinuousBatchingManager.add_request

        def finish_request(self: Any, request_id: str) -> None:
            with counts.lock:
                state = self.active_requests.get(request_id)
                counts.left += len(state.generated_tokens) if state is not None else 0
                finish(self, request_id)

        def clear_cancelled_requests(self: Any) -> Any:
            with counts.lock:
                states = clear(self)
                counts.left += sum(len(s.generated_tokens) for s in states)
                return states

        def add_request(self: Any, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
            with counts.lock:
                counts.prompt += len(input_ids)
            return add(self, input_ids, *args, **kwargs)

        base.finish_request, base.clear_cancelled_requests = finish_request, clear_cancelled_requests
        continuous_api.ContinuousBatchingManager.add_request = add_request
        base._kit_hf_counts = counts


def cb_numbers(generation_state: Any, counts: TokenCounts = COUNTS) -> dict[str, float] | None:
    """running, waiting and (once the cache exists) KV use from transformers' CB objects; None without CB."""
    if not getattr(generation_state, "_continuous_batching", False):
        return None
    manager = getattr(generation_state, "_cb_manager", None)  # CBGenerateManager, made on the first request
    cb = getattr(manager, "_cb", None)  # ContinuousBatchingManager
    if cb is None:
        return {RUNNING: 0.0, WAITING: 0.0, GENERATED: float(counts.left), PROMPT: float(counts.prompt)}
    queued = float(cb.input_queue.qsize())
    processor = cb.batch_processor  # None until the generation thread made it, and again after stop
    if processor is None:
        return {RUNNING: 0.0, WAITING: queued, GENERATED: float(counts.left), PROMPT: float(counts.prompt)}
    scheduler = processor.scheduler
    return {RUNNING: float(len(scheduler.active_requests)),
            WAITING: float(len(scheduler.waiting_requests)) + queued,
            KV_USAGE: 1.0 - float(processor.cache.compute_free_capacity()),
            GENERATED: float(counts.generated(scheduler)), PROMPT: float(counts.prompt)}


HELP = {
    RUNNING: "requests in the continuous batch (transformers CB scheduler.active_requests)",
    WAITING: "requests waiting for the continuous batch (CB scheduler.waiting_requests + input_queue)",
    KV_USAGE: "fraction of the paged KV cache in use (1 - CB cache.compute_free_capacity())",
    GENERATED: "tokens generated by the continuous batch (finished requests' + active requests' generated_tokens)",
    PROMPT: "prompt tokens handed to the continuous batch (ContinuousBatchingManager.add_request)",
}
COUNTERS = (GENERATED, PROMPT)


class ServeCollector:
    """prometheus_client collector: reads the numbers at each scrape."""

    def __init__(self, generation_state: Any, counter: HttpCounter) -> None:
        self.state = generation_state
        self.counter = counter
        self.read_errors = 0

    def collect(self) -> Iterator[Metric]:
        try:
            cb = cb_numbers(self.state)
        except Exception:  # noqa: BLE001 - a racing read of another thread's objects; counted, never raised
            cb = None
            self.read_errors += 1
        for name, value in (cb or {}).items():
            m = CounterMetricFamily(name, HELP[name]) if name in COUNTERS else GaugeMetricFamily(name, HELP[name])
            m.add_metric([], value)
            yield m
        started, finished = self.counter.read()
        g = GaugeMetricFamily(IN_FLIGHT, "HTTP requests under /v1/ not yet answered to the end (kit_hf middleware)")
        g.add_metric([], float(started - finished))
        yield g
        for name, value, text in (("kit_hf:http_requests_started", started, "HTTP requests under /v1/ received"),
                                  ("kit_hf:http_requests_finished", finished, "HTTP requests under /v1/ answered"),
                                  ("kit_hf:metrics_read_errors", self.read_errors,
                                   "scrapes whose read of the CB objects failed")):
            c = CounterMetricFamily(name, text)
            c.add_metric([], float(value))
            yield c


def install(app: Any, generation_state: Any) -> None:
    """Add ``GET /metrics`` and the in-flight middleware to the FastAPI app ``build_server`` made."""
    from starlette.requests import Request
    from starlette.responses import Response

    if getattr(generation_state, "_continuous_batching", False):
        count_tokens()
    counter = HttpCounter()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServeCollector(generation_state, counter))  # type: ignore[arg-type]

    def metrics(_request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(InFlightMiddleware, counter=counter)
    app.add_route("/metrics", metrics, methods=["GET"])


def wrap_build_server() -> None:
    """Make transformers' ``build_server`` add kit_hf's /metrics to the app it returns."""
    from transformers.cli.serving import server

    build = server.build_server

    def build_server(*args: Any, **kwargs: Any) -> Any:
        app = build(*args, **kwargs)
        install(app, kwargs["generation_state"])
        return app

    server.build_server = build_server
