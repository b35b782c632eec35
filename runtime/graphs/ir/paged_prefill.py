"""Prefill through the plugin's paged attention, its K/V written into block tensors we own.

OpenVINO's SDPAToPagedAttention pass (``paged_attention_transformation``) turns a source's
stateful decoder (the IR as exported, or graphs/stateful.py) into the form openvino-genai's
LLMPipeline runs: flat token inputs, and per layer a key and a value cache input of blocks
``[blocks, kv_heads, block, head_dim]`` that the PagedAttention kernel reads the past from
and writes the new rows into. The kernel attends over the filled slots only (``past_lens``)
with a causal mask computed inside, so a prompt costs what the peer's does. The cache
tensors belong to the step: after each call the chunk's rows are read out of the blocks
(no state to convert) for the store to append, as a static graph's new rows are.
Dynamic shapes and a plugin extension op: a CPU path (device_defaults.py), never an NPU one.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino._offline_transformations import paged_attention_transformation

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision import (
    OV_TYPES,
    STORAGE_DTYPES,
    bf16_bits_to_f32,
    f32_to_bf16_bits,
)
from compile_ahead.runtime.graphs.ir.cut import gather_last
from compile_ahead.runtime.graphs.spec import LAST_INDEX, GraphSpec
from compile_ahead.runtime.graphs.step import StepOutput
from compile_ahead.runtime.model.ir_reader import INPUT_IDS, LOGITS, POSITION_IDS
from compile_ahead.runtime.model.kv_arena import KVArena

# The pass's inputs (openvino/pass/sdpa_to_paged_attention.hpp), one sequence per call.
PAST_LENS = "past_lens"
SUBSEQUENCE_BEGINS = "subsequence_begins"
BLOCK_INDICES = "block_indices"
BLOCK_INDICES_BEGINS = "block_indices_begins"
MAX_CONTEXT_LEN = "max_context_len"


def key_cache_name(layer: int) -> str:
    return f"key_cache.{layer}"


def value_cache_name(layer: int) -> str:
    return f"value_cache.{layer}"


def paged_prefill_model(stateful: ov.Model) -> ov.Model:
    """The stateful decoder as a paged-attention model with one row of logits (the
    ``last_index`` token's: the LM head runs on that row only)."""
    paged_attention_transformation(stateful, False, False)
    logits = next(p for p in stateful.outputs if LOGITS in p.get_names())
    gather_last(stateful, logits, token_axis=0)  # the pass puts the tokens first
    stateful.validate_nodes_and_infer_types()
    return stateful


def kv_cache_config(spec: GraphSpec) -> dict[str, str]:
    """The cache blocks' precision asked of the plugin: the store's, so rows read out are what
    a static graph would have written. The plugin may keep another (the CPU plugin holds an
    f16 request in bf16 when it computes in bf16); rows are then converted on the way."""
    return {"KV_CACHE_PRECISION": spec.kv_precision}


def _convert(rows: np.ndarray, source: str, target: str) -> np.ndarray:
    """Rows held in ``source`` precision (base/precision.py PRECISIONS; bf16 as its bits) as
    ``target``'s storage (a copy)."""
    if source == target:
        return np.array(rows, copy=True)
    f32 = bf16_bits_to_f32(rows) if source == "bf16" else rows.astype(np.float32)
    if target == "bf16":
        return f32_to_bf16_bits(f32)
    return f32.astype(STORAGE_DTYPES[target])


class PagedPrefillStep:
    """The step interface (``spec``, ``num_layers``, ``bound``, ``bind``, ``run``) over a
    compiled paged-attention decoder. Its cache holds ``spec.input_capacity`` slots in
    blocks 0, 1, ... in order; ``run`` continues from ``past_length`` filled slots (copying
    them in from the bound store when the blocks hold anything else)."""

    def __init__(self, compiled: ov.CompiledModel, spec: GraphSpec, num_layers: int):
        self.compiled = compiled
        self.spec = spec
        self.num_layers = num_layers
        self.request = compiled.create_infer_request()
        port = compiled.input(key_cache_name(0))
        shape = port.get_partial_shape()
        kv_type = port.get_element_type()
        held = next((name for name, t in OV_TYPES.items() if t == kv_type), None)
        if held is None or shape.rank.get_length() != 4:
            raise CompileAheadError(
                f"the paged prefill graph's cache is {kv_type} {shape}; this step reads "
                f"f32, f16 or bf16 blocks [blocks, kv_heads, block, head_dim]"
            )
        self.cache_precision: str = held
        self.heads, self.block, self.head_dim = (shape[i].get_length() for i in (1, 2, 3))
        layout = [self.heads, self.block, self.head_dim]
        blocks = -(-spec.input_capacity // self.block)
        self._tensors: list[ov.Tensor] = []  # owners of the views below
        # Numpy views of the cache tensors (bf16 as its bits).
        self.caches: dict[tuple[int, str], np.ndarray] = {}
        for layer in range(num_layers):
            for kind, name in (("key", key_cache_name(layer)), ("value", value_cache_name(layer))):
                dims = compiled.input(name).get_partial_shape()
                if [dims[i].get_length() for i in (1, 2, 3)] != layout:
                    raise CompileAheadError(f"the paged prefill graph's {name} is {dims}")
                tensor = ov.Tensor(kv_type, [blocks, *layout])
                self.request.set_tensor(name, tensor)
                self._tensors.append(tensor)
                data = tensor.data
                if kv_type == ov.Type.bf16:  # numpy has no bf16: its bits, as the store's
                    data = data.view(np.uint16)
                self.caches[(layer, kind)] = data
        names = {name for p in compiled.inputs for name in p.get_names()}
        self._positions = POSITION_IDS in names
        self._filled = 0  # slots the blocks hold
        self.bound: KVArena | None = None

    def bind(self, arena: KVArena) -> None:
        """Rows are written by the store; the step reads it only to reload its blocks."""
        _, heads, _, head_dim = arena.keys[0].shape
        if (heads, head_dim) != (self.heads, self.head_dim):
            raise CompileAheadError(
                f"the paged prefill graph's cache blocks hold {self.heads} heads of "
                f"{self.head_dim}, the KV store {heads} of {head_dim}"
            )
        self.bound = arena

    def _slots(self, cache: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Slots start..stop-1 as a [1, heads, stop - start, head_dim] copy in the store's
        precision."""
        first, last = start // self.block, -(-stop // self.block)
        rows = cache[first:last].transpose(1, 0, 2, 3).reshape(self.heads, -1, self.head_dim)
        offset = first * self.block
        part = rows[None, :, start - offset : stop - offset]
        return _convert(part, self.cache_precision, self.spec.kv_precision)

    def _load(self, length: int) -> None:
        """Make the blocks hold the bound store's first ``length`` slots."""
        arena = self.bound
        if arena is None:
            raise CompileAheadError("the paged prefill graph is not bound to a KV store")
        for (layer, kind), cache in self.caches.items():
            rows = (arena.keys if kind == "key" else arena.values)[layer][0, :, :length]
            rows = _convert(rows, self.spec.kv_precision, self.cache_precision)
            for block in range(-(-length // self.block)):
                part = rows[:, block * self.block : (block + 1) * self.block]
                cache[block, :, : part.shape[1]] = part

    def run(self, ids: np.ndarray, past_length: int, last_index: int = 0) -> StepOutput:
        n = len(ids)
        end = past_length + n
        if end > self.spec.input_capacity:
            raise CompileAheadError(
                f"{past_length} + {n} tokens exceed the prefill capacity {self.spec.capacity}"
            )
        if past_length != self._filled and past_length > 0:
            self._load(past_length)
        used = -(-end // self.block)
        inputs: dict[str, np.ndarray] = {
            INPUT_IDS: np.asarray(ids, np.int64).reshape(n),
            PAST_LENS: np.asarray([past_length], np.int32),
            SUBSEQUENCE_BEGINS: np.asarray([0, n], np.int32),
            BLOCK_INDICES_BEGINS: np.asarray([0, used], np.int32),
            BLOCK_INDICES: np.arange(used, dtype=np.int32),
            MAX_CONTEXT_LEN: np.asarray(end, np.int32),
            LAST_INDEX: np.asarray([last_index], np.int64),
        }
        if self._positions:
            inputs[POSITION_IDS] = np.arange(past_length, end, dtype=np.int64)
        self.request.infer(inputs)
        self._filled = end
        layers = range(self.num_layers)
        keys = [self._slots(self.caches[(i, "key")], past_length, end) for i in layers]
        values = [self._slots(self.caches[(i, "value")], past_length, end) for i in layers]
        logits = self.request.get_tensor(LOGITS).data.reshape(-1)
        return StepOutput(logits.copy(), keys, values)
