"""The engine loop in a thread of its own, so the server's asyncio loop never waits on compute.

The event loop talks to the thread through one thread-safe command queue (`add`, `abort`, `stop`);
the thread applies commands only *between* steps, runs `LLMEngine.step()` while there is work, records
metrics, and hands each step's `RequestOutput`s back to the event loop in one `call_soon_threadsafe`
batch, as `(output, logprobs)` pairs (logprobs only for a request added with `logprobs=N`, else None) into
the request's `asyncio.Queue`. A request's queue ends with a finished output (`finish_reason` "error"
when its sampling or its logprobs raised: that request alone ends), or with an `EngineError` when the
engine rejected it or a whole step failed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import threading
import time
import traceback
from collections import defaultdict

from stallscope.core.errors import InputError
from stallscope.engine.request import RequestStatus

log = logging.getLogger(__name__)


class EngineError(Exception):
    """Delivered into a request's queue when the engine rejected it or failed while running it."""

    def __init__(self, message: str, status: int = 400, request_id: str | None = None):
        super().__init__(message)
        self.status, self.request_id = status, request_id


def _deliver(items) -> None:
    for q, item in items:
        q.put_nowait(item)


class EngineThread:
    """Run `engine` in a daemon thread, recording `metrics` after every step.

    Example (inside a coroutine):
        runner = EngineThread(engine, metrics); runner.start()
        outputs = runner.add("cmpl-1", [1, 2, 3], SamplingParams(max_tokens=4))
        while not (out := (await outputs.get())[0]).finished: ...
        runner.stop()
    """

    def __init__(self, engine, metrics, idle_poll_s: float = 0.05, on_step=None):
        self.engine = engine
        self._on_step = on_step                # called with each step's StepStats, in the engine thread
        self.metrics = metrics
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._sinks: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue, int | None]] = {}
        self._idle_poll_s = idle_poll_s
        self._lock = threading.Lock()
        self._pending_adds = 0
        self._published = (0, 0, 0)  # (num_waiting, num_running, kv_blocks_used) after the last command/step
        self._thread = threading.Thread(target=self._loop, name="refserver-engine", daemon=True)
        self.steps = 0

    # -- called from the event loop -------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread.is_alive():
            self._commands.put(("stop",))
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def add(self, request_id: str, prompt_token_ids: list[int], params,
            outputs: asyncio.Queue | None = None, logprobs: int | None = None) -> asyncio.Queue:
        """Queue a request; returns the asyncio.Queue (`outputs`, shareable) its outputs or EngineError arrive in.
        With `logprobs=N` each output comes with its token's logprob and the N likeliest tokens'."""
        outputs = asyncio.Queue() if outputs is None else outputs
        with self._lock:
            self._pending_adds += 1
        self._commands.put(("add", request_id, list(prompt_token_ids), params, asyncio.get_running_loop(), outputs,
                            time.time_ns(), logprobs))
        return outputs

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Free the request in the engine; it is counted under `finished_reason=reason` (a stop string: "stop")."""
        self._commands.put(("abort", request_id, reason))

    def num_waiting(self) -> int:
        """Waiting requests as of the last step, plus adds not yet applied (for the 503 queue bound)."""
        with self._lock:
            return self._published[0] + self._pending_adds

    def kv_blocks_used(self) -> int:
        with self._lock:
            return self._published[2]

    # -- the engine thread -----------------------------------------------------------------------
    def _loop(self) -> None:
        engine = self.engine
        while True:
            if not self._apply_commands(block=not engine.has_unfinished_requests()):
                return
            if not engine.has_unfinished_requests():
                continue
            try:
                outputs, stats = engine.step()
            except Exception as exc:  # an engine bug: fail every live request, keep serving
                log.error("engine step failed:\n%s", traceback.format_exc())
                self._fail_all(f"engine step failed: {type(exc).__name__}: {exc}")
                continue
            self.steps += 1
            items = [self._with_logprobs(out) for out in outputs]
            self.metrics.record_step([out for out, _ in items], stats)
            if self._on_step is not None:
                self._on_step(stats)
            self._publish()  # post-step gauges before any client can see this step's outputs
            batches = defaultdict(list)
            for out, logprobs in items:
                sink = self._sinks.pop(out.request_id, None) if out.finished else self._sinks.get(out.request_id)
                if sink is not None:
                    batches[sink[0]].append((sink[1], (out, logprobs)))
            for loop, items in batches.items():
                self._post(loop, items)

    def _with_logprobs(self, out):
        """`(out, logprobs)`; if the logprobs raise, the request ends alone: no token, `finish_reason` "error"."""
        engine, sink = self.engine, self._sinks.get(out.request_id)
        rows = engine.logits.pop(out.request_id, None) if engine.keep_logits else None
        if sink is None or sink[2] is None or not rows or not out.new_token_ids:
            return out, None
        try:
            return out, engine.model_runner.sampler.logprobs(rows[-1], out.new_token_ids[-1], sink[2])
        except Exception:  # noqa: BLE001 -- whatever it is, it is this request's alone
            log.error("logprobs for request %r failed:\n%s", out.request_id, traceback.format_exc())
            engine.abort_request(out.request_id, RequestStatus.FINISHED_ERROR)
            return dataclasses.replace(out, new_token_ids=(), finished=True, finish_reason="error"), None

    def _apply_commands(self, block: bool) -> bool:
        """Apply queued commands; with `block`, wait briefly for the first. False once told to stop."""
        try:
            cmd = self._commands.get(timeout=self._idle_poll_s) if block else self._commands.get_nowait()
        except queue.Empty:
            return True
        applied = False
        while True:
            if cmd[0] == "stop":
                self._fail_all("server shutting down", status=503)
                if hasattr(self.engine, "close"):
                    self.engine.close()
                return False
            getattr(self, "_cmd_" + cmd[0])(*cmd[1:])
            applied = True
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                break
        if applied:
            self._publish()
        return True

    def _cmd_add(self, request_id, prompt_token_ids, params, loop, outputs, arrival_ns, logprobs) -> None:
        with self._lock:
            self._pending_adds -= 1
        try:
            self.engine.add_request(request_id, prompt_token_ids, params, arrival_ns=arrival_ns)
        except Exception as exc:  # InputError from the engine's own checks -> 400
            status = 400 if isinstance(exc, InputError) else 500
            self._post(loop, [(outputs, EngineError(str(exc), status, request_id))])
            return
        self._sinks[request_id] = (loop, outputs, logprobs)
        self.metrics.on_add(request_id, max_tokens=params.max_tokens, num_prompt_tokens=len(prompt_token_ids),
                            arrival_ns=arrival_ns)

    def _cmd_abort(self, request_id, reason) -> None:
        if self._sinks.pop(request_id, None) is None:
            return
        self.engine.abort_request(request_id)
        self.metrics.on_abort(request_id, time.time_ns(), reason)

    def _fail_all(self, message: str, status: int = 500) -> None:
        for request_id, (loop, outputs, _) in list(self._sinks.items()):
            self.engine.abort_request(request_id)
            self.metrics.on_abort(request_id, time.time_ns())
            self._post(loop, [(outputs, EngineError(message, status, request_id))])
        self._sinks.clear()
        self._publish()

    def _publish(self) -> None:
        engine, kv = self.engine, self.engine.kv_cache_manager
        waiting, running, used = engine.num_waiting(), engine.num_running(), kv.num_used_blocks
        with self._lock:
            self._published = (waiting, running, used)
        self.metrics.set_gauges(running, waiting, used, kv.num_gpu_blocks)

    @staticmethod
    def _post(loop: asyncio.AbstractEventLoop, items) -> None:
        try:
            loop.call_soon_threadsafe(_deliver, items)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            pass
