"""Command-line options shared by `run`, `generate`, `profile-compile` and `ab`: one definition
of each flag, one ladder parser, one prompt check, one graph-mode default.

Importing this module must not load OpenVINO (profile-compile arms its profiling first), nor
anything else heavy: the whole parser is held to that (main.py).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compile_ahead.commands.batch_options import (
    add_batch_options,
    add_chat_option,
    batch_from_args,
    prompt_lengths,
)
from compile_ahead.commands.cache_options import (
    add_cache_options,
    cache_from_flags,
    default_cache_dir,
)
from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision_names import PRECISIONS
from compile_ahead.runtime.compile.settings.modes import (
    DEFAULT_COMPILE_TIMEOUT_S,
    DecodeCompile,
    GraphMode,
    PlacementKind,
    PrefillShape,
    choices,
)
from compile_ahead.runtime.ladder.settings.capacities import NAMED_LADDERS, Ladder
from compile_ahead.runtime.ladder.settings.faults import Faults
from compile_ahead.runtime.ladder.settings.schedules import get_schedule

if TYPE_CHECKING:
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.ladder.settings.config import AutoLadder, RunConfig
    from compile_ahead.runtime.sources.base import ModelSource

DEFAULT_MODEL = "qwen2.5-0.5b"


def seconds(text: str) -> float:
    """A timeout flag as an argparse type (--timeout): a finite, positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not (0 < value < math.inf):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def count(low: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            least = "0 or more" if low == 0 else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {least}, got {value}")
        return value

    return parse


def add_model_options(
    p: argparse.ArgumentParser, required: bool = False, cache: bool = True
) -> None:
    """--model, --device, the precision flags and (with ``cache``) the compile cache's."""
    p.add_argument(
        "--model",
        required=required,
        default=None if required else DEFAULT_MODEL,
        help="Hugging Face checkpoint directory, optimum-intel export directory or .xml IR, "
        "GGUF file (or a directory holding one), hub id in the local HF cache, or preset "
        "(qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b, tinyllama-1.1b, smollm2-135m, tiny)"
        + ("" if required else f"; default {DEFAULT_MODEL}"),
    )
    p.add_argument("--device", default="CPU", help="OpenVINO device (CPU, NPU, ...)")
    p.add_argument(
        "--inference-precision",
        choices=PRECISIONS,
        default=None,
        help="compute precision hint (default: the device's own: on CPU bf16 where it has bf16 "
        "instructions, AVX512_BF16 or AMX)",
    )
    p.add_argument(
        "--kv-precision",
        choices=PRECISIONS,
        default=None,
        help="KV cache element type (default: the inference precision)",
    )
    if cache:
        add_cache_options(p)


def model_inputs(args: argparse.Namespace) -> list[Path]:
    """The files and directories a command reads for its model and compile: the model (a
    directory or a file; a preset or hub id names none), the properties file, the compile
    cache, the kept IR and a batch's prompts file. An output never replaces any of them
    (outputs.check_not_inputs)."""
    names = ("model", "ov_config_file", "cache_dir", "ir_dir", "prompts", "text")
    found = [Path(value) for value in (getattr(args, n, None) for n in names) if value]
    if getattr(args, "cache_dir", None) is None and getattr(args, "no_cache", True) is False:
        found.append(default_cache_dir())
    return found


def compile_options(args: argparse.Namespace) -> CompileOptions:
    """The compile options of a command; the compile cache is on unless --no-cache (or the
    command has no cache flags, e.g. profile-compile, which profiles real compiles)."""
    from compile_ahead.runtime.compile.settings.devices import check_device
    from compile_ahead.runtime.compile.settings.options import CompileOptions

    check_device(args.device)
    properties = ov_config_from_args(args, check=True)  # refused before the cache is touched
    cache = None
    if hasattr(args, "no_cache"):
        # NaN, infinity and negatives are refused there, with one line
        cache = cache_from_flags(args.cache_dir, args.no_cache, args.cache_max_gb)
    return CompileOptions(
        args.device, args.inference_precision, args.kv_precision, properties, cache=cache
    ).resolved()


def add_ov_config_options(p: argparse.ArgumentParser) -> None:
    """Any OpenVINO compile property, as benchmark_app takes them."""
    p.add_argument(
        "--ov-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an OpenVINO compile property for the device, e.g. "
        "DYNAMIC_QUANTIZATION_GROUP_SIZE=0 (repeatable; wins over --ov-config-file)",
    )
    p.add_argument(
        "--ov-config-file",
        type=Path,
        default=None,
        metavar="FILE.json",
        help="compile properties per device, as benchmark_app -load_config reads them: "
        '{"CPU": {"KEY": "VALUE"}}; the entry of --device is used',
    )


def ov_config_from_args(args: argparse.Namespace, check: bool = False) -> dict[str, str]:
    """--ov-config-file's entry for the device, then --ov-config over it; with ``check``, each
    key and value checked against the device (this loads OpenVINO). A command without the
    flags has none."""
    from compile_ahead.runtime.compile.settings.properties import (
        checked_properties,
        load_properties_file,
        parse_properties,
    )

    config: dict[str, str] = {}
    path = getattr(args, "ov_config_file", None)
    if path is not None:
        config |= load_properties_file(path, args.device, "--ov-config-file")
    config |= parse_properties(getattr(args, "ov_config", None) or [], "--ov-config")
    if check and config:
        what = "--ov-config" if getattr(args, "ov_config", None) else "--ov-config-file"
        return checked_properties(args.device, config, what)
    return config


def add_synthetic_dtype_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--synthetic-dtype",
        choices=PRECISIONS,
        default=None,
        help="a preset's synthetic weights in this dtype (default: the published checkpoint's "
        "torch_dtype, bf16 for every preset but tiny); refused for a model with real weights",
    )


def resolve_from_args(args: argparse.Namespace) -> ModelSource:
    """--model, with --synthetic-dtype where the command has it."""
    from compile_ahead.runtime.sources.resolve import resolve_model

    return resolve_model(args.model, synthetic_dtype=getattr(args, "synthetic_dtype", None))


AUTO_LADDER = "auto"


def add_ladder_option(p: argparse.ArgumentParser, auto: bool = True) -> None:
    names = [*NAMED_LADDERS, AUTO_LADDER] if auto else list(NAMED_LADDERS)
    p.add_argument(
        "--ladder",
        default="default",
        help="rung capacities, e.g. 1024,2048,4096,8192, or one of "
        f"{', '.join(names)} (default: default = 1024,2048,4096,8192)"
        + (
            "; auto: rungs doubling from the first that holds the prompt up to the model's "
            "max_position_embeddings or --max-context"
            if auto
            else ""
        ),
    )
    if auto:
        p.add_argument(
            "--max-context",
            type=int,
            default=None,
            metavar="N",
            help="with --ladder auto: the top rung (default: the model's max_position_embeddings)",
        )


def add_graph_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--graph",
        choices=choices(GraphMode),
        default=None,
        help="whole: one graph per rung, each with its own compiled weights; split: weight "
        "parts compiled once, a rung is only its attention core (default: chosen per device "
        "from measurement, whole on CPU; see docs/usage/running.md)",
    )


def add_placement_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--compile-placement",
        choices=choices(PlacementKind),
        default=None,
        help="where one-ahead compiles run: in-process (a background thread) or worker (a "
        "compile process at idle priority whose result is imported here; a crash or hang there "
        "is a failed compile, retried in the foreground) (default: chosen per device from "
        "measurement, in-process on CPU; see docs/usage/running.md)",
    )
    p.add_argument(
        "--compile-timeout",
        type=float,
        default=DEFAULT_COMPILE_TIMEOUT_S,
        metavar="SECONDS",
        help="with --compile-placement worker: kill a compile taking longer "
        f"(default {DEFAULT_COMPILE_TIMEOUT_S:g})",
    )


def add_protocol_options(
    p: argparse.ArgumentParser, decode_help: str | None = None, per_sequence: bool = False
) -> None:
    """The teacher-forced protocol's prompt and decode lengths (``per_sequence``: a command
    with --batch, whose --prompt-len may give one length per sequence)."""
    p.add_argument(
        "--prompt-len",
        type=prompt_lengths if per_sequence else int,
        default=None,
        metavar="P[,P...]" if per_sequence else "P",
        help="teacher-forced prompt tokens (default: 1/8 of the first rung, 128 for the "
        "default ladder)"
        + ("; with --batch one per sequence, e.g. 16,40,128" if per_sequence else ""),
    )
    p.add_argument(
        "--decode-tokens",
        type=int,
        default=None,
        metavar="T",
        help=decode_help
        or "decode steps after the prompt; greedy: the first token comes from the prompt, "
        "then T steps, ending earlier at EOS (default: up to the top rung's capacity)",
    )


def add_prefill_options(p: argparse.ArgumentParser) -> None:
    """How the prompt is prefilled; by default chosen per device from the prompt length."""
    p.add_argument(
        "--prefill-chunk",
        type=int,
        default=None,
        metavar="N",
        help="tokens per prefill call: 1 prefills token by token on the first decode graph, "
        "larger values compile a prefill graph, which a batch runs each sequence's prompt on "
        "in turn (default: chosen per device from the (longest) prompt's length)",
    )
    p.add_argument(
        "--prefill-shape",
        choices=choices(PrefillShape),
        default=None,
        help="prefill graph: static (the first rung's whole capacity, any device), dynamic "
        "(attends over the filled slots only) or paged (the model in the paged-attention form "
        "LLMPipeline runs) (both CPU only) (default: per device)",
    )
    p.add_argument(
        "--decode-compile",
        choices=choices(DecodeCompile),
        default=None,
        help="with a prefill graph, compile the first rung's decode graph beside the prefill "
        "graph's compile (and on into the prefill), while the prompt is prefilled, or after it "
        "(default: per device; after on the CPU, whose cores prefill)",
    )


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Greedy prompts, prefill and boundary recording for a ladder run."""
    p.add_argument(
        "--prompt-ids",
        action="append",
        default=None,
        help="greedy mode: generate from these comma-separated token ids (repeated: one "
        "sequence of a batch each)",
    )
    p.add_argument("--prompt", default=None, help="greedy mode: generate from this text")
    add_chat_option(p)
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        metavar="T",
        help="greedy: tokens to generate per sequence at most, the first included (as "
        "transformers and LLMPipeline count them), ending earlier at EOS; instead of "
        "--decode-tokens T-1",
    )
    add_batch_options(p)
    add_prefill_options(p)
    p.add_argument(
        "--boundary-window",
        type=int,
        default=3,
        help="decode steps recorded on each side of a boundary (default 3)",
    )
    add_fault_options(p)


def add_fault_options(p: argparse.ArgumentParser) -> None:
    """Fault injection, for tests and benchmarks."""
    faults = p.add_argument_group("fault injection (tests and benchmarks)")
    faults.add_argument(
        "--inject-compile-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="add this much to every background compile",
    )
    faults.add_argument(
        "--inject-compile-failure",
        action="append",
        default=[],
        metavar="CAPACITY[:COUNT]",
        help="make the compile of this rung fail COUNT times (default 1)",
    )
    faults.add_argument(
        "--inject-worker-fault",
        action="append",
        default=[],
        metavar="CAPACITY:KIND",
        help="with --compile-placement worker: the worker compiling this rung does KIND "
        "instead (raise, abort, segfault, hang), once",
    )
    faults.add_argument(
        "--inject-store-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="pause every compile cache entry write this long with its temporary file open "
        "(as writing a large model's entry takes)",
    )
    faults.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="emulate a slower device: add this much to every decode step",
    )


def ladder_choice(args: argparse.Namespace) -> Ladder | AutoLadder:
    """--ladder (and --max-context, only with auto)."""
    from compile_ahead.runtime.ladder.settings.config import AutoLadder

    max_context = getattr(args, "max_context", None)
    if args.ladder == AUTO_LADDER and hasattr(args, "max_context"):  # a command that has auto
        return AutoLadder(max_context)
    if max_context is not None:
        raise CompileAheadError(
            f"--max-context is for --ladder auto; --ladder {args.ladder} names its top rung"
        )
    return Ladder.parse(args.ladder)


def faults_from_args(args: argparse.Namespace) -> Faults:
    """The fault-injection flags of a command that has them."""
    if not hasattr(args, "inject_compile_delay"):
        return Faults()
    return Faults.from_flags(
        args.inject_compile_delay,
        args.inject_compile_failure,
        args.step_delay,
        getattr(args, "inject_worker_fault", []),
        args.inject_store_delay,
    )


def decode_steps(args: argparse.Namespace) -> int | None:
    """The decode steps a run takes: --decode-tokens T, or --max-new-tokens T (greedy: new
    tokens, the first included, which the prompt's last logits give: T - 1 steps)."""
    new = getattr(args, "max_new_tokens", None)
    if new is None:
        return args.decode_tokens
    if args.decode_tokens is not None:
        raise CompileAheadError(
            "give --decode-tokens (decode steps) or --max-new-tokens (new tokens, the first "
            "included), not both"
        )
    if not any(getattr(args, name, None) for name in ("prompt", "prompt_ids", "prompts")):
        raise CompileAheadError(
            "--max-new-tokens counts generated tokens: it needs a greedy prompt (--prompt, "
            "--prompt-ids or --prompts); a teacher-forced run takes --decode-tokens"
        )
    if new < 2:
        raise CompileAheadError(
            f"--max-new-tokens must be >= 2 on a ladder run (its first token and at least one "
            f"decode step), got {new}"
        )
    return new - 1


def run_config_from_args(
    args: argparse.Namespace, schedule: str | None, options: CompileOptions, **given: Any
) -> RunConfig:
    """The run configuration a command's flags give, checked (RunConfig.validate) before any
    model is opened. A flag the command does not have keeps the configuration's default;
    ``given`` sets fields the command's flags mean otherwise (profile-compile's prefill)."""
    from compile_ahead.runtime.ladder.settings.config import RunConfig

    fields: dict[str, Any] = batch_from_args(args) | dict(  # what each sequence is fed
        schedule=get_schedule(schedule) if schedule is not None else None,
        ladder=ladder_choice(args),
        decode_tokens=decode_steps(args),
        options=options,
        graph=getattr(args, "graph", None),
        placement=getattr(args, "compile_placement", None),
        decode_compile=getattr(args, "decode_compile", None),
        prefill_chunk=getattr(args, "prefill_chunk", None),
        prefill_shape=getattr(args, "prefill_shape", None),
        compile_timeout_s=getattr(args, "compile_timeout", DEFAULT_COMPILE_TIMEOUT_S),
        faults=faults_from_args(args),
        boundary_window=getattr(args, "boundary_window", 3),
        started_ns=getattr(args, "started_ns", None),
    )
    return RunConfig(**(fields | given)).validate()
