"""A compiled step graph (decode or prefill chunk) with its infer request bound to KV memory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import openvino as ov

from compile_ahead.runtime.graphs.spec import (
    INPUT_IDS,
    LAST_INDEX,
    LOGITS,
    PAST_LENGTH,
    GraphSpec,
    new_key_name,
    new_value_name,
    past_key_name,
    past_value_name,
)
from compile_ahead.runtime.model.kv_arena import KVArena


@dataclass
class StepOutput:
    logits: np.ndarray  # [vocab] f32 ([B, vocab] for a batched graph)
    new_keys: list[np.ndarray]  # per layer [B, kv, L, hd], views valid until the next call
    new_values: list[np.ndarray]


class Step(Protocol):
    """What drives a compiled step graph (CompiledStep here, graphs/ir/step.py's, the paged
    prefill step, compile/graph/split_step.py's): a chunk of ids run after ``past_length`` slots."""

    @property
    def spec(self) -> GraphSpec: ...

    def run(self, ids: np.ndarray, past_length: int, last_index: int = 0) -> StepOutput: ...


def bind_past_kv(request: ov.InferRequest, num_layers: int, arena: KVArena) -> None:
    """Set every layer's past K/V input to a tensor aliasing the arena (the caller keeps the
    arena referenced while the request may run)."""
    keys, values = arena.tensors()
    for i in range(num_layers):
        request.set_tensor(past_key_name(i), keys[i])
        request.set_tensor(past_value_name(i), values[i])


class StepOutputs:
    """Reads a request's outputs after each call: per layer the new K/V rows, and the logits
    (``logits_row`` picks the row out of the logits tensor). A static graph's output tensors
    are ours, set once (the plugin writes into them), so a call reads prepared numpy views
    instead of looking up 2N+1 tensors; a graph with dynamic outputs is looked up per call."""

    def __init__(self, request: ov.InferRequest, num_layers: int, logits_row: tuple) -> None:
        self.request = request
        self.num_layers = num_layers
        self.logits_row = logits_row
        self._tensors: list[ov.Tensor] = []  # owners of the views below
        self._views: StepOutput | None = None
        ports = request.model_outputs
        if all(p.get_partial_shape().is_static for p in ports):
            views: dict[str, np.ndarray] = {}
            for port in ports:
                tensor = ov.Tensor(port.get_element_type(), port.get_shape())
                request.set_tensor(port, tensor)
                self._tensors.append(tensor)
                views.update(dict.fromkeys(port.get_names(), tensor.data))
            self._views = self._read(views.__getitem__)

    def _read(self, get: Callable[[str], np.ndarray]) -> StepOutput:
        layers = range(self.num_layers)
        return StepOutput(
            get(LOGITS)[self.logits_row],
            [get(new_key_name(i)) for i in layers],
            [get(new_value_name(i)) for i in layers],
        )

    def read(self) -> StepOutput:
        """The outputs of the last call (views valid until the next one)."""
        if (v := self._views) is not None:  # a new record, so a caller may keep or edit it
            return StepOutput(v.logits, list(v.new_keys), list(v.new_values))
        return self._read(lambda name: self.request.get_tensor(name).data)


class CompiledStep:
    """One compiled graph; ``bind`` points its past-KV inputs at a cache's buffers.

    A batched graph (spec.batch B > 1) takes ids [B, L] and past lengths [B] and gives logits
    [B, vocab]; a batch-1 graph takes ids [L] and one past length and gives logits [vocab]."""

    def __init__(self, compiled: ov.CompiledModel, spec: GraphSpec, num_layers: int):
        self.compiled = compiled
        self.spec = spec
        self.num_layers = num_layers
        self.request = compiled.create_infer_request()
        batch = spec.batch
        self._ids = np.zeros((batch, spec.chunk), np.int64)
        per_sequence = () if batch == 1 else (batch,)
        self._past_len = np.zeros(per_sequence, np.int64)
        self._last = np.zeros(per_sequence, np.int64)
        self.request.set_tensor(INPUT_IDS, ov.Tensor(self._ids, shared_memory=True))
        self.request.set_tensor(PAST_LENGTH, ov.Tensor(self._past_len, shared_memory=True))
        if spec.chunk > 1 or spec.dynamic:
            self.request.set_tensor(LAST_INDEX, ov.Tensor(self._last, shared_memory=True))
        rows = (0,) if batch == 1 else (slice(None),)  # [vocab], or [B, vocab]
        self.outputs = StepOutputs(self.request, num_layers, rows)
        self.bound: KVArena | None = None

    def bind(self, arena: KVArena) -> None:
        """Point the past-KV inputs at an arena's buffers (no copy, now or per step)."""
        bind_past_kv(self.request, self.num_layers, arena)
        self.bound = arena  # the tensors alias its memory: keep it referenced

    def run(
        self, ids: np.ndarray, past_length: int | np.ndarray, last_index: int = 0
    ) -> StepOutput:
        if self.spec.batch > 1:  # ids [B, L] (or [B]: one token each), past_length [B]
            self._ids[...] = np.asarray(ids, np.int64).reshape(self.spec.batch, -1)
            self._past_len[...] = past_length
            self._last[...] = last_index
            self.request.infer()
            return self.outputs.read()
        self._ids[0, : len(ids)] = ids
        self._ids[0, len(ids) :] = 0
        if self.spec.dynamic:  # exactly the tokens given: no padded rows to compute
            view = ov.Tensor(self._ids[:, : len(ids)], shared_memory=True)
            self.request.set_tensor(INPUT_IDS, view)
        self._past_len[...] = past_length
        self._last[...] = last_index
        self.request.infer()
        return self.outputs.read()
