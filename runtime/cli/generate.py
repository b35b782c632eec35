"""`compile-ahead generate`: greedy generation from a prompt on the static graphs."""

from __future__ import annotations

import argparse
import json
import time

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.cli.options import (
    add_model_options,
    add_ov_config_options,
    add_prefill_options,
    add_synthetic_dtype_option,
    check_prefill_args,
    compile_options,
    resolve_from_args,
)
from compile_ahead.runtime.compile.device_defaults import default_decode_compile
from compile_ahead.runtime.ladder.greedy import StaticDecoder
from compile_ahead.runtime.ladder.prefill import choose_prefill
from compile_ahead.runtime.sources.tokenizer import encode_prompt, load_tokenizer, parse_token_ids

CAPACITY_ALIGNMENT = 64


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="greedy generation from a prompt")
    add_model_options(p)
    add_ov_config_options(p)
    add_synthetic_dtype_option(p)
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="prompt text (needs tokenizer.json in the model dir)")
    prompt.add_argument("--prompt-ids", help="prompt as comma-separated token ids")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=32,
        help="tokens to generate at most (default 32); prompt + this must fit the model's "
        "max_position_embeddings",
    )
    add_prefill_options(p)
    p.add_argument("--stop-at-eos", action="store_true", help="stop at the model's EOS token")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()  # first_token_s counts from the command's start
    if args.max_new_tokens <= 0:
        raise CompileAheadError("--max-new-tokens must be positive")
    check_prefill_args(args)
    options = compile_options(args)  # properties refused before the model is touched
    source = resolve_from_args(args)
    tokenizer = None
    if args.prompt is not None:
        tokenizer = load_tokenizer(source.model_dir, source.name)
        prompt = encode_prompt(tokenizer, args.prompt, source.config.vocab_size, source.name)
    else:
        prompt = parse_token_ids(args.prompt_ids, source.config.vocab_size)
    need = len(prompt) + args.max_new_tokens
    limit = source.config.max_position_embeddings
    if need > limit:
        raise CompileAheadError(
            f"prompt ({len(prompt)}) + --max-new-tokens ({args.max_new_tokens}) = {need} tokens "
            f"exceeds the model's max_position_embeddings ({limit})"
        )
    capacity = -(-need // CAPACITY_ALIGNMENT) * CAPACITY_ALIGNMENT
    plan = choose_prefill(
        options.device, len(prompt), capacity, args.prefill_chunk, args.prefill_shape
    )
    if not args.json:
        print(f"model: {source.label}")
        print(f"compiling capacity {capacity} on {options.device} ...", flush=True)
    t0 = time.perf_counter()
    # With a prefill graph the decode graph compiles while the prompt is prefilled.
    timing = args.decode_compile or default_decode_compile(options.device)
    decoder = StaticDecoder(source, capacity, options, plan.chunk, plan.shape, timing)
    t1 = time.perf_counter()
    result = decoder.generate(prompt, args.max_new_tokens, stop_at_eos=args.stop_at_eos)
    t2 = time.perf_counter()
    report = {
        **source.describe(),
        "device": options.device,
        "inference_precision": options.inference_precision,
        "kv_precision": options.kv_precision,
        "ov_config": options.extra_config,
        "decode_defaults": options.graph_defaults("decode"),
        "capacity": capacity,
        "prompt_tokens": len(prompt),
        "tokens": result.tokens,
        "stop_reason": result.stop_reason,
        "compile_s": round(t1 - t0, 3),
        "generate_s": round(t2 - t1, 3),
        "compile_cache_dir": str(options.cache.directory) if options.cache else None,
        "compile_cache": {k: o.describe() for k, o in decoder.cache_outcomes.items()},
        # The command's start to the first generated token, and its parts: startup (model
        # resolved), compile_s (or import: what compiled before prefill), prefill_s.
        "first_token_s": round(result.first_token_at - started, 3),
        "startup_s": round(t0 - started, 3),
        "prefill_s": round(result.prefill_s, 3),
        "prefill": plan.to_json() | ({"decode_compile": timing} if plan.uses_graph else {}),
        "decode_graph_wait_s": round(result.decode_wait_s, 3),
    }
    if tokenizer is not None:
        report["text"] = tokenizer.decode(result.tokens)
    if args.json:
        print(json.dumps(report))
    else:
        print(f"tokens: {result.tokens}")
        if "text" in report:
            print(f"text: {report['text']}")
        print(
            f"stop: {result.stop_reason}; compile {report['compile_s']} s, "
            f"generate {report['generate_s']} s"
        )
        graphs = "; ".join(f"{k} {o.summary()}" for k, o in decoder.cache_outcomes.items())
        where = f" {report['compile_cache_dir']}" if options.cache else ""
        print(f"compile cache{where}: {graphs}")
        print(
            f"first token {report['first_token_s']} s from the command's start (startup "
            f"{report['startup_s']} s, compile/import {report['compile_s']} s, prefill "
            f"{report['prefill_s']} s: {plan.path}, chunk {plan.chunk})"
        )
    return 0
