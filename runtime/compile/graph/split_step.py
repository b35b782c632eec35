"""Running the split graphs: weight parts compiled once, one attention core per capacity.

All tensors between calls are pre-bound host buffers (set_output_tensor on one request, the
same buffer as input of the next), so a token is 2N+1 infer calls and no copies. One compiled
attention core serves every layer through one infer request per layer, each bound to that
layer's KV buffers.

At batch B > 1 every buffer leads with B and the past lengths are one per sequence: the weight
parts are compiled for that B (a [B, C] rung needs [B] parts), the host gathers each
sequence's embedding row, and one step takes B tokens and gives B rows of logits.
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
import openvino as ov

from compile_ahead.runtime.base.ov_core import compile_model
from compile_ahead.runtime.base.precision import OV_TYPES, STORAGE_DTYPES
from compile_ahead.runtime.compile.cache.keys import attention_core_identity, weight_part_identity
from compile_ahead.runtime.compile.cache.outcome import CacheOutcome, Compiled
from compile_ahead.runtime.compile.cache.store import cached_compile
from compile_ahead.runtime.compile.graph.result import CompileResult
from compile_ahead.runtime.compile.settings.options import CompileOptions, device_config
from compile_ahead.runtime.graphs import split as split_graphs
from compile_ahead.runtime.graphs.spec import (
    LOGITS,
    PAST_LENGTH,
    GraphSpec,
    past_key_name,
    past_value_name,
)
from compile_ahead.runtime.graphs.step import StepOutput
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.sources.base import ModelSource


def _shared(array: np.ndarray, element_type: ov.Type | None = None) -> ov.Tensor:
    if element_type is None:
        return ov.Tensor(array, shared_memory=True)
    return ov.Tensor(array, list(array.shape), element_type)


def compile_part(
    source: ModelSource,
    build: Callable[[], ov.Model],
    options: CompileOptions,
    what: str,
    graph: dict[str, object],
    restorable: bool = True,
) -> tuple[ov.CompiledModel, CacheOutcome]:
    """Import the graph from the compile cache (options.cache), or build and compile it.
    ``restorable``: a weightless entry may restore its weights from ``build``'s graph (ours;
    an IR's are not, as for its whole graphs: graph/step_compile.py)."""

    def compile_fn(opts: CompileOptions) -> Compiled:
        return Compiled(compile_model(build(), opts.device, device_config(opts), what))

    model_fn = build if restorable else None
    compiled, outcome, _ = cached_compile(
        options.cache, source, graph, options, compile_fn, model_fn
    )
    return compiled.model, outcome


class CompiledParts(ABC):
    """Weight parts compiled once per batch size and shared by every rung of it: the buffers
    each layer's attention core reads and writes (``query[i]``, ``new_keys[i]``,
    ``new_values[i]``, ``attn[i]`` and ``past_length``), the parts' requests in order and the
    logits ([B, vocab]). WeightParts builds them from weights, ir_split_parts.IRWeightParts
    cuts them from an IR."""

    source: ModelSource
    batch: int
    kv_precision: str
    compiled: list[ov.CompiledModel]
    cache_outcomes: list[CacheOutcome]
    compile_s: float
    requests: list[ov.InferRequest]
    query: list[np.ndarray]
    new_keys: list[np.ndarray]
    new_values: list[np.ndarray]
    attn: list[np.ndarray]
    past_length: np.ndarray
    logits: np.ndarray

    @abstractmethod
    def feed(self, ids: np.ndarray, past_length: int | np.ndarray) -> None:
        """Write one step's inputs: a token per sequence after its ``past_length`` slots."""

    def compile_core(self, spec: GraphSpec, options: CompileOptions) -> CompileResult:
        """A rung of these parts: its attention core, compiled or imported."""
        return compile_attention_core(self, spec, options)

    @property
    def cache_state(self) -> str:
        """hit when every part was imported, off when no part used the cache, else miss."""
        states = {o.state for o in self.cache_outcomes}
        return states.pop() if len(states) == 1 else "miss"

    @property
    def import_s(self) -> float:
        return sum(o.import_s for o in self.cache_outcomes)

    @property
    def cache_outcome(self) -> CacheOutcome:
        """The parts' outcomes as one: their state (cache_state), import seconds summed,
        stored when every miss was, their notes joined."""
        misses = [o for o in self.cache_outcomes if o.state == "miss"]
        notes = sorted({o.note for o in self.cache_outcomes if o.note})
        return CacheOutcome(
            self.cache_state,  # type: ignore[arg-type]
            import_s=self.import_s,
            verify_s=sum(o.verify_s for o in self.cache_outcomes),
            stored=bool(misses) and all(o.stored for o in misses),
            note="; ".join(notes) or None,
        )


class WeightParts(CompiledParts):
    """The weight-bearing part of the decoder, compiled once and shared by every rung."""

    def __init__(self, source: ModelSource, options: CompileOptions, batch: int = 1):
        options = options.resolved()
        cfg = source.config
        self.source = source
        self.batch = batch
        kv = options.kv_precision
        assert kv is not None
        self.kv_precision = kv
        kv_dtype, kv_type = STORAGE_DTYPES[kv], OV_TYPES[kv]
        t0 = time.perf_counter()
        compiled = [
            compile_part(
                source,
                functools.partial(
                    split_graphs.build_weight_part, cfg, source.weights, i, kv, batch
                ),
                options,
                f"weight part {i}",
                weight_part_identity(i, kv, batch),
            )
            for i in range(cfg.num_layers + 1)
        ]
        self.compile_s = time.perf_counter() - t0  # compile or cache import, all parts
        self.compiled = [c for c, _ in compiled]
        self.cache_outcomes = [o for _, o in compiled]
        self.requests = [c.create_infer_request() for c in self.compiled]
        d, qd, hd = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.head_dim
        n, b = cfg.num_layers, batch
        # Buffers: hidden[i] is layer i's input residual; the host writes hidden[0].
        self.hidden = [np.zeros((b, 1, d), np.float32) for _ in range(n)]
        self.query = [np.zeros((b, cfg.num_heads, 1, hd), np.float32) for _ in range(n)]
        kv_shape = (b, cfg.num_kv_heads, 1, hd)
        self.new_keys = [np.zeros(kv_shape, kv_dtype) for _ in range(n)]
        self.new_values = [np.zeros(kv_shape, kv_dtype) for _ in range(n)]
        self.attn = [np.zeros((b, 1, qd), np.float32) for _ in range(n)]
        self.logits = np.zeros((b, cfg.vocab_size), np.float32)
        self.past_length = np.zeros(split_graphs.past_length_shape(b), np.int64)
        past = _shared(self.past_length)
        for i, req in enumerate(self.requests):
            if i < n:
                req.set_tensor(PAST_LENGTH, past)
                req.set_tensor(split_graphs.QUERY, _shared(self.query[i]))
                req.set_tensor(split_graphs.NEW_KEY, _shared(self.new_keys[i], kv_type))
                req.set_tensor(split_graphs.NEW_VALUE, _shared(self.new_values[i], kv_type))
            if i == 0:
                req.set_tensor(split_graphs.HIDDEN_IN, _shared(self.hidden[0]))
            else:
                req.set_tensor(split_graphs.HIDDEN_IN, _shared(self.hidden[i - 1]))
                req.set_tensor(split_graphs.ATTN_IN, _shared(self.attn[i - 1]))
            if 0 < i < n:
                req.set_tensor(split_graphs.HIDDEN_OUT, _shared(self.hidden[i]))
        self.requests[n].set_tensor(LOGITS, _shared(self.logits))
        self._weights = source.weights
        self._weights.load("model.embed_tokens.weight")

    def embed(self, ids: np.ndarray) -> None:
        """Gather each sequence's embedding row on the host, decompressed to f32."""
        rows = np.asarray(ids, np.int64).reshape(self.batch)
        self.hidden[0][:, 0] = self._weights.embedding_rows("model.embed_tokens.weight", rows)

    def feed(self, ids: np.ndarray, past_length: int | np.ndarray) -> None:
        self.embed(ids)
        self.past_length[...] = past_length


class SplitStep:
    """One rung in split mode; the same interface as CompiledStep (decode only): at batch
    B > 1 it takes ids [B] and past lengths [B] and gives logits [B, vocab]."""

    def __init__(self, parts: CompiledParts, compiled_core: ov.CompiledModel, spec: GraphSpec):
        assert spec.batch == parts.batch, "a rung's attention core and its weight parts"
        cfg = parts.source.config
        self.parts = parts
        self.compiled = compiled_core
        self.spec = spec
        self.num_layers = cfg.num_layers
        kv_type = OV_TYPES[parts.kv_precision]
        past = _shared(parts.past_length)
        self.requests = []
        for i in range(cfg.num_layers):
            req = compiled_core.create_infer_request()
            req.set_tensor(split_graphs.QUERY, _shared(parts.query[i]))
            req.set_tensor(split_graphs.NEW_KEY, _shared(parts.new_keys[i], kv_type))
            req.set_tensor(split_graphs.NEW_VALUE, _shared(parts.new_values[i], kv_type))
            req.set_tensor(PAST_LENGTH, past)
            req.set_tensor(split_graphs.ATTN_OUT, _shared(parts.attn[i]))
            self.requests.append(req)
        self.bound: KVArena | None = None

    def bind(self, arena: KVArena) -> None:
        keys, values = arena.tensors()
        for i, req in enumerate(self.requests):
            req.set_tensor(past_key_name(0), keys[i])
            req.set_tensor(past_value_name(0), values[i])
        self.bound = arena

    def run(
        self, ids: np.ndarray, past_length: int | np.ndarray, last_index: int = 0
    ) -> StepOutput:
        parts = self.parts
        parts.feed(ids, past_length)
        for weights, attention in zip(parts.requests, self.requests, strict=False):
            weights.infer()
            attention.infer()
        parts.requests[-1].infer()
        logits = parts.logits if parts.batch > 1 else parts.logits[0]  # [B, vocab], or [vocab]
        return StepOutput(logits, parts.new_keys, parts.new_values)


def compile_attention_core(
    parts: CompiledParts, spec: GraphSpec, options: CompileOptions
) -> CompileResult:
    """A rung in split mode: only its attention core is compiled, in the same precision as
    the rest (on an AMX CPU an f32 core spends more converting the bf16 cache than a bf16 core
    spends in total)."""
    compiled, outcome = compile_part(
        parts.source,
        lambda: split_graphs.build_attention_core(parts.source.config, spec),
        options.resolved(),
        f"the C={spec.capacity} attention core",
        attention_core_identity(spec),
    )
    return CompileResult(SplitStep(parts, compiled, spec), outcome)
