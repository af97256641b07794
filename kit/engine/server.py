"""OpenAI-compatible HTTP front end of the embedded engine (aiohttp).

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (streaming SSE or plain JSON),
``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text).

Works with aiohttp 3.8 (Debian bookworm) and newer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import signal
import ssl
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from kit.engine.config import ModelConfig
from kit.engine.metrics import EngineMetrics
from kit.engine.model import MoEModel
from kit.engine.ranks import Rendezvous, follow, parse_addr
from kit.engine.recorder import ExpertRecorder, add_recorder_routes
from kit.engine.scheduler import Aborted, Finished, Request, Scheduler
from kit.engine.tokenizer import decode_token, encode

log = logging.getLogger("kit.engine")

DEFAULT_MAX_TOKENS = 16
MAX_TOKENS_CAP = 4096
MAX_PROMPT_TOKENS = 8192


class BadRequest(Exception):
    """A request the client got wrong; becomes an OpenAI-style error response."""

    def __init__(
        self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code


@dataclass
class GenerationParams:
    """The parts of a completion request the engine uses."""

    chat: bool
    prompt_tokens: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool


# ------------------------------------------------------------------------------------------ parsing


def _error_body(message: str, status: int, param: str | None, code: str | None) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 404:
        kind = "NotFoundError"
    return {"error": {"message": message, "type": kind, "param": param, "code": code or status}}


def error_response(
    message: str, status: int, param: str | None = None, code: str | None = None
) -> web.Response:
    """An OpenAI-style JSON error."""
    return web.json_response(_error_body(message, status, param, code), status=status)


def _chat_text(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list", param="messages")
    parts: list[str] = []
    for msg in messages:
        if not isinstance(msg, dict) or "content" not in msg:
            raise BadRequest("every message must be an object with 'content'", param="messages")
        content = msg["content"]
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
            parts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        elif content is not None:
            raise BadRequest("message 'content' must be a string or a list of parts", param="messages")
    return "\n".join(parts)


def _completion_text(prompt: Any) -> str:
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("'prompt' must be a string", param="prompt")
    return prompt


def _int_field(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"'{name}' must be an integer", param=name)
    return value


def parse_request(body: Any, *, chat: bool, served_name: str, vocab: int) -> GenerationParams:
    """Validate a completion request body; raise ``BadRequest`` with an OpenAI-style message."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != served_name:
        raise BadRequest(f"model '{model}' not found; this server serves '{served_name}'",
                         status=404, param="model", code="model_not_found")
    if chat:
        if "messages" not in body:
            raise BadRequest("missing field 'messages'", param="messages")
        text = _chat_text(body["messages"])
    else:
        if "prompt" not in body:
            raise BadRequest("missing field 'prompt'", param="prompt")
        text = _completion_text(body["prompt"])
    tokens = encode(text, vocab)
    if not tokens:
        raise BadRequest("the prompt must contain at least one word", param="messages" if chat else "prompt")
    if len(tokens) > MAX_PROMPT_TOKENS:
        raise BadRequest(f"prompt has {len(tokens)} tokens; the limit is {MAX_PROMPT_TOKENS}")

    max_tokens = _int_field(body, "max_tokens", _int_field(body, "max_completion_tokens", DEFAULT_MAX_TOKENS))
    if not 1 <= max_tokens <= MAX_TOKENS_CAP:
        raise BadRequest(f"'max_tokens' must be in [1, {MAX_TOKENS_CAP}], got {max_tokens}",
                         param="max_tokens")
    if _int_field(body, "n", 1) != 1:
        raise BadRequest("only n=1 is supported", param="n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object", param="stream_options")
    # seed, temperature, top_p, ignore_eos, ...: accepted and ignored (greedy decoding, no EOS).
    return GenerationParams(chat, tokens, max_tokens, stream, bool(options.get("include_usage", False)))


# ----------------------------------------------------------------------------------------- chunking


class ChunkMaker:
    """Builds the OpenAI response objects for one request."""

    def __init__(self, params: GenerationParams, model: str) -> None:
        self.params = params
        self.model = model
        self.created = int(time.time())
        prefix = "chatcmpl" if params.chat else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex}"

    def _base(self) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.params.chat else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _choice(self, text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        if self.params.chat:
            delta: dict[str, Any] = {}
            if role:
                delta = {"role": "assistant", "content": ""}
            elif text is not None:
                delta = {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}

    def role_chunk(self) -> dict[str, Any]:
        return {**self._base(), "choices": [self._choice(None, None, role=True)]}

    def token_chunk(self, text: str) -> dict[str, Any]:
        return {**self._base(), "choices": [self._choice(text, None)]}

    def final_chunk(self, finish: str) -> dict[str, Any]:
        return {**self._base(), "choices": [self._choice(None, finish)]}

    def usage(self, completion_tokens: int) -> dict[str, int]:
        prompt = len(self.params.prompt_tokens)
        return {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens}

    def usage_chunk(self, completion_tokens: int) -> dict[str, Any]:
        return {**self._base(), "choices": [], "usage": self.usage(completion_tokens)}

    def full_response(self, text: str, completion_tokens: int) -> dict[str, Any]:
        if self.params.chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": "length"}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": [choice], "usage": self.usage(completion_tokens)}


def sse(obj: Any) -> bytes:
    """One server-sent event carrying ``obj`` as JSON."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


# ----------------------------------------------------------------------------------------- handlers


async def _read_json(request: web.Request) -> Any:
    try:
        return json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc


async def _stream(request: web.Request, req: Request, maker: ChunkMaker) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                   "Cache-Control": "no-cache"})
    await resp.prepare(request)
    if maker.params.chat:
        await resp.write(sse(maker.role_chunk()))
    try:
        while True:
            event = await req.events.get()
            if isinstance(event, Finished):
                break
            if isinstance(event, Aborted):  # server stopping: say so and end the stream without [DONE]
                await resp.write(sse(_error_body(event.reason, 503, None, None)))
                return resp
            await resp.write(sse(maker.token_chunk(decode_token(event))))
        await resp.write(sse(maker.final_chunk("length")))
        if maker.params.include_usage:
            await resp.write(sse(maker.usage_chunk(req.generated)))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except ConnectionResetError:  # the client went away; the caller frees its slot
        log.debug("client disconnected from %s", maker.id)
    return resp


async def _collect(req: Request, maker: ChunkMaker) -> web.Response:
    pieces: list[str] = []
    while True:
        event = await req.events.get()
        if isinstance(event, Finished):
            return web.json_response(maker.full_response("".join(pieces), req.generated))
        if isinstance(event, Aborted):
            return error_response(event.reason, 503)
        pieces.append(decode_token(event))


class Handlers:
    """The HTTP handlers, bound to one scheduler."""

    def __init__(self, scheduler: Scheduler, served_name: str, vocab: int,
                 ready: Callable[[], bool] = lambda: True) -> None:
        self.scheduler = scheduler
        self.served_name = served_name
        self.vocab = vocab
        self.ready = ready

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def models(self, request: web.Request) -> web.Response:
        card = {"id": self.served_name, "object": "model", "created": 0, "owned_by": "kit"}
        return web.json_response({"object": "list", "data": [card]})

    async def health(self, request: web.Request) -> web.Response:
        # The weights are built before the server listens; a server that spans nodes also waits for its ranks.
        if not self.ready():
            return web.Response(status=503, text="waiting for the other ranks")
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.scheduler.metrics.render(), content_type="text/plain")

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            params = parse_request(await _read_json(request), chat=chat, served_name=self.served_name,
                                   vocab=self.vocab)
        except BadRequest as exc:
            return error_response(str(exc), exc.status, exc.param, exc.code)
        req = Request(prompt=params.prompt_tokens, max_tokens=params.max_tokens)
        maker = ChunkMaker(params, self.served_name)
        self.scheduler.submit(req)
        try:
            if params.stream:
                return await _stream(request, req, maker)
            return await _collect(req, maker)
        finally:
            if not req.done:
                req.cancel()  # client went away (or the handler was cancelled): free the batch slot


def build_app(scheduler: Scheduler, served_name: str, vocab: int,
              ready: Callable[[], bool] = lambda: True) -> web.Application:
    """The aiohttp application around a scheduler."""
    handlers = Handlers(scheduler, served_name, vocab, ready)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handlers.chat_completions)
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_get("/health", handlers.health)
    app.router.add_get("/metrics", handlers.metrics)
    add_recorder_routes(app, scheduler.recorder)  # sglang's expert-distribution recorder (kit.engine.recorder)
    return app


def _runner_and_site(
    app: web.Application, host: str, port: int, shutdown_timeout: float, tls: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, Callable[[], web.TCPSite]]:
    """A runner and a site factory: short shutdown timeout (on the runner from aiohttp 3.9), https with tls."""
    if "shutdown_timeout" in inspect.signature(web.BaseRunner.__init__).parameters:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
        return runner, lambda: web.TCPSite(runner, host, port, ssl_context=tls)
    runner = web.AppRunner(app, access_log=None)
    return runner, lambda: web.TCPSite(runner, host, port, shutdown_timeout=shutdown_timeout, ssl_context=tls)


def _bound_port(runner: web.AppRunner, requested: int) -> int:
    for addr in runner.addresses:
        if isinstance(addr, tuple) and len(addr) >= 2:
            return int(addr[1])
    return requested


def engine_info(cfg: ModelConfig) -> dict[str, str]:
    """Labels of ``kit_engine_info``."""
    return {"oea_k0": str(cfg.oea_k0), "top_k": str(cfg.top_k), "experts": str(cfg.experts),
            "layers": str(cfg.layers), "hidden": str(cfg.hidden), "expert_ffn": str(cfg.expert_ffn),
            "seed": str(cfg.seed)}


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def serve_rank(addr: str, rank: int, nnodes: int) -> int:
    """A rank above 0 of a server that spans nodes (kit.engine.ranks): its exit status."""
    return await follow(addr, rank, nnodes, _stop_event())


async def serve(cfg: ModelConfig, host: str, port: int, max_batch: int, served_name: str,
                nnodes: int = 1, dist_init_addr: str | None = None, recorder_mode: str | None = None,
                tls: ssl.SSLContext | None = None, weights_cache: Path | None = None, min_step_s: float = 0.0) -> int:
    """Build the model, listen, print the ready line, and run until SIGTERM/SIGINT (exit status 0), or, as rank 0
    of ``nnodes``, until another rank leaves (exit status 1)."""
    stop = _stop_event()
    ranks = Rendezvous(nnodes)
    if nnodes > 1:
        await ranks.start(parse_addr(dist_init_addr or "")[1])
    model = await asyncio.get_running_loop().run_in_executor(None, MoEModel, cfg, weights_cache)
    log.info("%d MiB of random weights (seed %d) %s", cfg.weight_bytes >> 20, cfg.seed, model.weights_source)
    scheduler = Scheduler(model, EngineMetrics(layers=cfg.layers, info=engine_info(cfg)), max_batch,
                          recorder=ExpertRecorder(recorder_mode), min_step_s=min_step_s)
    app = build_app(scheduler, served_name, cfg.vocab, ready=lambda: nnodes == 1 or ranks.ready.is_set())
    runner, make_site = _runner_and_site(app, host, port, 0.5, tls)
    await runner.setup()
    await make_site().start()
    scheduler.start()
    print(f"kit-engine ready on {'https' if tls else 'http'}://{host}:{_bound_port(runner, port)}", flush=True)
    oea = f" with OEA k0={cfg.oea_k0} on decode steps" if cfg.oea_k0 else ""
    log.info("routing: top-%d%s; max batch %d", cfg.top_k, oea, max_batch)

    left = asyncio.ensure_future(ranks.ended.wait())
    await asyncio.wait({asyncio.ensure_future(stop.wait()), left}, return_when=asyncio.FIRST_COMPLETED)
    status = 1 if ranks.failed.is_set() else 0
    log.info("stopping")
    await ranks.close()
    await scheduler.stop(timeout=0.5)
    try:
        await asyncio.wait_for(runner.cleanup(), timeout=1.5)
    except TimeoutError:
        log.warning("server cleanup timed out")
    log.info("stopped")
    return status


def configure_logging() -> None:
    """Log to stderr."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
