"""Our b0 rung graph cut from an optimum-intel IR against openvino-genai's LLMPipeline on the same
IR, per weight format (FP16, INT8, INT4 exports of random qwen2.5-0.5b weights).

Measured side by side in one process, in interleaved rounds (this VM's timings drift), the arm
built first alternating (the model compiled first in a process decodes slower):

- load: our rung compile (read + cut + compile_model, C=1024) vs LLMPipeline construction;
- decode per token at C=1024 after a 128-token prompt, ours vs LLMPipeline (TPOT);
- C=4096 with a ~3800-token prompt: our default prefill for it (ladder/prefill.py
  choose_prefill: the paged graph on the CPU) vs LLMPipeline's time to first token, then
  decode per token at that context;
- where the time goes: the CPU plugin's per-node counters (PERF_COUNT, profiling_info) of our
  C=4096 step at ~3800 context and of the IR's own stateful model compiled plainly (the model
  LLMPipeline starts from; it applies its own transformations on top), summed by node type.

Both sides use the device defaults (bf16 compute on AMX; our KV follows the compute precision,
LLMPipeline keeps its own KV cache precision). Prints medians and ratios.

    python benchmarks/ir_vs_genai.py [--workdir DIR] [--formats fp16,int8,int4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import openvino as ov

from compile_ahead.runtime.base.ov_core import core
from compile_ahead.runtime.base.precision import f32_to_bf16_bits
from compile_ahead.runtime.compile.options import CompileOptions
from compile_ahead.runtime.compile.step_compile import compile_step
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.graphs.step import CompiledStep
from compile_ahead.runtime.ladder.prefill import choose_prefill
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.sources.resolve import resolve_model

sys.path.insert(0, str(Path(__file__).parent))
from ir_exports import FORMATS, prepare  # a sibling script

SHORT_C, SHORT_PROMPT = 1024, 128
LONG_C, LONG_PROMPT = 4096, 3800
PROFILED_CHUNK = 256  # tokens of the prefill call profiled per node


def prompt_ids(n: int, vocab: int, seed: int = 7) -> list[int]:
    return [int(i) for i in np.random.default_rng(seed).integers(100, vocab - 100, n)]


def fill_random(arena: KVArena, length: int) -> None:
    """Attention cost does not depend on the values: random K/V stand in for a history."""
    rng = np.random.default_rng(0)
    for a in arena.keys + arena.values:
        vals = rng.standard_normal(a[:, :, :length].shape).astype(np.float32)
        a[:, :, :length] = f32_to_bf16_bits(vals) if a.dtype == np.uint16 else vals.astype(a.dtype)


def decode_step(step: CompiledStep, arena: KVArena, token: int, position: int) -> int:
    """One decode step at ``position``, its K/V rows written into ``arena``; the next token."""
    out = step.run(np.asarray([token], np.int64), position)
    for layer, (k, v) in enumerate(zip(out.new_keys, out.new_values, strict=True)):
        arena.write(layer, position, k, v)
    return int(np.argmax(out.logits))


class Ours:
    """b0's top rung: one decode graph of capacity C bound to a KV arena (and a prefill graph)."""

    def __init__(self, model_dir: Path, capacity: int, options: CompileOptions, prefill: bool):
        self.source = resolve_model(str(model_dir))
        kv = options.kv_precision
        t0 = time.perf_counter()
        self.decode = compile_step(self.source, GraphSpec(capacity, 1, kv), options).step
        self.compile_s = time.perf_counter() - t0
        self.arena = KVArena(self.source.config, capacity, kv)
        self.decode.bind(self.arena)
        self.prefill = None
        self.plan = choose_prefill(options.device, LONG_PROMPT, capacity)
        if prefill:
            spec = self.plan.spec(capacity, kv)
            self.prefill = compile_step(self.source, spec, options).step
            self.prefill.bind(self.arena)
            # Warm, as Genai's constructor leaves LLMPipeline: a dynamic-shape graph repacks
            # its weights on its first inference.
            self.prefill_s([11] * 8)

    def prefill_s(self, prompt: list[int]) -> float:
        assert self.prefill is not None
        chunk = self.plan.chunk
        t0 = time.perf_counter()
        for start in range(0, len(prompt), chunk):
            ids = np.asarray(prompt[start : start + chunk], np.int64)
            out = self.prefill.run(ids, start, len(ids) - 1)
            for layer in range(self.source.config.num_layers):
                k, v = out.new_keys[layer], out.new_values[layer]
                self.arena.write(layer, start, k[:, :, : len(ids)], v[:, :, : len(ids)])
        return time.perf_counter() - t0

    def decode_ms(self, context: int, steps: int) -> float:
        """Median ms per token over ``steps`` steps starting at ``context`` filled slots."""
        times = []
        token = 11
        for i in range(steps):
            t0 = time.perf_counter()
            token = decode_step(self.decode, self.arena, token, context + i)
            times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times)


class Genai:
    def __init__(self, model_dir: Path):
        import openvino_genai as genai

        t0 = time.perf_counter()
        self.pipe = genai.LLMPipeline(str(model_dir), "CPU")
        self.load_s = time.perf_counter() - t0
        self.genai = genai
        # A dynamic-shape model repacks its weights on the first inference: load plus one short
        # generation is when the pipeline is as ready as our compiled rung.
        t1 = time.perf_counter()
        self.run([11] * 8, 1)
        self.ready_s = self.load_s + time.perf_counter() - t1

    def run(self, prompt: list[int], new_tokens: int) -> tuple[float, float]:
        """(time to first token in s, mean ms per output token after it)."""
        cfg = self.genai.GenerationConfig()
        cfg.max_new_tokens = new_tokens
        cfg.ignore_eos = True
        cfg.eos_token_id = 0
        cfg.stop_token_ids = set()
        # Every round feeds a new prompt, so the pipeline's prefix cache cannot serve it.
        ids = np.asarray([prompt], np.int64)
        inputs = self.genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
        metrics = self.pipe.generate(inputs, cfg).perf_metrics
        return metrics.get_ttft().mean / 1e3, metrics.get_tpot().mean


T = TypeVar("T")


def build_arms(ours_first: bool, make_ours: Callable[[], T], model_dir: Path) -> tuple[T, Genai]:
    """Our arm and LLMPipeline, ``ours_first`` deciding which compiles first: the model a
    process compiles first decodes slower for as long as the process lives, so a comparison
    alternates (or balances) the order."""
    if ours_first:
        ours = make_ours()
        return ours, Genai(model_dir)
    gen = Genai(model_dir)
    return make_ours(), gen


def med(values: list[float]) -> float:
    return statistics.median(values)


def ratio_line(what: str, ours: list[float], theirs: list[float], unit: str) -> str:
    a, b = med(ours), med(theirs)
    return (
        f"  {what:<34} ours {a:8.2f} {unit:<3} LLMPipeline {b:8.2f} {unit:<3} ratio {a / b:5.2f}x"
    )


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=Path("bench-out/ir-vs-genai"))
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=24, help="decode tokens timed per round")
    p.add_argument("--no-profile", action="store_true")
    args = p.parse_args(argv)
    formats = tuple(args.formats.split(","))
    dirs = prepare(args.workdir, formats)
    options = CompileOptions().resolved()
    print(f"device CPU, inference {options.inference_precision}, our KV {options.kv_precision}")
    vocab = resolve_model(str(dirs[formats[0]])).config.vocab_size

    # C=1024: every format's two arms loaded together, rounds interleaved across all of them;
    # each round rebuilds them, so compile and load are measured per round too.
    compile_s: dict[str, list[float]] = defaultdict(list)
    load_s: dict[str, list[float]] = defaultdict(list)
    ready_s: dict[str, list[float]] = defaultdict(list)
    ours_short: dict[str, list[float]] = defaultdict(list)
    genai_short: dict[str, list[float]] = defaultdict(list)
    for r in range(args.rounds):
        for fmt in formats[r % len(formats) :] + formats[: r % len(formats)]:
            ours, gen = build_arms(  # the arm built first alternates by round
                r % 2 == 0, partial(Ours, dirs[fmt], SHORT_C, options, prefill=False), dirs[fmt]
            )
            fill_random(ours.arena, SHORT_PROMPT)
            compile_s[fmt].append(ours.compile_s)
            load_s[fmt].append(gen.load_s)
            ready_s[fmt].append(gen.ready_s)
            short_prompt = prompt_ids(SHORT_PROMPT, vocab, seed=100 + r)
            pair = [("ours", ours), ("genai", gen)]
            for name, arm in pair if r % 2 == 0 else pair[::-1]:
                if name == "ours":
                    ours_short[fmt].append(arm.decode_ms(SHORT_PROMPT, args.steps))
                else:
                    genai_short[fmt].append(arm.run(short_prompt, args.steps + 1)[1])
            del ours, gen, pair
            gc.collect()
        print(f"round {r + 1}/{args.rounds} at C={SHORT_C} done", flush=True)

    # C=4096 after ~3800 prompt tokens: one format at a time (memory), arms interleaved.
    prefill: dict[str, list[float]] = defaultdict(list)
    ttft: dict[str, list[float]] = defaultdict(list)
    ours_long: dict[str, list[float]] = defaultdict(list)
    genai_long: dict[str, list[float]] = defaultdict(list)
    for fmt in formats:
        ours, gen = build_arms(  # one pair per format: the arm built first alternates by format
            formats.index(fmt) % 2 == 0,
            partial(Ours, dirs[fmt], LONG_C, options, prefill=True),
            dirs[fmt],
        )
        for r in range(max(1, args.rounds - 1)):
            long_prompt = prompt_ids(LONG_PROMPT, vocab, seed=200 + r)
            pair = [("ours", ours), ("genai", gen)]
            for name, arm in pair if r % 2 == 0 else pair[::-1]:
                if name == "ours":
                    prefill[fmt].append(arm.prefill_s(long_prompt))
                    ours_long[fmt].append(arm.decode_ms(LONG_PROMPT, args.steps))
                else:
                    first, tpot = arm.run(long_prompt, args.steps + 1)
                    ttft[fmt].append(first)
                    genai_long[fmt].append(tpot)
        del ours, gen
        gc.collect()
        print(f"C={LONG_C} {fmt} done", flush=True)

    print("\nresults (medians; ratio = ours / LLMPipeline)")
    for fmt in formats:
        print(f"{fmt}: {resolve_model(str(dirs[fmt])).weight_format.summary}")
        print(ratio_line("rung compile vs pipeline load", compile_s[fmt], load_s[fmt], "s"))
        print(ratio_line("... vs load + first generation", compile_s[fmt], ready_s[fmt], "s"))
        print(
            ratio_line(
                f"decode C={SHORT_C} prompt {SHORT_PROMPT}", ours_short[fmt], genai_short[fmt], "ms"
            )
        )
        print(
            ratio_line(
                f"decode C={LONG_C} context ~{LONG_PROMPT}", ours_long[fmt], genai_long[fmt], "ms"
            )
        )
        path = choose_prefill(options.device, LONG_PROMPT, LONG_C).path
        print(ratio_line(f"prefill {LONG_PROMPT} ({path}) vs TTFT", prefill[fmt], ttft[fmt], "s"))
    if "fp16" in formats:
        for fmt in formats:
            if fmt == "fp16":
                continue
            print(
                f"{fmt} / fp16 decode: ours C={SHORT_C} "
                f"{med(ours_short[fmt]) / med(ours_short['fp16']):.2f}x, C={LONG_C} "
                f"{med(ours_long[fmt]) / med(ours_long['fp16']):.2f}x; LLMPipeline C={SHORT_C} "
                f"{med(genai_short[fmt]) / med(genai_short['fp16']):.2f}x"
            )
    if not args.no_profile:
        print(f"\nper-node counters, one decode step at context ~{LONG_PROMPT} (ms by node type)")
        for fmt in formats:
            decode, prefill_chunk = profile_ours(dirs[fmt], options, LONG_PROMPT)
            print_profile(f"{fmt} ours C={LONG_C} decode", decode)
            what = f"{fmt} ours C={LONG_C} prefill {PROFILED_CHUNK} tokens"
            print_profile(what, prefill_chunk)
            gc.collect()
            print_profile(f"{fmt} IR stateful", profile_stateful(dirs[fmt], LONG_PROMPT))
            gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
