"""Our b0 rung graph cut from an optimum-intel IR against openvino-genai's LLMPipeline on the same
IR, per weight format (FP16, INT8, INT4 exports of random qwen2.5-0.5b weights).

Measured side by side in one process, in interleaved rounds (this VM's timings drift), the arm
built first alternating (the model compiled first in a process decodes slower):

- load: our rung compile (read + cut + compile_model, C=1024) vs LLMPipeline construction;
- decode per token at C=1024 after a 128-token prompt, ours vs LLMPipeline (TPOT);
- C=4096 with a ~3800-token prompt: our default prefill for it (ladder/settings/prefill_plan.py
  choose_prefill: the paged graph on the CPU) vs LLMPipeline's time to first token, then
  decode per token at that context;
- where the time goes: the CPU plugin's per-node counters (PERF_COUNT, profiling_info) of our
  C=4096 step at ~3800 context and of the IR's own stateful model compiled plainly (the model
  LLMPipeline starts from; it applies its own transformations on top), summed by node type.

Both sides use the device defaults (bf16 compute on AMX; our KV follows the compute precision,
LLMPipeline keeps its own KV cache precision). Prints medians and ratios.

    python benchmarks/peers/ir_vs_genai.py [--workdir DIR] [--formats fp16,int8,int4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import median, ratio_line, round_order
from _shared.genai_arms import (
    LONG_C,
    LONG_PROMPT,
    SHORT_C,
    SHORT_PROMPT,
    Ours,
    build_arms,
    fill_random,
    prompt_ids,
)
from _shared.models import FORMATS, prepare

from compile_ahead.runtime.base.ov_core import core
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.ladder.settings.prefill_plan import choose_prefill
from compile_ahead.runtime.sources.resolve import resolve_model

PROFILED_CHUNK = 256  # tokens of the prefill call profiled per node
ARMS = ("ours", "genai")


def by_node_type(request: ov.InferRequest) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for info in request.profiling_info:
        totals[info.node_type] += info.real_time.total_seconds() * 1e3
    return dict(totals)


def print_profile(title: str, totals: dict[str, float], top: int = 8) -> None:
    total = sum(totals.values())
    parts = sorted(totals.items(), key=lambda kv: -kv[1])[:top]
    shown = ", ".join(f"{k} {v:.1f} ({100 * v / total:.0f}%)" for k, v in parts)
    print(f"  {title}: {total:.1f} ms in nodes; {shown}")


def profile_ours(
    model_dir: Path, options: CompileOptions, context: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Per node type: one decode step at ``context``, and one prefill chunk starting there."""
    opts = CompileOptions(
        options.device, options.inference_precision, options.kv_precision, {"PERF_COUNT": "YES"}
    )
    ours = Ours(model_dir, LONG_C, opts, prefill=True)
    fill_random(ours.arena, context)
    ours.decode_ms(context, 3)
    assert ours.prefill is not None
    ours.prefill.run(np.arange(100, 100 + PROFILED_CHUNK), context - PROFILED_CHUNK, 0)
    return by_node_type(ours.decode.request), by_node_type(ours.prefill.request)


def profile_stateful(model_dir: Path, context: int) -> dict[str, float]:
    """The IR as exported, compiled plainly on CPU, one decode step after a random history."""
    compiled = core().compile_model(
        str(model_dir / "openvino_model.xml"), "CPU", {"PERF_COUNT": "YES"}
    )
    request = compiled.create_infer_request()
    for state in request.query_state():
        shape = list(state.state.shape)
        shape[0], shape[2] = 1, context
        state.state = ov.Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    for i in range(3):
        past = context + i
        request.infer(
            {
                "input_ids": np.asarray([[11]], np.int64),
                "attention_mask": np.ones((1, past + 1), np.int64),
                "position_ids": np.asarray([[past]], np.int64),
                "beam_idx": np.zeros(1, np.int32),
            }
        )
    return by_node_type(request)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("bench-out/ir-vs-genai"))
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=24, help="decode tokens timed per round")
    p.add_argument("--no-profile", action="store_true")
    return p.parse_args(argv)


# What was measured: endpoint -> weight format -> one value per round.
Measured = dict[str, dict[str, list[float]]]


def measured() -> Measured:
    return defaultdict(lambda: defaultdict(list))


@dataclass(frozen=True)
class Setup:
    """The IRs per weight format and what every arm shares."""

    formats: tuple[str, ...]
    dirs: dict[str, Path]
    options: CompileOptions
    vocab: int
    rounds: int
    steps: int


def short_round(setup: Setup, r: int, fmt: str, m: Measured) -> None:
    """Round ``r`` at C=1024 for one format: both arms built afresh, then decode."""
    ours, gen = build_arms(  # the arm built first alternates by round
        round_order(ARMS, r)[0] == "ours",
        partial(Ours, setup.dirs[fmt], SHORT_C, setup.options, prefill=False),
        setup.dirs[fmt],
    )
    fill_random(ours.arena, SHORT_PROMPT)
    m["compile_s"][fmt].append(ours.compile_s)
    m["load_s"][fmt].append(gen.load_s)
    m["ready_s"][fmt].append(gen.ready_s)
    short_prompt = prompt_ids(SHORT_PROMPT, setup.vocab, seed=100 + r)
    for name in round_order(ARMS, r):
        if name == "ours":
            m["ours_short"][fmt].append(ours.decode_ms(SHORT_PROMPT, setup.steps))
        else:
            m["genai_short"][fmt].append(gen.run(short_prompt, setup.steps + 1)[1])
    del ours, gen
    gc.collect()


def run_short(setup: Setup, m: Measured) -> None:
    """C=1024: every format's two arms, rounds interleaved across all of them; each round
    rebuilds them, so compile and load are measured per round too."""
    formats = setup.formats
    for r in range(setup.rounds):
        for fmt in formats[r % len(formats) :] + formats[: r % len(formats)]:
            short_round(setup, r, fmt, m)
        print(f"round {r + 1}/{setup.rounds} at C={SHORT_C} done", flush=True)


def run_long(setup: Setup, m: Measured) -> None:
    """C=4096 after ~3800 prompt tokens: one format at a time (memory), arms interleaved."""
    for fmt in setup.formats:
        ours, gen = build_arms(  # one pair per format: the arm built first alternates by format
            round_order(ARMS, setup.formats.index(fmt))[0] == "ours",
            partial(Ours, setup.dirs[fmt], LONG_C, setup.options, prefill=True),
            setup.dirs[fmt],
        )
        for r in range(max(1, setup.rounds - 1)):
            long_prompt = prompt_ids(LONG_PROMPT, setup.vocab, seed=200 + r)
            for name in round_order(ARMS, r):
                if name == "ours":
                    m["prefill"][fmt].append(ours.prefill_s(long_prompt))
                    m["ours_long"][fmt].append(ours.decode_ms(LONG_PROMPT, setup.steps))
                else:
                    first, tpot = gen.run(long_prompt, setup.steps + 1)
                    m["ttft"][fmt].append(first)
                    m["genai_long"][fmt].append(tpot)
        del ours, gen
        gc.collect()
        print(f"C={LONG_C} {fmt} done", flush=True)


def print_results(setup: Setup, m: Measured) -> None:
    print("\nresults (medians; ratio = ours / LLMPipeline)")
    for fmt in setup.formats:
        print(f"{fmt}: {resolve_model(str(setup.dirs[fmt])).weight_format.summary}")
        lines = (
            ("rung compile vs pipeline load", "compile_s", "load_s", "s"),
            ("... vs load + first generation", "compile_s", "ready_s", "s"),
            (f"decode C={SHORT_C} prompt {SHORT_PROMPT}", "ours_short", "genai_short", "ms"),
            (f"decode C={LONG_C} context ~{LONG_PROMPT}", "ours_long", "genai_long", "ms"),
        )
        for what, ours, theirs, unit in lines:
            print(ratio_line(what, m[ours][fmt], m[theirs][fmt], unit))
        path = choose_prefill(setup.options.device, LONG_PROMPT, LONG_C).path
        what = f"prefill {LONG_PROMPT} ({path}) vs TTFT"
        print(ratio_line(what, m["prefill"][fmt], m["ttft"][fmt], "s"))
    if "fp16" in setup.formats:
        print_against_fp16(setup.formats, m)


def print_against_fp16(formats: tuple[str, ...], m: Measured) -> None:
    def over_fp16(key: str, fmt: str) -> float:
        return median(m[key][fmt]) / median(m[key]["fp16"])

    for fmt in formats:
        if fmt != "fp16":
            print(
                f"{fmt} / fp16 decode: ours C={SHORT_C} {over_fp16('ours_short', fmt):.2f}x, "
                f"C={LONG_C} {over_fp16('ours_long', fmt):.2f}x; "
                f"LLMPipeline C={SHORT_C} {over_fp16('genai_short', fmt):.2f}x"
            )


def print_profiles(setup: Setup) -> None:
    print(f"\nper-node counters, one decode step at context ~{LONG_PROMPT} (ms by node type)")
    for fmt in setup.formats:
        decode, prefill_chunk = profile_ours(setup.dirs[fmt], setup.options, LONG_PROMPT)
        print_profile(f"{fmt} ours C={LONG_C} decode", decode)
        print_profile(f"{fmt} ours C={LONG_C} prefill {PROFILED_CHUNK} tokens", prefill_chunk)
        gc.collect()
        print_profile(f"{fmt} IR stateful", profile_stateful(setup.dirs[fmt], LONG_PROMPT))
        gc.collect()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    formats = tuple(args.formats.split(","))
    dirs = prepare(args.workdir, formats)
    options = CompileOptions().resolved()
    print(f"device CPU, inference {options.inference_precision}, our KV {options.kv_precision}")
    vocab = resolve_model(str(dirs[formats[0]])).config.vocab_size
    setup = Setup(formats, dirs, options, vocab, args.rounds, args.steps)
    m = measured()
    run_short(setup, m)
    run_long(setup, m)
    print_results(setup, m)
    if not args.no_profile:
        print_profiles(setup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
