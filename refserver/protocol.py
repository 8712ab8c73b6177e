"""The OpenAI request bodies the reference server accepts, checked at the edge as vLLM's SamplingParams checks them.

Every sampling parameter is finite and in vLLM's range, else a 400 that names it (`1e309` is valid JSON
that reads as +inf). A field vLLM knows but this engine cannot honour is a 400 naming it; unknown fields
are ignored with one warning per request, as vLLM does.
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator

log = logging.getLogger(__name__)

ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
               500: "InternalServerError", 503: "ServiceUnavailableError"}
INT64 = 2**63
MAX_N = 64


def error_body(status: int, message: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "Error"), "param": param, "code": status}}


def error_response(status: int, message: str, param: str | None = None, headers: dict | None = None):
    return JSONResponse(error_body(status, message, param), status_code=status, headers=headers)


class HTTPError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.param, self.headers = status, param, headers


def _finite(default: float, **bounds):
    return Field(default, allow_inf_nan=False, **bounds)


# vLLM fields the reference engine cannot honour, with the values that mean "off" (accepted silently).
UNSUPPORTED = {"top_k": (-1,), "presence_penalty": (0.0,), "frequency_penalty": (0.0,),
               "repetition_penalty": (1.0,), "min_p": (0.0,), "min_tokens": (0,), "echo": (False,),
               "best_of": (None, 1), "suffix": (None, ""), "logit_bias": (None, {}), "stop_token_ids": (None, []), "tools": (None, []),
               "tool_choice": (None, "none"), "response_format": (None, {"type": "text"}),
               "use_beam_search": (None, False)}
HARMLESS = {"user", "skip_special_tokens", "spaces_between_special_tokens", "parallel_tool_calls"}


def logprobs_body(tokenizer, entries: list[tuple], chat: bool) -> dict | None:
    """OpenAI's logprobs object: chat's `content` list, or the completions' parallel arrays."""
    if not entries:
        return None

    def item(t: int, lp: float) -> dict:
        text = tokenizer.token_text(t)
        return {"token": text, "logprob": lp, "bytes": list(text.encode())}

    if chat:
        return {"content": [{**item(t, lp), "top_logprobs": [item(u, v) for u, v in top]} for t, lp, top in entries]}
    tokens = [tokenizer.token_text(t) for t, _, _ in entries]
    offsets = [sum(len(x) for x in tokens[:i]) for i in range(len(tokens))]
    return {"tokens": tokens, "token_logprobs": [lp for _, lp, _ in entries], "text_offset": offsets,
            "top_logprobs": [dict(reversed([(tokenizer.token_text(u), v) for u, v in top]))  # likeliest wins a
                             for _, _, top in entries]}                                # shared text (U+FFFD)


class StreamOptions(BaseModel):
    include_usage: StrictBool = False


class _GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    max_tokens: StrictInt | None = Field(None, ge=1)
    temperature: float = _finite(1.0, ge=0.0)
    top_p: float = _finite(1.0, gt=0.0, le=1.0)
    top_k: StrictInt = -1
    presence_penalty: float = _finite(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = _finite(0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = _finite(1.0, gt=0.0)
    min_p: float = _finite(0.0, ge=0.0, le=1.0)
    min_tokens: StrictInt = Field(0, ge=0)
    seed: StrictInt | None = Field(None, ge=-INT64, lt=INT64)
    n: StrictInt = Field(1, ge=1, le=MAX_N)
    stop: StrictStr | list[StrictStr] | None = None
    include_stop_str_in_output: StrictBool = False
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    ignore_eos: StrictBool = False
    echo: StrictBool = False

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, v: int) -> int:
        if v != -1 and v < 1:
            raise ValueError(f"top_k must be -1 (disable) or at least 1, got {v}")
        return v

    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return [s for s in stops if s]

    def reject_unsupported(self) -> None:
        """400 naming the first field set that this engine cannot honour; one warning for unknown fields."""
        values = {**{k: getattr(self, k) for k in type(self).model_fields}, **(self.model_extra or {})}
        for name, offs in UNSUPPORTED.items():
            if name in values and not any(type(values[name]) is type(o) and values[name] == o for o in offs):
                raise HTTPError(400, f"`{name}` is not supported by the reference server (got {values[name]!r})",
                                name)
        unknown = sorted(set(self.model_extra or ()) - set(UNSUPPORTED) - HARMLESS)
        if unknown:
            log.warning("The following fields were present in the request but ignored: %s", unknown)


class CompletionRequest(_GenerateRequest):
    prompt: str | list[StrictInt] | list[str]
    logprobs: StrictInt | None = Field(None, ge=0, le=20)

    def num_logprobs(self) -> int | None:
        return self.logprobs


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    role: str
    content: str | list[Annotated[TextPart, Field(discriminator="type")]] | None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


    def num_logprobs(self) -> int | None:
        return self.logprobs


class ChatCompletionRequest(_GenerateRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    logprobs: StrictBool = False
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)

    def num_logprobs(self) -> int | None:
        if self.top_logprobs is not None and not self.logprobs:
            raise HTTPError(400, "top_logprobs needs logprobs: true", "top_logprobs")
        return (self.top_logprobs or 0) if self.logprobs else None
