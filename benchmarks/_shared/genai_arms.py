"""Our rung graph and openvino-genai's LLMPipeline on the same IR, as arms the IR benchmarks
(ir_vs_genai.py, decode_vs_genai.py, first_token_vs_genai.py, decode_during_compile.py) build
and time side by side."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import openvino as ov

from compile_ahead.runtime.base.precision import f32_to_bf16_bits
from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.graphs.step import CompiledStep
from compile_ahead.runtime.ladder.settings.prefill_plan import choose_prefill
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.sources.resolve import resolve_model

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
