"""The OpenAI-compatible HTTP front of the reference engine (FastAPI, as vLLM's `vllm serve`).

Each request is validated (protocol.py), tokenized and handed to the `EngineThread` as `n` engine
requests sharing one output queue. Streaming responses send one SSE `data: {json}` chunk per engine
output and end with `data: [DONE]`. A client that goes away -- mid-stream or while a non-streaming
request runs -- gets its requests aborted, which frees their KV blocks. Stop strings are matched on the
decoded text here and end the engine request. Every error, an unexpected one too, is OpenAI's JSON body.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from stallscope.engine.request import SamplingParams
from stallscope.refserver.engine_thread import EngineError, EngineThread
from stallscope.refserver.metrics import CONTENT_TYPE
from stallscope.refserver.protocol import (ChatCompletionRequest, CompletionRequest, HTTPError, _GenerateRequest,
                                           error_body, error_response, logprobs_body)

log = logging.getLogger(__name__)
router = APIRouter()


@dataclass
class _Context:
    runner: EngineThread
    served_model_name: str
    max_waiting: int
    max_model_len: int
    vocab_size: int
    created: int

    @property
    def tokenizer(self):
        return self.runner.engine.tokenizer


class _Choice:
    """One of a request's `n` sequences: its engine request, its decoded text, where and why it ended."""

    def __init__(self, index: int, request_id: str, stops: list[str], include_stop: bool):
        self.index, self.request_id, self.stops, self.include_stop = index, request_id, stops, include_stop
        self.logprobs: list[tuple] = []   # (token, logprob, top) per token, for requests that asked
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text, self.sent, self.num_tokens = "", 0, 0
        self.finish_reason = self.stop_reason = None
        self.in_engine = True

    def feed(self, token_ids, engine_finish: str | None) -> str:
        """Text safe to send after `token_ids`; a possible stop-string prefix is held back until resolved."""
        self.num_tokens += len(token_ids)
        self.text += self.utf8.decode(bytes(t for t in token_ids if 0 <= t < 256), final=engine_finish is not None)
        hits = [(i, s) for s in self.stops if (i := self.text.find(s)) >= 0]
        if hits:
            i, s = min(hits)
            self.text = self.text[:i + len(s) if self.include_stop else i]
            self.finish_reason, self.stop_reason, end = "stop", s, len(self.text)
        elif engine_finish is not None:
            self.finish_reason, end = engine_finish, len(self.text)
        else:
            held = max((k for s in self.stops for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0)
            end = len(self.text) - held
        delta, self.sent = self.text[self.sent:max(end, self.sent)], max(end, self.sent)
        return delta


class _Generation:
    """The `n` engine requests of one HTTP request; `close()` aborts whichever are still in the engine."""

    def __init__(self, runner: EngineThread, choices: list[_Choice], outputs: asyncio.Queue):
        self.runner, self.choices, self.outputs = runner, choices, outputs
        self._by_id = {c.request_id: c for c in choices}

    async def events(self):
        """(choice, text delta) per engine output until every choice has finished; raises EngineError."""
        while any(c.finish_reason is None for c in self.choices):
            item = await self.outputs.get()
            if isinstance(item, EngineError):
                if (c := self._by_id.get(item.request_id)) is not None:
                    c.in_engine = False
                raise item
            out, logprobs = item
            c = self._by_id.get(out.request_id)
            if c is None or c.finish_reason is not None:
                continue
            delta = c.feed(out.new_token_ids, out.finish_reason if out.finished else None)
            c.logprobs += [logprobs] if logprobs else []
            if out.finished:
                c.in_engine = False
            elif c.finish_reason == "stop":  # a stop string: end it in the engine, counted as "stop"
                self.runner.abort(c.request_id, "stop")
                c.in_engine = False
            yield c, delta

    def close(self) -> None:
        for c in self.choices:
            if c.in_engine:
                self.runner.abort(c.request_id)
                c.in_engine = False

    def usage(self, num_prompt_tokens: int) -> dict:
        n_out = sum(c.num_tokens for c in self.choices)
        return {"prompt_tokens": num_prompt_tokens, "completion_tokens": n_out,
                "total_tokens": num_prompt_tokens + n_out}


class _AbortOnClose(StreamingResponse):
    """A streaming response that aborts its requests however the stream ends (done, error, disconnect)."""

    def __init__(self, content, on_close):
        super().__init__(content, media_type="text/event-stream")
        self._on_close = on_close

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


class _BearerAuth:
    """Pure ASGI middleware (streaming-safe): `/v1/*` needs `Authorization: Bearer <api_key>` (any case of
    the scheme), as vLLM."""

    def __init__(self, app, api_key: str):
        self.app, self.api_key = app, api_key.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            scheme, _, key = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or key != self.api_key:
                response = error_response(401, "Unauthorized: send `Authorization: Bearer <api key>`")
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


class _JSONServerErrors:
    """Pure ASGI middleware: an unexpected exception is logged and answered as OpenAI's JSON 500, not
    re-raised, so the server keeps the connection (Starlette's own handler re-raises, and uvicorn closes it)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        started = False

        async def tracking_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            log.exception("unhandled error on %s", scope.get("path"))
            if scope["type"] == "http" and not started:
                await error_response(500, f"internal error: {type(exc).__name__}: {exc}")(scope, receive, send)


async def _http_error(request, exc: HTTPError):
    return error_response(exc.status, str(exc), exc.param, exc.headers)


async def _validation_error(request, exc: RequestValidationError):
    first = exc.errors()[0] if exc.errors() else {}
    if first.get("type") == "json_invalid":
        return error_response(400, f"malformed JSON body: {first.get('ctx', {}).get('error', 'cannot parse')}")
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    return error_response(400, f"invalid request: {where or 'body'}: {first.get('msg', 'malformed')}", where or None)


def _check_model(ctx: _Context, name: str | None) -> None:
    if name is not None and name != ctx.served_model_name:
        raise HTTPError(404, f"The model `{name}` does not exist.", "model")


def _check_lengths(ctx: _Context, prompt_ids: list[int], max_tokens: int | None) -> int:
    limit = ctx.max_model_len
    if not prompt_ids:
        raise HTTPError(400, "prompt is empty", "prompt")
    if any(not 0 <= t < ctx.vocab_size for t in prompt_ids):
        raise HTTPError(400, f"prompt token ids must be in [0, {ctx.vocab_size})", "prompt")
    if len(prompt_ids) >= limit:
        raise HTTPError(400, f"This model's maximum context length is {limit} tokens. However, your "
                             f"request has {len(prompt_ids)} input tokens.", "prompt")
    if max_tokens is None:
        return limit - len(prompt_ids)
    if len(prompt_ids) + max_tokens > limit:
        raise HTTPError(400, f"max_tokens={max_tokens} is too large: the prompt has {len(prompt_ids)} tokens "
                             f"and the maximum context length is {limit}.", "max_tokens")
    return max_tokens


def _submit(ctx: _Context, prefix: str, prompt_ids: list[int], req: _GenerateRequest, max_tokens: int):
    runner = ctx.runner
    if runner.num_waiting() + req.n > ctx.max_waiting:
        runner.metrics.on_rejected()
        raise HTTPError(503, f"the waiting queue is full ({ctx.max_waiting} requests); retry later",
                        headers={"Retry-After": "1"})
    if not runner.alive:
        raise HTTPError(503, "the engine is not running")
    request_id, outputs, choices = f"{prefix}-{uuid.uuid4().hex}", asyncio.Queue(), []
    for i in range(req.n):
        seed = None if req.seed is None else (req.seed + i) % 2**64
        params = SamplingParams(max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p,
                                seed=seed, ignore_eos=req.ignore_eos)
        choice_id = request_id if req.n == 1 else f"{request_id}-{i}"
        runner.add(choice_id, prompt_ids, params, outputs, logprobs=req.num_logprobs())
        choices.append(_Choice(i, choice_id, req.stop_strings(), req.include_stop_str_in_output))
    return request_id, _Generation(runner, choices, outputs)


async def _until_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_disconnected(request: Request, work):
    """Await `work`, cancelling it if the client hangs up first (vLLM's `with_cancellation`)."""
    task, gone = asyncio.ensure_future(work), asyncio.ensure_future(_until_disconnect(request))
    await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    gone.cancel()
    if not task.done():
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        return Response(status_code=499)
    return task.result()


async def _complete(gen: _Generation, head: dict, num_prompt_tokens: int, chat: bool, tokenizer):
    try:
        async for _ in gen.events():
            pass
    except EngineError as err:
        raise HTTPError(err.status, str(err)) from err
    finally:
        gen.close()
    choices = [{"index": c.index, **({"message": {"role": "assistant", "content": c.text}} if chat else
                                     {"text": c.text}), "logprobs": logprobs_body(tokenizer, c.logprobs, chat),
                "finish_reason": c.finish_reason, "stop_reason": c.stop_reason} for c in gen.choices]
    return JSONResponse({**head, "choices": choices, "usage": gen.usage(num_prompt_tokens)})


async def _sse(gen: _Generation, head: dict, num_prompt_tokens: int, chat: bool, include_usage: bool, tokenizer):
    started, sent = set(), {}
    try:
        async for c, delta in gen.events():
            logprobs = logprobs_body(tokenizer, c.logprobs[sent.get(c.index, 0):], chat)
            sent[c.index] = len(c.logprobs)
            if chat:
                choice = {"index": c.index, "delta": {"content": delta}, "logprobs": logprobs}
                if c.index not in started:
                    choice["delta"]["role"] = "assistant"
            else:
                choice = {"index": c.index, "text": delta, "logprobs": logprobs}
            started.add(c.index)
            choice.update(finish_reason=c.finish_reason, stop_reason=c.stop_reason)
            yield f"data: {json.dumps({**head, 'choices': [choice], **({'usage': None} if include_usage else {})})}\n\n"
        if include_usage:
            yield f"data: {json.dumps({**head, 'choices': [], 'usage': gen.usage(num_prompt_tokens)})}\n\n"
    except EngineError as err:
        yield f"data: {json.dumps(error_body(err.status, str(err)))}\n\n"
    yield "data: [DONE]\n\n"


async def _generate(request: Request, req: _GenerateRequest, prefix: str, prompt_ids: list[int],
                    max_tokens: int | None, chat: bool):
    ctx: _Context = request.app.state.ctx
    req.reject_unsupported()
    max_tokens = _check_lengths(ctx, prompt_ids, max_tokens)
    request_id, gen = _submit(ctx, prefix, prompt_ids, req, max_tokens)
    obj = "chat.completion" if chat else "text_completion"
    head = {"id": request_id, "object": obj + (".chunk" if chat and req.stream else ""),
            "created": int(time.time()), "model": ctx.served_model_name}
    if req.stream:
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return _AbortOnClose(_sse(gen, head, len(prompt_ids), chat, include_usage, ctx.tokenizer), gen.close)
    return await _unless_disconnected(request, _complete(gen, head, len(prompt_ids), chat, ctx.tokenizer))


@router.post("/v1/completions")
async def completions(request: Request, req: CompletionRequest):
    ctx: _Context = request.app.state.ctx
    _check_model(ctx, req.model)
    prompt = req.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        if len(prompt) != 1:
            raise HTTPError(400, f"only one prompt per request is supported, got {len(prompt)}", "prompt")
        prompt = prompt[0]
    prompt_ids = ctx.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
    return await _generate(request, req, "cmpl", prompt_ids, 16 if req.max_tokens is None else req.max_tokens,
                           chat=False)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request, req: ChatCompletionRequest):
    ctx: _Context = request.app.state.ctx
    _check_model(ctx, req.model)
    text = "".join(f"<|{m.role}|>\n{m.text()}\n" for m in req.messages) + "<|assistant|>\n"
    requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    return await _generate(request, req, "chatcmpl", ctx.tokenizer.encode(text), requested, chat=True)


def _model_card(ctx: _Context) -> dict:
    return {"id": ctx.served_model_name, "object": "model", "created": ctx.created, "owned_by": "stallscope",
            "root": ctx.runner.engine.config.model, "parent": None, "max_model_len": ctx.max_model_len}


@router.get("/v1/models")
async def models(request: Request):
    return {"object": "list", "data": [_model_card(request.app.state.ctx)]}


@router.get("/v1/models/{model_id:path}")
async def model(request: Request, model_id: str):
    ctx: _Context = request.app.state.ctx
    _check_model(ctx, model_id)
    return _model_card(ctx)


@router.get("/health")
async def health(request: Request):
    return Response(status_code=200 if request.app.state.ctx.runner.alive else 503)


@router.get("/metrics")
async def metrics(request: Request):
    return Response(request.app.state.ctx.runner.metrics.exposition(), media_type=CONTENT_TYPE)


@asynccontextmanager
async def _lifespan(app: FastAPI):
    app.state.ctx.runner.start()
    yield
    app.state.ctx.runner.stop()


def create_app(runner: EngineThread, *, served_model_name: str, api_key: str | None = None,
               max_waiting: int = 1024) -> FastAPI:
    """The FastAPI app; it starts `runner` on startup and stops it on shutdown.

    Example:
        app = create_app(EngineThread(engine, metrics), served_model_name="tiny")
        uvicorn.run(app, host="127.0.0.1", port=8000)
    """
    engine = runner.engine
    app = FastAPI(title="stallscope reference server", lifespan=_lifespan)
    app.state.ctx = _Context(runner, served_model_name, max_waiting,
                             engine.config.max_model_len or engine.model_config.max_model_len,
                             engine.model_config.vocab_size, int(time.time()))
    app.include_router(router)
    app.add_exception_handler(HTTPError, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    if api_key:
        app.add_middleware(_BearerAuth, api_key=api_key)
    app.add_middleware(_JSONServerErrors)
    return app


def build_app(config, *, served_model_name: str | None = None, api_key: str | None = None,
              max_waiting: int = 1024, on_step=None):
    """Engine + metrics + engine thread + app for an `EngineConfig`; returns `(app, runner)`. `on_step(stats)` is
    called by the engine thread after each step (the iteration-details log)."""
    from stallscope.refserver.engine import LLMEngine
    from stallscope.refserver.metrics import EngineMetrics

    engine = LLMEngine(config, keep_logits=True)  # the engine thread pops each step's rows (logprobs)
    kv = engine.kv_cache_manager
    max_model_len = config.resolved_max_model_len
    concurrency = kv.num_gpu_blocks / kv.blocks_for_tokens(max_model_len)   # vllm/v1/core/kv_cache_utils.py
    cache_info = {"block_size": config.block_size, "cache_dtype": config.kv_cache_dtype,
                  "enable_prefix_caching": config.enable_prefix_caching, "num_gpu_blocks": kv.num_gpu_blocks,
                  "effective_attention_block_size": config.block_size, "hash_block_size": config.block_size,
                  "kv_cache_size_tokens": int(concurrency * max_model_len), "kv_cache_max_concurrency": concurrency}
    name = served_model_name or config.model
    metrics = EngineMetrics(name, max_model_len=max_model_len, cache_info=cache_info)
    runner = EngineThread(engine, metrics, on_step=on_step)
    return create_app(runner, served_model_name=name, api_key=api_key, max_waiting=max_waiting), runner
