"""An IR's split graphs (graphs/ir/split.py): its weight parts compiled once per batch size, a
rung only the attention core graphs/split.py builds, driven by split_step.SplitStep as a
checkpoint's.

Every part input and output is bound by name, once, to a host buffer: what a part gives
(query.i, new_key.i, new_value.i, cut.<k>) is the very buffer a later part or the layer's
attention core reads, so a token is 2N+1 infer calls and no copies. Per step the host writes
only the token ids, the positions (each sequence's past length) and the past lengths the core
masks with.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision import OV_TYPES, STORAGE_DTYPES
from compile_ahead.runtime.compile.cache.keys import weight_part_identity
from compile_ahead.runtime.compile.graph.result import CompileResult
from compile_ahead.runtime.compile.graph.split_step import CompiledParts, compile_part
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.graphs.ir import split as ir_split
from compile_ahead.runtime.graphs.spec import LOGITS, GraphSpec, new_key_name, new_value_name
from compile_ahead.runtime.graphs.split import past_length_shape
from compile_ahead.runtime.model.ir_reader import INPUT_IDS, POSITION_IDS
from compile_ahead.runtime.sources.ir_source import IRSource


def _shared(array: np.ndarray, element_type: ov.Type | None = None) -> ov.Tensor:
    if element_type is None:
        return ov.Tensor(array, shared_memory=True)
    return ov.Tensor(array, list(array.shape), element_type)


def _name(port: ov.ConstOutput) -> str:
    name = ir_split.io_name(port.get_names())
    if name is None:
        raise CompileAheadError(f"a split weight part has a port it does not name: {port}")
    return name


def _build_part(cut: Callable[[], ov.Model], index: int, batch: int) -> ov.Model:
    return ir_split.weight_part(cut(), index, batch)


class IRWeightParts(CompiledParts):
    """An IR's weight parts for ``batch`` sequences, compiled (or imported) once and shared by
    every rung of that batch size; the IR is read and cut only when a part is compiled."""

    source: IRSource

    def __init__(self, source: IRSource, options: CompileOptions, batch: int = 1):
        options = options.resolved()
        kv = options.kv_precision
        assert kv is not None
        self.source, self.batch, self.kv_precision = source, batch, kv
        cut = functools.cache(functools.partial(source.split_weights, batch, kv))
        t0 = time.perf_counter()
        compiled = [
            compile_part(
                source,
                functools.partial(_build_part, cut, i, batch),
                options,
                f"weight part {i}",
                weight_part_identity(i, kv, batch),
                restorable=False,
            )
            for i in range(source.config.num_layers + 1)
        ]
        self.compile_s = time.perf_counter() - t0  # compile or cache import, all parts
        self.compiled = [c for c, _ in compiled]
        self.cache_outcomes = [o for _, o in compiled]
        self.requests = [c.create_infer_request() for c in self.compiled]
        self._bind()

    def _bind(self) -> None:
        """Host buffers for what the host and the cores touch, shaped as the parts' ports; a
        tensor of OpenVINO's own for what only passes from a part to a later one."""
        n, b = self.source.config.num_layers, self.batch
        kv_dtype, kv_type = STORAGE_DTYPES[self.kv_precision], OV_TYPES[self.kv_precision]
        ports = {_name(p): p for c in self.compiled for p in [*c.outputs, *c.inputs]}

        def buffer(name: str, dtype: np.dtype | type | None = None) -> np.ndarray:
            port = ports[name]
            return np.zeros(list(port.get_shape()), dtype or port.get_element_type().to_dtype())

        self.ids = np.zeros((b, 1), np.int64)
        self.positions = np.zeros((b, 1), np.int64)
        self.past_length = np.zeros(past_length_shape(b), np.int64)
        self.query = [buffer(ir_split.query_name(i)) for i in range(n)]
        self.new_keys = [buffer(new_key_name(i), kv_dtype) for i in range(n)]
        self.new_values = [buffer(new_value_name(i), kv_dtype) for i in range(n)]
        self.attn = [buffer(ir_split.attn_in_name(i)) for i in range(n)]
        logits = buffer(LOGITS)  # [B, 1, vocab]
        self.logits = logits[:, -1]
        tensors = {INPUT_IDS: _shared(self.ids), POSITION_IDS: _shared(self.positions)}
        tensors[LOGITS] = _shared(logits)
        for i in range(n):
            tensors[ir_split.query_name(i)] = _shared(self.query[i])
            tensors[new_key_name(i)] = _shared(self.new_keys[i], kv_type)
            tensors[new_value_name(i)] = _shared(self.new_values[i], kv_type)
            tensors[ir_split.attn_in_name(i)] = _shared(self.attn[i])
        for index, (request, compiled) in enumerate(zip(self.requests, self.compiled, strict=True)):
            for port in compiled.outputs:
                name = _name(port)
                if name not in tensors:
                    tensors[name] = ov.Tensor(port.get_element_type(), port.get_shape())
                request.set_tensor(name, tensors[name])
            for port in compiled.inputs:
                name = _name(port)
                if name not in tensors:
                    raise CompileAheadError(
                        f"{self.source.name}: split weight part {index} reads {name}, which no "
                        "earlier part gives"
                    )
                request.set_tensor(name, tensors[name])

    def feed(self, ids: np.ndarray, past_length: int | np.ndarray) -> None:
        self.ids[:, 0] = np.asarray(ids, np.int64).reshape(self.batch)
        self.past_length[...] = past_length
        self.positions[:, 0] = self.past_length  # a new token's position: its past length

    def compile_core(self, spec: GraphSpec, options: CompileOptions) -> CompileResult:
        """The rung's attention core; a rung must fit the IR's attention window, as whole."""
        self.source.check_capacity(spec.capacity, spec.chunk)
        return super().compile_core(spec, options)
