"""`compile-ahead generate`: greedy generation from a prompt on the static graphs."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.commands.batch_options import add_chat_option, batch_from_args
from compile_ahead.commands.options import (
    add_model_options,
    add_ov_config_options,
    add_prefill_options,
    add_synthetic_dtype_option,
    compile_options,
    resolve_from_args,
)
from compile_ahead.interrupts import deferred
from compile_ahead.runtime.base.measure import now_ns
from compile_ahead.runtime.compile.settings.modes import GraphMode
from compile_ahead.runtime.ladder.settings.schedules import get_schedule

if TYPE_CHECKING:
    from compile_ahead.runtime.ladder.greedy import Generation
    from compile_ahead.runtime.ladder.settings.config import RunConfig, SettledRun


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("generate", help="greedy generation from a prompt")
    add_model_options(p)
    add_ov_config_options(p)
    add_synthetic_dtype_option(p)
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument(
        "--prompt", help="prompt text (needs the model's tokenizer: tokenizer.json or a GGUF's)"
    )
    prompt.add_argument(
        "--prompt-ids",
        action="append",
        help="prompt as comma-separated token ids (repeated: one sequence of a batch each)",
    )
    prompt.add_argument(
        "--prompts",
        type=Path,
        metavar="FILE",
        help="one prompt per sequence of a batch, one a line: token ids or text",
    )
    add_chat_option(p)
    p.add_argument(
        "--batch",
        type=int,
        default=None,
        metavar="B",
        help="sequences generated together (default: one per prompt given)",
    )
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


def generate_config(args: argparse.Namespace, started_ns: int) -> RunConfig:
    """Greedy generation as a run: b0 on one rung holding the prompt and every token, whole
    graphs; the prompt's last logits give the first token, so one decode step fewer."""
    # The run's configuration loads OpenVINO: imported here, so that building the parser does
    # not (run() has loaded it already).
    from compile_ahead.runtime.ladder.settings.config import FittedRung, RunConfig

    prompts = tuple(
        replace(p, stop_at_eos=args.stop_at_eos) for p in batch_from_args(args)["prompts"]
    )
    return RunConfig(
        get_schedule("b0"),
        FittedRung(),
        prompts,
        args.max_new_tokens - 1,
        compile_options(args),  # properties refused before the model is touched
        graph=GraphMode.WHOLE,
        decode_compile=args.decode_compile,
        prefill_chunk=args.prefill_chunk,
        prefill_shape=args.prefill_shape,
        started_ns=started_ns,
    ).validate()


def run(args: argparse.Namespace) -> int:
    # These load OpenVINO: imported when the command runs, so that building the parser does
    # not; before the clock starts, so that startup_s leaves them out as it did; a signal
    # meanwhile acted on after them, as during the parser's imports.
    with deferred():
        from compile_ahead.runtime.ladder.greedy import generate
        from compile_ahead.runtime.ladder.settings.config import Prompt

    started = now_ns()  # first_token_s counts from the command's start
    config = generate_config(args, started)
    source = resolve_from_args(args)
    settled = config.for_model(source)
    options = settled.options
    capacity = settled.ladder.top
    if not args.json:
        print(f"model: {source.label}")
        print(f"compiling capacity {capacity} on {options.device} ...", flush=True)
    result = generate(source, settled)
    report = generation_report(result, source.describe(), settled)
    if any(isinstance(p, Prompt) and p.text is not None for p in config.prompts):
        tokenizer = source.text_tokenizer()
        for seq in report["sequences"]:
            seq["text"] = tokenizer.decode(seq["tokens"])
    if args.json:
        print(json.dumps(report))
    else:
        print_generation(report, result)
    return 0


def generation_report(result: Generation, model: dict, config: SettledRun) -> dict:
    """What `generate` prints (or gives as one JSON object), the same keys at every B:
    the run's, and each sequence's prompt length, tokens and stop in ``sequences``."""
    run, options = result.report, config.options
    return {
        **model,
        "device": options.device,
        "inference_precision": options.inference_precision,
        "kv_precision": options.kv_precision,
        "ov_config": options.extra_config,
        "decode_defaults": run.decode_defaults,
        "capacity": run.ladder[-1],
        "batch": len(result.sequences),
        "max_new_tokens": run.decode_tokens + 1,
        "sequences": [
            {
                "sequence": i,
                "prompt_tokens": seq.prompt_tokens,
                "tokens": seq.tokens,
                "stop_reason": seq.stop_reason,
            }
            for i, seq in enumerate(result.sequences)
        ],
        "compile_s": round(run.first_token_compile_s, 3),
        "generate_s": round(run.critical_path_s - run.first_token_compile_s, 3),
        "compile_cache_dir": run.compile_cache_dir,
        "compile_cache": {k: o.describe() for k, o in result.cache.items()},
        # The command's start to the first generated token, and its parts: startup (model
        # resolved), compile_s (or import: what compiled before prefill), prefill_s.
        "first_token_s": round(run.first_token_s or 0.0, 3),
        "startup_s": round(run.startup_s, 3),
        "prefill_s": round(run.prefill_s, 3),
        "prefill": run.prefill,
        "decode_graph_wait_s": round(run.decode_graph_wait_s, 3),
    }


def print_generation(report: dict, result: Generation) -> None:
    sequences = report["sequences"]
    for seq in sequences:
        # One sequence prints as it always did; a batch names each of its sequences.
        name = f"sequence {seq['sequence']} " if len(sequences) > 1 else ""
        print(f"{name}tokens: {seq['tokens']}")
        if "text" in seq:
            print(f"{name}text: {seq['text']}")
        if len(sequences) > 1:
            print(f"{name}stop: {seq['stop_reason']}")
    stop = f"stop: {sequences[0]['stop_reason']}; " if len(sequences) == 1 else ""
    print(f"{stop}compile {report['compile_s']} s, generate {report['generate_s']} s")
    graphs = "; ".join(f"{k} {o.summary()}" for k, o in result.cache.items())
    where = f" {report['compile_cache_dir']}" if report["compile_cache_dir"] else ""
    print(f"compile cache{where}: {graphs}")
    prefill = report["prefill"]
    print(
        f"first token {report['first_token_s']} s from the command's start (startup "
        f"{report['startup_s']} s, compile/import {report['compile_s']} s, prefill "
        f"{report['prefill_s']} s: {prefill['path']}, chunk {prefill['chunk']})"
    )
