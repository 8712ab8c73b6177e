"""`stallscope generate`: run one prompt through the reference engine and print the text (or JSON)."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny", help="model preset: tiny | small (default tiny)")
    p.add_argument("--prompt", required=True, help="prompt text (byte-level tokens)")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens to generate (default 32)")
    p.add_argument("--max-num-batched-tokens", type=int, default=2048, help="token budget per step (default 2048)")
    p.add_argument("--no-enable-chunked-prefill", dest="enable_chunked_prefill", action="store_false",
                   help="legacy prefill-first scheduling: whole prompts, decodes wait")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                   help="reuse the KV of cached leading full blocks (default on, as vLLM V1)")
    p.add_argument("--kv-cache-dtype", default="auto", help="auto (16-bit) | float32 | fp16 | fp8 (default auto)")
    p.add_argument("--block-size", type=int, default=16, help="tokens per KV block (default 16)")
    p.add_argument("--kv-cache-mb", type=float, default=64.0, help="KV pool size in MiB (default 64)")
    p.add_argument("--max-model-len", type=int, default=None, help="longest prompt+output (default: the preset's)")
    p.add_argument("--seed", type=int, default=0, help="weights and sampling seed (default 0)")
    p.add_argument("--weights", default=None, metavar="FILE.npz", help="weights file (docs/weights-format.md)")
    p.add_argument("--step-trace", default=None, metavar="FILE", help="write one StepStats JSON line per step")
    p.add_argument("--blas-threads", type=int, default=None, metavar="N", help="BLAS threads (default: all cores)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default 0)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1.0)")
    p.add_argument("--ignore-eos", action="store_true", help="keep going past EOS up to --max-tokens")
    p.add_argument("--json", action="store_true", help='print {"token_ids": [...], "text": "...", "steps": N}')


def run(args: argparse.Namespace) -> int:
    from stallscope.refserver.config import EngineConfig
    from stallscope.refserver.engine import LLMEngine
    from stallscope.engine.request import SamplingParams

    config = EngineConfig(model=args.model, max_num_batched_tokens=args.max_num_batched_tokens,
                          enable_chunked_prefill=args.enable_chunked_prefill,
                          enable_prefix_caching=args.enable_prefix_caching, block_size=args.block_size,
                          kv_cache_mb=args.kv_cache_mb, kv_cache_dtype=args.kv_cache_dtype,
                          max_model_len=args.max_model_len, seed=args.seed, weights=args.weights,
                          step_trace=args.step_trace, blas_threads=args.blas_threads)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            seed=args.seed, ignore_eos=args.ignore_eos)
    engine = LLMEngine(config)
    try:
        engine.add_request("generate-0", engine.tokenizer.encode(args.prompt), params)
        token_ids: list[int] = []
        steps = 0
        while engine.has_unfinished_requests():
            outputs, _ = engine.step()
            steps += 1
            for out in outputs:
                token_ids.extend(out.new_token_ids)
    finally:
        engine.close()
    text = engine.tokenizer.decode(token_ids)
    if args.json:
        print(json.dumps({"token_ids": token_ids, "text": text, "steps": steps}))
    else:
        sys.stdout.write(text + "\n")
    return 0
