"""`stallscope refserver`: the OpenAI-compatible reference server, with vLLM's flag names."""

from __future__ import annotations

import argparse
import sys


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine flags `vllm serve` spells the same way (shared with `repro`)."""
    parser.add_argument("--model", default="tiny", help="model preset: tiny | small (default tiny)")
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048, metavar="N",
                        help="token_budget per engine step (default 2048)")
    parser.add_argument("--max-num-seqs", type=int, default=128, metavar="N", help="cap on running requests")
    parser.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True,
                        help="split long prompts into budget-sized chunks (default on, as vLLM V1)")
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                        help="reuse the KV of cached leading full blocks (default on, as vLLM V1)")
    parser.add_argument("--scheduler-reserve-full-isl", action=argparse.BooleanOptionalAction, default=True,
                        help="admit a waiting request only when its whole prompt fits in the KV pool, not "
                             "just its first chunk (default on, as vLLM 0.33)")
    parser.add_argument("--block-size", type=int, default=16, metavar="N", help="tokens per KV block")
    parser.add_argument("--kv-cache-mb", type=float, default=64.0, metavar="MB", help="KV pool size in MiB")
    parser.add_argument("--kv-cache-dtype", default="auto", help="auto | float32 | fp16 | fp8")
    parser.add_argument("--max-model-len", type=int, default=None, metavar="N", help="context length cap")
    parser.add_argument("--seed", type=int, default=0, help="weights and sampling seed")
    parser.add_argument("--blas-threads", type=int, default=None, metavar="N",
                        help="BLAS threads of the engine (default: all cores but one, which the HTTP "
                             "front end and local clients need)")


def engine_config(args):
    from stallscope.refserver.config import EngineConfig
    from stallscope.refserver.model_runner import server_blas_threads

    return EngineConfig(model=args.model, max_num_batched_tokens=args.max_num_batched_tokens,
                        max_num_seqs=args.max_num_seqs, enable_chunked_prefill=args.enable_chunked_prefill,
                        enable_prefix_caching=args.enable_prefix_caching,
                        scheduler_reserve_full_isl=args.scheduler_reserve_full_isl,
                        block_size=args.block_size, kv_cache_mb=args.kv_cache_mb,
                        kv_cache_dtype=args.kv_cache_dtype, max_model_len=args.max_model_len, seed=args.seed,
                        step_trace=getattr(args, "step_trace", None),
                        blas_threads=args.blas_threads if args.blas_threads is not None
                        else server_blas_threads())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_engine_arguments(parser)
    parser.add_argument("--served-model-name", default=None, help="model name in the API and metrics")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--step-trace", default=None, metavar="FILE", help="write one JSON line per engine step")
    parser.add_argument("--enable-logging-iteration-details", action="store_true",
                        help="log one line per engine step as vLLM does with this flag (its batch and elapsed time; "
                             "`stallscope analyze --server-log` reads them back as the server's steps)")
    parser.add_argument("--api-key", default=None, help="require `Authorization: Bearer KEY` on /v1/*")
    parser.add_argument("--max-waiting", type=int, default=1024, metavar="N",
                        help="waiting-queue bound; beyond it requests get 503 + Retry-After (default 1024)")


def _check_bindable(host: str, port: int) -> None:
    import socket

    from stallscope.core.errors import InputError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise InputError(f"--host {host!r} cannot be resolved: {exc}") from exc
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def run(args) -> int:
    import uvicorn

    from stallscope.core.errors import InputError
    from stallscope.refserver.server import build_app

    if not 0 < args.port < 65536:
        raise InputError(f"--port must be in 1..65535, got {args.port}")
    if args.max_waiting < 1:
        raise InputError(f"--max-waiting must be at least 1, got {args.max_waiting}")
    _check_bindable(args.host, args.port)
    if args.api_key is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"stallscope refserver: warning: --host {args.host} without --api-key serves /v1/* to anyone "
              "who can reach it", file=sys.stderr, flush=True)
    on_step = iteration_logger() if args.enable_logging_iteration_details else None
    app, runner = build_app(engine_config(args), served_model_name=args.served_model_name,
                            api_key=args.api_key, max_waiting=args.max_waiting, on_step=on_step)
    kv = runner.engine.kv_cache_manager
    print(f"stallscope refserver: model {args.model} on http://{args.host}:{args.port} "
          f"({kv.num_gpu_blocks} KV blocks of {args.block_size} tokens, "
          f"chunked prefill {'on' if args.enable_chunked_prefill else 'off'}, "
          f"max_num_batched_tokens {args.max_num_batched_tokens})", flush=True)
    for line in startup_log_lines(runner.engine.config):
        print(line, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


def iteration_logger(stream=None):
    """`on_step(stats)` writing each step as vLLM 0.33's iteration-details line (stallscope.engine.iteration_log), in
    its text format with a UTC time, as a container's vLLM writes it. The reference server's `elapsed` is the whole
    step, scheduling included; it counts a preempted request's recompute as context, where vLLM counts a request
    with output tokens as generation."""
    import os
    import time

    from stallscope.engine.iteration_log import message, text_line

    pid, out = os.getpid(), stream or sys.stdout

    def log(stats) -> None:
        if stats.num_prefill_tokens + stats.num_decode_tokens == 0:
            return                                   # vLLM logs no 0-token step
        usage = stats.kv_blocks_used / stats.num_gpu_blocks if stats.num_gpu_blocks else 0.0
        text = message(stats.step, stats.num_prefill_reqs, stats.num_prefill_tokens, stats.num_decode_reqs,
                       stats.num_decode_tokens, stats.duration_ns / 1e6, usage)
        out.write(text_line(text, time.time(), pid) + "\n")
        out.flush()

    return log


def startup_log_lines(config) -> list[str]:
    """The two startup lines vLLM 0.33 writes about its scheduler, in its text log format, so that
    `stallscope analyze --server-log` reads this server's log as it reads vLLM's (collectors/vllm_log.py)."""
    import os
    import time

    from stallscope import __version__

    head = f"(APIServer pid={os.getpid()}) INFO {time.strftime('%m-%d %H:%M:%S')} [refserver] "
    fields = (f"model={config.model!r}, max_seq_len={config.max_model_len}, kv_cache_dtype={config.kv_cache_dtype}, "
              f"enable_prefix_caching={config.enable_prefix_caching}, "
              f"enable_chunked_prefill={config.enable_chunked_prefill}")
    budget = [head + f"Chunked prefill is enabled with max_num_batched_tokens={config.max_num_batched_tokens}."]
    return (budget if config.enable_chunked_prefill else []) + [
        head + f"Initializing a V1 LLM engine (vstallscope-refserver-{__version__}) with config: {fields}"]
