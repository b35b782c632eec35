"""Greedy generation on static graphs of one capacity: chunked prefill, then decode steps."""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

import numpy as np

from compile_ahead.errors import CompileAheadError
from compile_ahead.interrupts import future_result, in_background
from compile_ahead.runtime.compile.cache import CacheOutcome
from compile_ahead.runtime.compile.options import CompileOptions
from compile_ahead.runtime.compile.result import CompileResult
from compile_ahead.runtime.compile.step_compile import compile_step
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.graphs.step import CompiledStep
from compile_ahead.runtime.ladder.kv_store import make_store
from compile_ahead.runtime.ladder.prefill import PrefillPlan, prefill_chunks
from compile_ahead.runtime.ladder.schedules import KVPolicy
from compile_ahead.runtime.sources.base import ModelSource


@dataclass
class Generation:
    tokens: list[int]  # generated ids (not the prompt)
    logits: list[np.ndarray] = field(default_factory=list)  # per generated token, f32 [vocab]
    stop_reason: str = "max_new_tokens"
    prefill_s: float = 0.0
    first_token_at: float = 0.0  # time.perf_counter() when the first token was known
    decode_wait_s: float = 0.0  # after prefill, waiting for the decode graph's compile


class StaticDecoder:
    """Decode and prefill graphs compiled for one capacity, sharing one KV cache.

    With a prefill graph and ``decode_compile``, only the prefill graph compiles in the
    constructor; the decode graph compiles on a background thread started with the prefill
    graph's compile ("with-prefill-graph") or after it, while the prompt is prefilled
    ("during-prefill"), or when the first decode step needs it ("after-prefill").
    """

    def __init__(
        self,
        source: ModelSource,
        capacity: int,
        options: CompileOptions,
        prefill_chunk: int = 16,
        prefill_shape: str = "static",
        decode_compile: str | None = None,
    ):
        if capacity <= 0 or prefill_chunk <= 0:
            raise CompileAheadError("capacity and prefill chunk must be positive")
        self.source = source
        self.options = options = options.resolved()
        kv = self.options.kv_precision
        assert kv is not None
        self.cache = make_store(KVPolicy.SHARED_MAX, source.config, (capacity,), kv, capacity)
        self.prefill: CompiledStep | None = None
        self._decode: CompiledStep | None = None
        self._results: dict[str, CompileResult] = {}  # by graph name: decode, prefill
        self._pending: Future[CompileResult] | None = None
        decode_spec = GraphSpec(capacity, 1, kv)
        self._decode_spec = decode_spec
        # Without a prefill graph the decode graph compiles now, whatever the timing.
        timing = decode_compile if prefill_chunk > 1 else None
        if timing == "with-prefill-graph":
            self._compile_decode_in_background()
        if prefill_chunk > 1:
            spec = PrefillPlan(prefill_chunk, prefill_shape).spec(capacity, kv)
            self.prefill = self._keep("prefill", compile_step(source, spec, self.options, True))
            self.prefill.bind(self.cache.arena)
        if timing == "during-prefill":
            self._compile_decode_in_background()
        elif self._pending is None and timing != "after-prefill":
            self._decode = self._keep("decode", compile_step(source, decode_spec, options, True))
            self._decode.bind(self.cache.arena)

    def _keep(self, name: str, result: CompileResult) -> CompiledStep:
        self._results[name] = result
        return result.step

    def _compile_decode_in_background(self) -> None:
        source, spec, options = self.source, self._decode_spec, self.options
        self._pending = in_background(lambda: compile_step(source, spec, options), "compile-decode")

    @property
    def decode(self) -> CompiledStep:
        """The decode graph: waiting for its background compile if it is still running, or
        compiling it now if it was left until after prefill."""
        if self._decode is None:
            if self._pending is not None:
                self._decode = self._keep("decode", future_result(self._pending))
            else:  # on the way to the next token: its cache entry is written after
                spec, options = self._decode_spec, self.options
                self._decode = self._keep("decode", compile_step(self.source, spec, options, True))
            self._decode.bind(self.cache.arena)
            self._pending = None
        return self._decode

    def store_entries(self) -> None:
        """Write the cache entries left for later (graphs compiled on the way to a token)."""
        for name, result in self._results.items():
            if result.pending_store is not None:
                self._results[name] = replace(
                    result, cache=result.pending_store(), pending_store=None
                )

    @property
    def cache_outcomes(self) -> dict[str, CacheOutcome]:
        """What the compile cache did with each graph (hit, miss stored or not, off), by name."""
        return {
            name: self._results[name].cache
            for name in ("decode", "prefill")
            if name in self._results
        }

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
        t0 = time.perf_counter()
        logits = self.prefill_prompt(prompt)
        t1 = time.perf_counter()
        result = Generation([], prefill_s=t1 - t0, first_token_at=t1)
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
            if self._decode is None:
                w0 = time.perf_counter()
                self.decode  # noqa: B018  # waits for (or runs) its compile
                result.decode_wait_s = time.perf_counter() - w0
            logits = self.step(token)
        self.store_entries()  # after the tokens: off their path
        return result
