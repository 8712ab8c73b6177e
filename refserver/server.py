"""The OpenAI-compatible HTTP front of the reference engine (FastAPI, as vLLM's `vllm serve`).

Each request is validated, tokenized and handed to the `EngineThread`; the handler then awaits that
request's output queue. Streaming responses send one SSE `data: {json}` chunk per engine output and
end with `data: [DONE]`; a client that goes away mid-stream gets its request aborted, which frees
its KV blocks. Errors use OpenAI's body, `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import codecs
import json
import time
import uuid
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from stallscope.refserver.engine_thread import EngineError, EngineThread
from stallscope.refserver.metrics import CONTENT_TYPE
from stallscope.engine.request import SamplingParams

ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
               500: "InternalServerError", 503: "ServiceUnavailableError"}


class HTTPError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.param, self.headers = status, param, headers


def error_response(status: int, message: str, param: str | None = None, headers: dict | None = None):
    body = {"error": {"message": message, "type": ERROR_TYPES.get(status, "Error"), "param": param, "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


class StreamOptions(BaseModel):
    include_usage: StrictBool = False


class _GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    max_tokens: StrictInt | None = None
    temperature: float = 1.0
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: StrictInt | None = None
    n: StrictInt = Field(1, ge=1, le=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    ignore_eos: StrictBool = False


class CompletionRequest(_GenerateRequest):
    prompt: str | list[StrictInt] | list[str]


class ChatMessage(BaseModel):
    role: str
    content: str


class ChatCompletionRequest(_GenerateRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = None


class _AbortOnClose(StreamingResponse):
    """A streaming response that aborts its request however the stream ends (done, error, disconnect)."""

    def __init__(self, content, on_close):
        super().__init__(content, media_type="text/event-stream")
        self._on_close = on_close

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


class _BearerAuth:
    """Pure ASGI middleware (streaming-safe): `/v1/*` needs `Authorization: Bearer <api_key>`, as vLLM."""

    def __init__(self, app, api_key: str):
        self.app, self.expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            if dict(scope["headers"]).get(b"authorization") != self.expected:
                response = error_response(401, "Unauthorized: send `Authorization: Bearer <api key>`")
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


def create_app(runner: EngineThread, *, served_model_name: str, api_key: str | None = None,
               max_waiting: int = 1024) -> FastAPI:
    """The FastAPI app; it starts `runner` on startup and stops it on shutdown.

    Example:
        app = create_app(EngineThread(engine, metrics), served_model_name="tiny")
        uvicorn.run(app, host="127.0.0.1", port=8000)
    """
    engine = runner.engine
    tokenizer = engine.tokenizer
    max_model_len = engine.config.max_model_len or engine.model_config.max_model_len
    vocab_size = engine.model_config.vocab_size
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app):
        runner.start()
        yield
        runner.stop()

    app = FastAPI(title="stallscope reference server", lifespan=lifespan)

    @app.exception_handler(HTTPError)
    async def _http_error(request, exc: HTTPError):
        return error_response(exc.status, str(exc), exc.param, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            return error_response(400, f"malformed JSON body: {first.get('ctx', {}).get('error', 'cannot parse')}")
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return error_response(400, f"invalid request: {where or 'body'}: {first.get('msg', 'malformed')}",
                              where or None)

    if api_key:
        app.add_middleware(_BearerAuth, api_key=api_key)

    def check_model(name: str | None) -> None:
        if name is not None and name != served_model_name:
            raise HTTPError(404, f"The model `{name}` does not exist.", "model")

    def check_lengths(prompt_ids: list[int], max_tokens: int | None) -> int:
        if not prompt_ids:
            raise HTTPError(400, "prompt is empty", "prompt")
        if any(not 0 <= t < vocab_size for t in prompt_ids):
            raise HTTPError(400, f"prompt token ids must be in [0, {vocab_size})", "prompt")
        if len(prompt_ids) >= max_model_len:
            raise HTTPError(400, f"This model's maximum context length is {max_model_len} tokens. However, your "
                                 f"request has {len(prompt_ids)} input tokens.", "prompt")
        if max_tokens is None:
            return max_model_len - len(prompt_ids)
        if max_tokens <= 0:
            raise HTTPError(400, f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
        if len(prompt_ids) + max_tokens > max_model_len:
            raise HTTPError(400, f"max_tokens={max_tokens} is too large: the prompt has {len(prompt_ids)} tokens "
                                 f"and the maximum context length is {max_model_len}.", "max_tokens")
        return max_tokens

    def submit(prefix: str, prompt_ids: list[int], req: _GenerateRequest, max_tokens: int):
        if runner.num_waiting() >= max_waiting:
            runner.metrics.on_rejected()
            raise HTTPError(503, f"the waiting queue is full ({max_waiting} requests); retry later",
                            headers={"Retry-After": "1"})
        if not runner.alive:
            raise HTTPError(503, "the engine is not running")
        params = SamplingParams(max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p,
                                seed=req.seed, ignore_eos=req.ignore_eos)
        request_id = f"{prefix}-{uuid.uuid4().hex}"
        return request_id, runner.add(request_id, prompt_ids, params)

    async def respond(request_id, outputs, prompt_ids, req, chat: bool):
        obj = "chat.completion" if chat else "text_completion"
        head = {"id": request_id, "object": obj + (".chunk" if chat and req.stream else ""),
                "created": int(time.time()), "model": served_model_name}

        def usage(n_out):
            return {"prompt_tokens": len(prompt_ids), "completion_tokens": n_out,
                    "total_tokens": len(prompt_ids) + n_out}

        if not req.stream:
            token_ids, out = [], None
            try:
                while out is None or not out.finished:
                    out = await outputs.get()
                    if isinstance(out, EngineError):
                        raise HTTPError(out.status, str(out))
                    token_ids.extend(out.new_token_ids)
            finally:
                if out is None or isinstance(out, EngineError) or not out.finished:
                    runner.abort(request_id)
            text = tokenizer.decode(token_ids)
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if chat else
                      {"index": 0, "text": text, "logprobs": None})
            choice.update(finish_reason=out.finish_reason, stop_reason=None)
            return JSONResponse({**head, "choices": [choice], "usage": usage(len(token_ids))})

        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        state = {"finished": False}

        async def events():
            token_ids, utf8 = [], codecs.getincrementaldecoder("utf-8")(errors="replace")
            while True:
                out = await outputs.get()
                if isinstance(out, EngineError):
                    err = {"error": {"message": str(out), "type": ERROR_TYPES.get(out.status, "Error"),
                                     "param": None, "code": out.status}}
                    yield f"data: {json.dumps(err)}\n\n"
                    break
                token_ids.extend(out.new_token_ids)
                delta = utf8.decode(bytes(t for t in out.new_token_ids if 0 <= t < 256), final=out.finished)
                if chat:
                    choice = {"index": 0, "delta": {"content": delta}, "logprobs": None}
                    if len(token_ids) == len(out.new_token_ids):
                        choice["delta"]["role"] = "assistant"
                else:
                    choice = {"index": 0, "text": delta, "logprobs": None}
                choice.update(finish_reason=out.finish_reason if out.finished else None, stop_reason=None)
                chunk = {**head, "choices": [choice]}
                if include_usage:
                    chunk["usage"] = None
                yield f"data: {json.dumps(chunk)}\n\n"
                if out.finished:
                    state["finished"] = True
                    if include_usage:
                        yield f"data: {json.dumps({**head, 'choices': [], 'usage': usage(len(token_ids))})}\n\n"
                    break
            yield "data: [DONE]\n\n"

        def on_close():
            if not state["finished"]:
                runner.abort(request_id)

        return _AbortOnClose(events(), on_close)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest):
        check_model(req.model)
        prompt = req.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            if len(prompt) != 1:
                raise HTTPError(400, f"only one prompt per request is supported, got {len(prompt)}", "prompt")
            prompt = prompt[0]
        prompt_ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        max_tokens = check_lengths(prompt_ids, 16 if req.max_tokens is None else req.max_tokens)
        request_id, outputs = submit("cmpl", prompt_ids, req, max_tokens)
        return await respond(request_id, outputs, prompt_ids, req, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest):
        check_model(req.model)
        text = "".join(f"<|{m.role}|>\n{m.content}\n" for m in req.messages) + "<|assistant|>\n"
        prompt_ids = tokenizer.encode(text)
        requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        max_tokens = check_lengths(prompt_ids, requested)
        request_id, outputs = submit("chatcmpl", prompt_ids, req, max_tokens)
        return await respond(request_id, outputs, prompt_ids, req, chat=True)

    @app.get("/v1/models")
    async def models():
        card = {"id": served_model_name, "object": "model", "created": created, "owned_by": "stallscope",
                "root": engine.config.model, "parent": None, "max_model_len": max_model_len}
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health():
        return Response(status_code=200 if runner.alive else 503)

    @app.get("/metrics")
    async def metrics():
        return Response(runner.metrics.exposition(), media_type=CONTENT_TYPE)

    return app


def build_app(config, *, served_model_name: str | None = None, api_key: str | None = None,
              max_waiting: int = 1024):
    """Engine + metrics + engine thread + app for an `EngineConfig`; returns `(app, runner)`."""
    from stallscope.refserver.engine import LLMEngine
    from stallscope.refserver.metrics import EngineMetrics

    engine = LLMEngine(config)
    kv = engine.kv_cache_manager
    cache_info = {"block_size": config.block_size, "cache_dtype": config.kv_cache_dtype,
                  "enable_prefix_caching": False, "num_gpu_blocks": kv.num_gpu_blocks,
                  "kv_cache_size_tokens": kv.num_gpu_blocks * config.block_size}
    name = served_model_name or config.model
    metrics = EngineMetrics(name, max_model_len=config.max_model_len or engine.model_config.max_model_len,
                            cache_info=cache_info)
    runner = EngineThread(engine, metrics)
    return create_app(runner, served_model_name=name, api_key=api_key, max_waiting=max_waiting), runner
