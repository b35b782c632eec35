"""Compile and run a rung graph cut from a stateful decoder IR, with the interface of
CompiledStep (``spec``, ``num_layers``, ``bound``, ``bind``, ``run``) so the ladder runner and
the static decoder use it unchanged.

Per step the host writes only the token ids, positions and the attention mask (ones over the
filled past slots and the chunk, zeros over the unwritten slots); the past K/V are the store's
buffers bound once as shared tensors, and the new K/V rows come back as small outputs.

A batched graph (spec.batch B > 1, decode only: prefill graphs take one sequence) takes ids
[B] and past lengths [B]: each sequence gets its own position and its own mask row, so a
sequence sees only its own filled slots, whatever the others' lengths.
"""

from __future__ import annotations

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.graphs.spec import LAST_INDEX, PAST_LENGTH, GraphSpec
from compile_ahead.runtime.graphs.step import StepOutput, StepOutputs, bind_past_kv
from compile_ahead.runtime.model.ir_reader import ATTENTION_MASK, INPUT_IDS, POSITION_IDS
from compile_ahead.runtime.model.kv_arena import KVArena


def _shared(array: np.ndarray) -> ov.Tensor:
    return ov.Tensor(array, shared_memory=True)


class IRStep:
    """One compiled IR rung graph; ``bind`` points its past-KV inputs at a cache's buffers."""

    def __init__(self, compiled: ov.CompiledModel, spec: GraphSpec, num_layers: int):
        self.compiled = compiled
        self.spec = spec
        self.num_layers = num_layers
        self.request = compiled.create_infer_request()
        L, C, B = spec.chunk, spec.capacity, spec.batch
        self._ids = np.zeros((B, L), np.int64)
        self._positions = np.zeros((B, L), np.int64)
        self._mask = np.ones((B, C + L), np.int64)
        self._last = np.zeros((1,), np.int64)
        self._past_len = np.zeros((1,), np.int64)
        names = {name for port in compiled.inputs for name in port.get_names()}
        self._has_positions = POSITION_IDS in names
        if spec.dynamic:
            self.request.set_tensor(PAST_LENGTH, _shared(self._past_len))
        self.request.set_tensor(INPUT_IDS, _shared(self._ids))
        self.request.set_tensor(ATTENTION_MASK, _shared(self._mask))
        if POSITION_IDS in names:
            self.request.set_tensor(POSITION_IDS, _shared(self._positions))
        if LAST_INDEX in names:
            self.request.set_tensor(LAST_INDEX, _shared(self._last))
        rows = (0, -1) if B == 1 else (slice(None), -1)  # [vocab], or [B, vocab]
        self.outputs = StepOutputs(self.request, num_layers, rows)
        self.bound: KVArena | None = None

    def bind(self, arena: KVArena) -> None:
        """Point the past-KV inputs at an arena's buffers (no copy, now or per step)."""
        bind_past_kv(self.request, self.num_layers, arena)
        self.bound = arena  # the tensors alias its memory: keep it referenced

    def run(
        self, ids: np.ndarray, past_length: int | np.ndarray, last_index: int = 0
    ) -> StepOutput:
        L, C = self.spec.chunk, self.spec.capacity
        if np.max(past_length) > C:
            raise CompileAheadError(
                f"past length {np.max(past_length)} exceeds the rung capacity {C}"
            )
        if self.spec.batch > 1:
            return self._run_batch(ids, np.asarray(past_length, np.int64))
        past = int(np.asarray(past_length).reshape(-1)[0])  # one sequence: an int or [1]
        if self.spec.dynamic:
            return self._run_filled(ids, past, last_index)
        self._ids[0, : len(ids)] = ids
        self._ids[0, len(ids) :] = 0
        self._positions[0] = np.arange(past, past + L)
        self._mask[0, :past] = 1
        self._mask[0, past:C] = 0
        self._last[0] = last_index
        return self._infer()

    def _run_batch(self, ids: np.ndarray, past: np.ndarray) -> StepOutput:
        """One token per sequence ([B] ids), each after its own ``past[b]`` filled slots."""
        C = self.spec.capacity
        self._ids[...] = np.asarray(ids, np.int64).reshape(self.spec.batch, -1)
        past = past.reshape(self.spec.batch, 1)
        self._positions[...] = past + np.arange(self.spec.chunk)
        self._mask[:, :C] = np.arange(C) < past
        self._mask[:, C:] = 1
        return self._infer()

    def _run_filled(self, ids: np.ndarray, past_length: int, last_index: int) -> StepOutput:
        """A dynamic graph: exactly ``ids`` after the ``past_length`` filled slots."""
        n = len(ids)
        self._ids[0, :n] = ids
        self._positions[0, :n] = np.arange(past_length, past_length + n)
        self._past_len[0] = past_length
        self._last[0] = last_index
        self.request.set_tensor(INPUT_IDS, _shared(self._ids[:, :n]))
        self.request.set_tensor(ATTENTION_MASK, _shared(self._mask[:, : past_length + n]))
        if self._has_positions:
            self.request.set_tensor(POSITION_IDS, _shared(self._positions[:, :n]))
        return self._infer()

    def _infer(self) -> StepOutput:
        self.request.infer()
        return self.outputs.read()
