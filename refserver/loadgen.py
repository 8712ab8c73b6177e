"""The article's load: N steady chat streams plus one long prompt every T seconds, measured client-side.

Each of the N sessions sends a short prompt with a long output (`ignore_eos`, so lengths are exact;
with `shared_prefix_tokens`, every session prompt starts with the same tokens, a system prompt),
streams it, and sends the next when it ends; a separate ticker fires one long-prompt request every
`long_every_s` (or, for `repro`, each time the sessions have streamed `long_every_tokens` tokens each
since the previous long prompt's first token). Every SSE chunk's arrival time is kept, and the figures
follow `vllm bench serve`: TTFT = first chunk with `choices` − send time; ITL = the gaps between
consecutive chunks (per chunk, pooled over requests); E2E = last chunk − send time; TPOT = (E2E −
TTFT)/(output tokens − 1); output tok/s = chunks that arrived during the load window / its length.
P50/P90/P99 are reported separately for `short` and `long` requests (and `all`). The run is bounded:
no new request after `duration_s`, at most `max_requests`, and in-flight streams are cut `drain_s`
after the deadline.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import random
import time
from dataclasses import asdict, dataclass, field
from urllib.parse import urlparse

import httpx
import numpy as np

from stallscope.core.errors import InputError

PERCENTILES = (50, 90, 99)


@dataclass
class LoadSpec:
    url: str
    sessions: int = 16
    duration_s: float = 60.0
    long_prompt_tokens: int = 1536
    long_every_s: float = 5.0
    long_every_tokens: int | None = None  # pace long prompts by session progress instead (repro)
    seed: int = 0
    max_tokens: int = 128
    short_prompt_tokens: int = 32
    shared_prefix_tokens: int = 0         # a common prefix (a system prompt) before every session prompt
    long_max_tokens: int = 16
    max_requests: int = 100_000
    drain_s: float = 60.0
    request_timeout_s: float = 300.0

    def validate(self) -> None:
        check_loopback(self.url)
        for name in ("sessions", "long_prompt_tokens", "max_tokens", "short_prompt_tokens", "long_max_tokens",
                     "max_requests"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.sessions > 1024:
            raise InputError(f"--sessions {self.sessions} is over the bound of 1024")
        if not 0 < self.duration_s <= 3600:
            raise InputError(f"--duration must be in (0, 3600] seconds, got {self.duration_s}")
        if self.long_every_s <= 0:
            raise InputError(f"--long-every must be positive, got {self.long_every_s}")
        if self.shared_prefix_tokens < 0:
            raise InputError(f"--shared-prefix-tokens must be at least 0, got {self.shared_prefix_tokens}")
        if self.long_every_tokens is not None and self.long_every_tokens < 1:
            raise InputError(f"--long-every-tokens must be at least 1, got {self.long_every_tokens}")


@dataclass
class RequestRecord:
    kind: str                    # "short" | "long"
    prompt_tokens: int
    max_tokens: int
    start_ts: float              # unix s, just before the POST
    chunk_ts: list[float] = field(default_factory=list)  # unix s of each chunk with `choices`
    output_tokens: int = 0       # usage.completion_tokens
    status: int | None = None    # HTTP status
    error: str | None = None
    done: bool = False           # saw `data: [DONE]`


def check_loopback(url: str) -> None:
    """Refuse any URL whose host is not a loopback address (the load generator never leaves the machine)."""
    parsed = urlparse(url)
    host = parsed.hostname
    if parsed.scheme not in ("http", "https") or not host:
        raise InputError(f"--url must look like http://127.0.0.1:8000, got {url!r}")
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InputError(f"--url host {host!r} is not a loopback address; the load generator only targets "
                         "127.0.0.1/localhost")


def _quantiles(values) -> dict:
    if not len(values):
        return {"count": 0, "mean": None, **{f"p{p}": None for p in PERCENTILES}}
    arr = np.asarray(values, dtype=float)
    out = {"count": int(arr.size), "mean": float(arr.mean())}
    out.update({f"p{p}": float(np.percentile(arr, p)) for p in PERCENTILES})
    return out


def request_metrics(rec: RequestRecord) -> dict:
    """TTFT, ITLs, E2E and TPOT of one request, in seconds (vllm bench serve definitions)."""
    ttft = rec.chunk_ts[0] - rec.start_ts
    e2e = rec.chunk_ts[-1] - rec.start_ts
    itls = list(np.diff(rec.chunk_ts))
    tpot = (e2e - ttft) / (rec.output_tokens - 1) if rec.output_tokens > 1 else None
    return {"ttft": ttft, "e2e": e2e, "itls": itls, "tpot": tpot}


def summarize(records: list[RequestRecord], elapsed_s: float, window: tuple[float, float] | None = None) -> dict:
    """P50/P90/P99 per kind plus throughput; pure (no I/O). TTFT and ITL use every request that streamed
    (a request cut at the deadline still measured its gaps); E2E and TPOT only completed ones.

    `output_tok_s` counts the chunks (one per token) of every request that arrived inside `window`
    (start, end of the load, Unix s) per second of it, so the drain after the deadline does not dilute
    it; `completed_output_tok_s` is `vllm bench serve`'s figure (completed tokens / `elapsed_s`).
    """
    ok = [r for r in records if r.done and r.error is None and r.chunk_ts]
    streamed = [r for r in records if r.error is None and r.chunk_ts]  # completed or cut at the deadline
    out = {"elapsed_s": elapsed_s, "requests": {"sent": len(records), "completed": len(ok),
                                                "failed": sum(r.error is not None for r in records),
                                                "incomplete": sum(not r.done and r.error is None for r in records)},
           "by_status": {}}
    for r in records:
        key = str(r.status)
        out["by_status"][key] = out["by_status"].get(key, 0) + 1
    total_out = sum(r.output_tokens for r in ok)
    out["total_output_tokens"] = total_out
    out["completed_output_tok_s"] = total_out / elapsed_s if elapsed_s > 0 else 0.0
    if window is None:
        out["output_tok_s"] = out["completed_output_tok_s"]
    else:
        lo, hi = window
        in_window = sum(lo <= t <= hi for r in records for t in r.chunk_ts)
        out["output_tok_s"] = in_window / (hi - lo)
    for kind in ("short", "long", "all"):
        group = [(r.done, request_metrics(r)) for r in streamed if kind == "all" or r.kind == kind]
        out[kind] = {
            "count": sum(done for done, _ in group),
            "ttft_s": _quantiles([g["ttft"] for _, g in group]),
            "itl_s": _quantiles([x for _, g in group for x in g["itls"]]),
            "tpot_s": _quantiles([g["tpot"] for done, g in group if done and g["tpot"] is not None]),
            "e2e_s": _quantiles([g["e2e"] for done, g in group if done]),
        }
    return out


async def _stream_one(client, url: str, body: dict, rec: RequestRecord, timeout_s: float) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, json=body) as resp:
                rec.status = resp.status_code
                if resp.status_code != 200:
                    rec.error = (await resp.aread()).decode(errors="replace")[:300]
                    return
                async for line in resp.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    payload = line[6:]
                    if payload == "[DONE]":
                        rec.done = True
                        break
                    now = time.time()
                    chunk = json.loads(payload)
                    if "error" in chunk:
                        rec.error = chunk["error"].get("message", "error")
                        break
                    if chunk.get("choices"):
                        rec.chunk_ts.append(now)
                    if chunk.get("usage"):
                        rec.output_tokens = chunk["usage"]["completion_tokens"]
    except (TimeoutError, OSError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # httpx transport errors
        rec.error = f"{type(exc).__name__}: {exc}"


class _Load:
    """One bounded run: the short-prompt sessions, the long-prompt pacer, and the records they fill."""

    def __init__(self, spec: LoadSpec, client: httpx.AsyncClient, model: str):
        self.spec, self.client, self.model = spec, client, model
        self.rng = random.Random(spec.seed)
        prefix_rng = random.Random(f"shared-prefix-{spec.seed}")   # its own stream: the rest stays as without it
        self.shared_prefix = [prefix_rng.randrange(32, 127) for _ in range(spec.shared_prefix_tokens)]
        self.records: list[RequestRecord] = []
        self.long_tasks: list[asyncio.Task] = []
        self.endpoint = spec.url.rstrip("/") + "/v1/completions"
        self.t0 = time.time()
        self.deadline = self.t0 + spec.duration_s

    def new_request(self, kind: str) -> tuple[dict, RequestRecord] | None:
        spec, rng = self.spec, self.rng
        if len(self.records) >= spec.max_requests or time.time() >= self.deadline:
            return None
        n_prompt = spec.short_prompt_tokens if kind == "short" else spec.long_prompt_tokens
        base_max = spec.max_tokens if kind == "short" else spec.long_max_tokens
        max_tokens = max(1, rng.randint(base_max // 2, base_max * 3 // 2)) if kind == "short" else base_max
        prompt = [rng.randrange(32, 127) for _ in range(n_prompt)]
        if kind == "short":
            prompt, n_prompt = self.shared_prefix + prompt, n_prompt + len(self.shared_prefix)
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        rec = RequestRecord(kind, n_prompt, max_tokens, time.time())
        self.records.append(rec)
        return body, rec

    async def session(self) -> None:
        while (item := self.new_request("short")) is not None:
            await _stream_one(self.client, self.endpoint, item[0], item[1], self.spec.request_timeout_s)
            if item[1].error is not None:  # back off briefly on errors (e.g. 503 + Retry-After)
                await asyncio.sleep(0.2)

    def fire_long(self) -> bool:
        if (item := self.new_request("long")) is None:
            return False
        self.long_tasks.append(asyncio.create_task(
            _stream_one(self.client, self.endpoint, item[0], item[1], self.spec.request_timeout_s)))
        return True

    async def long_ticker(self) -> None:
        k, every = 1, self.spec.long_every_s
        while self.t0 + k * every < self.deadline:
            await asyncio.sleep(max(0.0, self.t0 + k * every - time.time()))
            if not self.fire_long():
                return
            k += 1

    def short_chunks(self) -> int:
        return sum(len(r.chunk_ts) for r in self.records if r.kind == "short")

    async def long_pacer(self) -> None:
        """Next long prompt once the previous one has its first token and the sessions have streamed
        `long_every_tokens` more tokens each since then."""
        spec, mark = self.spec, 0
        while time.time() < self.deadline:
            await asyncio.sleep(0.01)
            if self.short_chunks() - mark < spec.long_every_tokens * spec.sessions:
                continue
            if not self.fire_long():
                return
            rec = self.records[-1]
            while not rec.chunk_ts and rec.error is None and time.time() < self.deadline + spec.drain_s:
                await asyncio.sleep(0.01)
            mark = self.short_chunks()

    async def run(self, progress: bool) -> float:
        """Run until every stream ended or `drain_s` past the deadline; returns the last completed chunk's time."""
        spec = self.spec
        tasks = [asyncio.create_task(self.session()) for _ in range(spec.sessions)]
        tasks.append(asyncio.create_task(self.long_pacer() if spec.long_every_tokens else self.long_ticker()))
        watcher = asyncio.create_task(_progress(self.records, self.t0, spec.duration_s)) if progress else None
        hard_stop = self.deadline + spec.drain_s
        while time.time() < hard_stop and not all(t.done() for t in tasks + self.long_tasks):
            await asyncio.wait(tasks + self.long_tasks, timeout=0.25)
        for t in tasks + self.long_tasks + ([watcher] if watcher else []):
            t.cancel()
        await asyncio.gather(*tasks, *self.long_tasks, *([watcher] if watcher else []), return_exceptions=True)
        return max((r.chunk_ts[-1] for r in self.records if r.done and r.chunk_ts), default=time.time())


async def run_load(spec: LoadSpec, progress: bool = True) -> dict:
    """Drive the server at `spec.url`; returns the summary dict plus per-request records."""
    spec.validate()
    limits = httpx.Limits(max_connections=spec.sessions + 64, max_keepalive_connections=spec.sessions + 64)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(spec.request_timeout_s)) as client:
        try:
            model = (await client.get(spec.url.rstrip("/") + "/v1/models")).json()["data"][0]["id"]
        except Exception as exc:
            raise InputError(f"cannot reach an OpenAI-compatible server at {spec.url}: {exc}") from exc
        load = _Load(spec, client, model)
        last = await load.run(progress)
    result = summarize(load.records, max(last - load.t0, 1e-9), window=(load.t0, load.t0 + spec.duration_s))
    result["spec"] = asdict(spec)
    result["start_ts"] = load.t0
    result["records"] = [asdict(r) for r in load.records]
    return result


async def _progress(records, t0: float, duration_s: float) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("[bold]loadgen"), BarColumn(), TextColumn("{task.description}"),
                  TimeRemainingColumn(), transient=True) as bar:
        task = bar.add_task("", total=duration_s)
        while True:
            done = sum(r.done for r in records)
            tokens = sum(len(r.chunk_ts) for r in records)
            bar.update(task, completed=min(time.time() - t0, duration_s),
                       description=f"{len(records)} sent, {done} done, {tokens} chunks")
            await asyncio.sleep(0.5)
