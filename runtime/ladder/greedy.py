"""Greedy generation on static graphs of one capacity: chunked prefill, then decode steps."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile.cache import OFF, CacheOutcome
from compile_ahead.runtime.compile.compiler import compile_step
from compile_ahead.runtime.compile.options import CompileOptions
from compile_ahead.runtime.graphs import decoder as graphs
from compile_ahead.runtime.graphs.step import CompiledStep
from compile_ahead.runtime.ladder.kv_store import make_store
from compile_ahead.runtime.ladder.prefill import prefill_chunks
from compile_ahead.runtime.ladder.schedules import KVPolicy
from compile_ahead.runtime.sources.base import ModelSource


@dataclass
class Generation:
    tokens: list[int]  # generated ids (not the prompt)
    logits: list[np.ndarray] = field(default_factory=list)  # per generated token, f32 [vocab]
    stop_reason: str = "max_new_tokens"


class StaticDecoder:
    """Decode and prefill graphs compiled for one capacity, sharing one KV cache."""

    def __init__(
        self, source: ModelSource, capacity: int, options: CompileOptions, prefill_chunk: int = 16
    ):
        if capacity <= 0 or prefill_chunk <= 0:
            raise CompileAheadError("capacity and prefill chunk must be positive")
        self.source = source
        self.options = options.resolved()
        kv = self.options.kv_precision
        assert kv is not None
        self.decode = compile_step(source, graphs.GraphSpec(capacity, 1, kv), self.options).step
        self.prefill: CompiledStep | None = None
        if prefill_chunk > 1:
            spec = graphs.GraphSpec(capacity, prefill_chunk, kv)
            self.prefill = compile_step(source, spec, self.options).step
        # What the compile cache did with each graph (hit, miss stored or not, off), by name.
        self.cache_outcomes: dict[str, CacheOutcome] = {
            name: getattr(step, "compile_cache", OFF)
            for name, step in (("decode", self.decode), ("prefill", self.prefill))
            if step is not None
        }
        self.cache = make_store(KVPolicy.SHARED_MAX, source.config, (capacity,), kv, capacity)
        self.decode.bind(self.cache.arena)
        if self.prefill is not None:
            self.prefill.bind(self.cache.arena)

    @property
    def capacity(self) -> int:
        return self.cache.arena.capacity

    @property
    def length(self) -> int:
        return self.cache.length

    def prefill_prompt(self, prompt: list[int]) -> np.ndarray:
        """Run the prompt in chunks; returns the last token's logits."""
        if not prompt:
            raise CompileAheadError("the prompt is empty")
        if len(prompt) > self.capacity:
            raise CompileAheadError(
                f"the prompt ({len(prompt)} tokens) does not fit capacity {self.capacity}"
            )
        return prefill_chunks(self.prefill or self.decode, prompt, self.cache)

    def step(self, token: int) -> np.ndarray:
        t = self.length
        if t >= self.capacity:
            raise CompileAheadError(f"context reached capacity {self.capacity}")
        out = self.decode.run(np.asarray([token], np.int64), t)
        self.cache.append(out, 1)
        return out.logits.copy()

    def generate(
        self, prompt: list[int], max_new_tokens: int, stop_at_eos: bool = False
    ) -> Generation:
        logits = self.prefill_prompt(prompt)
        result = Generation([])
        eos = set(self.source.config.eos_token_ids) if stop_at_eos else set()
        while True:
            token = int(np.argmax(logits))
            result.tokens.append(token)
            result.logits.append(logits)
            if token in eos:
                result.stop_reason = "eos"
                break
            if len(result.tokens) >= max_new_tokens:
                break
            if self.length >= self.capacity:
                result.stop_reason = "capacity"
                break
            logits = self.step(token)
        return result
