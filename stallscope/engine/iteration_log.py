"""vLLM's per-iteration log line (`--enable-logging-iteration-details`): one step's batch and time, as vLLM 0.33 writes it.

The idea: a vLLM server started with `--enable-logging-iteration-details` logs every engine step, so its log is a
step trace an operator already has, without Nsight. This module holds the line's format once: the reference server
writes it (`line`) and stallscope.collectors.vllm_log reads it back (`PATTERN`). vLLM 0.33.0, read in the released
wheel:

- `vllm/v1/metrics/loggers.py`, `LoggingStatLogger._log_iteration_details`, logged by the frontend (API server)
  process: `"%sIteration(%d): %d context requests, %d context tokens, %d generation requests, %d generation
  tokens, iteration elapsed time: %.2f ms%s, %s KV cache usage: %.1f%%%s"`, the prefix `Engine %03d: `, then an
  optional ` (dummy)`, the device (`GPU` on CUDA), and an optional encoder clause;
- `vllm/v1/utils.py`, `compute_iteration_details`: a request is a *context* request while it has no output token
  (a prompt's chunks, chunked or not), else a *generation* request; the tokens are those scheduled in the step;
- `vllm/v1/engine/core.py`, `capture_iteration_details`: `elapsed_ms` is the wait on the model's output for the
  step (`time.monotonic()` around `future.result()`), not the scheduling before it; 0-token steps are not logged.
"""

from __future__ import annotations

import re
import time

PATTERN = re.compile(
    r"Engine (?P<engine>\d+): Iteration\((?P<iteration>\d+)\): (?P<ctx_reqs>\d+) context requests, "
    r"(?P<ctx_tokens>\d+) context tokens, (?P<gen_reqs>\d+) generation requests, (?P<gen_tokens>\d+) generation "
    r"tokens, iteration elapsed time: (?P<elapsed_ms>\d+(?:\.\d+)?) ms(?P<dummy> \(dummy\))?, "
    r"\S+ KV cache usage: (?P<kv_pct>\d+(?:\.\d+)?)%")


def message(iteration: int, ctx_reqs: int, ctx_tokens: int, gen_reqs: int, gen_tokens: int, elapsed_ms: float,
            kv_usage: float, *, engine: int = 0, device: str = "GPU") -> str:
    """The message vLLM logs for one step; `kv_usage` is a fraction of the pool.

    >>> message(7, 1, 512, 3, 3, 81.234, 0.125)
    'Engine 000: Iteration(7): 1 context requests, 512 context tokens, 3 generation requests, 3 generation tokens, iteration elapsed time: 81.23 ms, GPU KV cache usage: 12.5%'
    """
    return (f"Engine {engine:03d}: Iteration({iteration}): {ctx_reqs} context requests, {ctx_tokens} context tokens, "
            f"{gen_reqs} generation requests, {gen_tokens} generation tokens, "
            f"iteration elapsed time: {elapsed_ms:.2f} ms, {device} KV cache usage: {kv_usage * 100:.1f}%")


def text_line(msg: str, at_s: float, pid: int = 1) -> str:
    """`msg` as vLLM's text format logs it from the API server process at `at_s` (s since the epoch, shown in UTC,
    to the second, as a container's vLLM writes it).

    >>> text_line("Engine 000: ...", 1796424000)
    '(APIServer pid=1) INFO 12-04 22:40:00 [loggers.py:200] Engine 000: ...'
    """
    return f"(APIServer pid={pid}) INFO {time.strftime('%m-%d %H:%M:%S', time.gmtime(at_s))} [loggers.py:200] {msg}"
