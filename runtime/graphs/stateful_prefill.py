"""Prefill on a source's stateful dynamic-shape model (KV in state variables), read back into
our KV store.

The CPU plugin runs the attention of a stateful decoder with its fused SDPA kernel over the
filled slots (the state holds exactly those), while a stateless graph's SDPA is decomposed
into matrix products over every slot it is given. Prefill is where that matters: the prompt
goes through the stateful model in calls of up to ``spec.chunk`` tokens, and each call's new
K/V rows are read out of the state for the host to write into the store, as a static graph's
new rows are. Dynamic shapes: a CPU path (device_defaults.py), never an NPU one.
"""

from __future__ import annotations

import re

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision import f32_to_bf16_bits
from compile_ahead.runtime.graphs.decoder import GraphSpec
from compile_ahead.runtime.graphs.ir_cut import LAST_INDEX, gather_last
from compile_ahead.runtime.graphs.step import StepOutput
from compile_ahead.runtime.model.ir_reader import (
    ATTENTION_MASK,
    BEAM_IDX,
    INPUT_IDS,
    LOGITS,
    POSITION_IDS,
)
from compile_ahead.runtime.model.kv_arena import KVArena

# optimum's variable ids (and ours, graphs/stateful.py): past_key_values.{i}.{key|value}...
_VARIABLE = re.compile(r"past_key_values\.(\d+)\.(key|value)")


def prefill_model(model: ov.Model) -> ov.Model:
    """A stateful decoder with one row of logits: hidden[:, last_index] before the LM head."""
    logits = next(p for p in model.outputs if LOGITS in p.get_names())
    gather_last(model, logits)
    model.validate_nodes_and_infer_types()
    return model


def kv_cache_config(spec: GraphSpec) -> dict[str, str]:
    """The state's precision in the plugin: the store's, so rows read back are what a static
    graph would have written."""
    return {"KV_CACHE_PRECISION": spec.kv_precision}


def _to_storage(rows: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype == np.uint16:  # bf16 bits
        return f32_to_bf16_bits(rows)
    return np.ascontiguousarray(rows, dtype)


class StatefulPrefillStep:
    """The step interface (``spec``, ``num_layers``, ``bound``, ``bind``, ``run``) over a
    compiled stateful decoder: ``run`` continues the state from ``past_length`` filled slots
    (reloading them from the bound store when the state holds anything else)."""

    keep_alive: object = None

    def __init__(self, compiled: ov.CompiledModel, spec: GraphSpec, num_layers: int):
        self.compiled = compiled
        self.spec = spec
        self.num_layers = num_layers
        self.request = compiled.create_infer_request()
        self.states: dict[tuple[int, str], ov.VariableState] = {}
        for state in self.request.query_state():
            found = _VARIABLE.match(state.name)
            if found:
                self.states[(int(found.group(1)), found.group(2))] = state
        if len(self.states) != 2 * num_layers:
            raise CompileAheadError(
                f"the stateful model has {len(self.states)} KV state variables, expected "
                f"{2 * num_layers}"
            )
        names = {name for port in compiled.inputs for name in port.get_names()}
        self._optional = {POSITION_IDS, BEAM_IDX} & names
        self._filled = 0  # slots the state holds
        self.bound: KVArena | None = None

    def bind(self, arena: KVArena) -> None:
        self.bound = arena  # rows are written by the store; read only to reload the state

    def _load(self, length: int) -> None:
        """Make the state hold the bound store's first ``length`` slots."""
        self.request.reset_state()
        if length == 0:
            return
        arena = self.bound
        if arena is None:
            raise CompileAheadError("the stateful prefill graph is not bound to a KV store")
        from compile_ahead.runtime.base.precision import bf16_bits_to_f32

        for (layer, kind), state in self.states.items():
            rows = (arena.keys if kind == "key" else arena.values)[layer][:, :, :length]
            f32 = bf16_bits_to_f32(rows) if rows.dtype == np.uint16 else rows.astype(np.float32)
            state.state = ov.Tensor(np.ascontiguousarray(f32))

    def run(self, ids: np.ndarray, past_length: int, last_index: int = 0) -> StepOutput:
        n = len(ids)
        if past_length + n > self.spec.input_capacity:
            raise CompileAheadError(
                f"{past_length} + {n} tokens exceed the prefill capacity {self.spec.capacity}"
            )
        if past_length != self._filled or past_length == 0:
            self._load(past_length)
        inputs: dict[str, np.ndarray] = {
            INPUT_IDS: np.asarray(ids, np.int64).reshape(1, n),
            ATTENTION_MASK: np.ones((1, past_length + n), np.int64),
            LAST_INDEX: np.asarray([last_index], np.int64),
        }
        if POSITION_IDS in self._optional:
            inputs[POSITION_IDS] = np.arange(past_length, past_length + n, dtype=np.int64)[None]
        if BEAM_IDX in self._optional:
            inputs[BEAM_IDX] = np.zeros(1, np.int32)
        self.request.infer(inputs)
        self._filled = past_length + n
        storage = self.bound.keys[0].dtype if self.bound is not None else np.dtype(np.float32)
        keys, values = [], []
        for layer in range(self.num_layers):
            for kind, out in (("key", keys), ("value", values)):
                rows = self.states[(layer, kind)].state.data[:, :, past_length:]
                out.append(_to_storage(rows, storage))
        logits = self.request.get_tensor(LOGITS).data.reshape(-1)
        return StepOutput(logits.copy(), keys, values)
