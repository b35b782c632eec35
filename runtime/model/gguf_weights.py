"""A GGUF file's tensors as a weight store, under the Hugging Face names the graphs ask for.

F32, F16 and BF16 tensors are handed out as they are stored (F16 and BF16 then decompressed
in the graph like a checkpoint's). A quantized tensor (Q8_0, Q4_0, Q4_1) is never dequantized
on the host: its graph constant is the compressed weight and its decompression
(model/gguf_blocks.py), which the CPU plugin fuses into its compressed-weight kernels. The
tied token embedding serves both the embedding lookup and the output projection.

The store is identified by the file as it was opened (path, size, times, inode), as a
checkpoint's safetensors files are, so the compile cache keys a GGUF by its content.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.file_identity import file_identity, racy_change
from compile_ahead.runtime.model.gguf_blocks import QUANTIZED, compress
from compile_ahead.runtime.model.gguf_file import GGUFModel, GGUFTensor
from compile_ahead.runtime.model.weight_constants import (
    CompressedWeight,
    GraphConstants,
    array_constant,
)
from compile_ahead.runtime.model.weights import WeightStore, WeightTensor

# llama.cpp's tensor names -> the Hugging Face names of the graphs (a layer's part after
# ``blk.N.`` -> after ``model.layers.N.``).
_TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor the graphs read; None for any other."""
    if gguf_name in _TOP:
        return _TOP[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER:
        return f"model.layers.{parts[1]}.{_LAYER[parts[2]]}"
    return None


class GGUFStore(WeightStore):
    def __init__(self, model: GGUFModel):
        self.path = model.path
        self._tensors: dict[str, GGUFTensor] = {}
        for name, tensor in model.tensors.items():
            mapped = hf_name(name)
            if mapped is not None:
                self._tensors[mapped] = tensor
        self._compressed: dict[str, CompressedWeight] = {}
        self._lock = threading.Lock()
        # The file kept open, to see it rewritten in place or replaced (as SafetensorsStore).
        self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self._fd)
        self._opened_ns = time.time_ns()
        self._opened = os.fstat(self._fd)
        self._identity = file_identity(self.path, self._opened)

    def names(self) -> Iterator[str]:
        return iter(self._tensors)

    def kind(self, name: str) -> str:
        """The tensor's GGUF type (F32, Q4_1, ...)."""
        return self._tensor(name).kind

    def shape(self, name: str) -> tuple[int, ...]:
        return self._tensor(name).shape

    def _tensor(self, name: str) -> GGUFTensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise CompileAheadError(f"{self.path}: no tensor for {name!r}") from None

    def get(self, name: str) -> WeightTensor:
        t = self._tensor(name)
        if t.kind in QUANTIZED:
            raise CompileAheadError(
                f"{self.path}: tensor {name!r} is {t.kind}, kept compressed (it has no "
                "float array on the host)"
            )
        if t.kind == "BF16":
            return WeightTensor(t.data.view(np.uint16).reshape(t.shape), ov.Type.bf16)
        return WeightTensor(t.data.reshape(t.shape), ov.Type(t.data.dtype))

    def load(self, name: str) -> None:
        if self._tensor(name).kind in QUANTIZED:
            self.compressed(name)
        else:
            self.get(name)

    def compressed(self, name: str) -> CompressedWeight:
        """The quantized tensor as OpenVINO memory, made once (graphs share it)."""
        with self._lock:  # graphs may be built on several threads
            if name not in self._compressed:
                t = self._tensor(name)
                self._compressed[name] = compress(t.kind, t.data, t.shape)
            return self._compressed[name]

    def graph_constants(self) -> GraphConstants:
        def constant(name: str) -> ov.Node | CompressedWeight:
            t = self._tensor(name)
            if t.kind in QUANTIZED:
                return self.compressed(name)
            w = self.get(name)
            return array_constant(w.array, w.element_type)

        return constant

    def embedding_rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        if self._tensor(name).kind in QUANTIZED:
            return self.compressed(name).rows_f32(rows)
        return super().embedding_rows(name, rows)

    def identity(self) -> dict[str, Any] | None:
        return {"gguf": self._identity}

    def unsettled(self) -> str | None:
        now = os.fstat(self._fd)
        if now.st_nlink == 0:
            return f"{self.path} was replaced or removed on disk since this run opened it"
        fields = ("st_ino", "st_dev", "st_size", "st_mtime_ns", "st_ctime_ns")
        if any(getattr(now, f) != getattr(self._opened, f) for f in fields):
            return f"{self.path} changed on disk since this run opened it"
        return racy_change(Path(self.path), self._identity, self._opened_ns)
