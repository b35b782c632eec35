"""What every weight store is: a name -> WeightTensor map for one model (WeightStore), the
tensors the graphs read with their shapes, and the check a store passes when a model opens.
The stores: memory-mapped safetensors (safetensors_store.py), seeded synthetic draws
(synthetic_store.py), an IR's own constants (sources/ir_source.py).

A store hands out each tensor as its raw storage array plus the OpenVINO element type, and a
graph's weight constants (``graph_constants``) that keep weights compressed (f16/bf16) and
alias the mapped file instead of copying it, owning what they alias (weight_constants.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision import bf16_bits_to_f32
from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.weight_constants import GraphConstants, array_constant


@dataclass(frozen=True)
class WeightTensor:
    array: np.ndarray  # storage, C-contiguous; for bf16 the raw uint16 bits
    element_type: ov.Type
    owner: ov.Tensor | None = None  # OpenVINO memory ``array`` views, when it does

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def to_float32(self) -> np.ndarray:
        if self.element_type == ov.Type.bf16:
            return bf16_bits_to_f32(self.array)
        return self.array.astype(np.float32)

    def to_float32_rows(self, rows: np.ndarray) -> np.ndarray:
        picked = self.array[rows]
        if self.element_type == ov.Type.bf16:
            return bf16_bits_to_f32(picked)
        return picked.astype(np.float32)


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the graphs read, with its Hugging Face name and shape."""
    d, hd = cfg.hidden_size, cfg.head_dim
    q_out, kv_out = cfg.num_heads * hd, cfg.num_kv_heads * hd
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (cfg.vocab_size, d),
        "model.norm.weight": (d,),
    }
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, d)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q_out, d),
            p + "self_attn.k_proj.weight": (kv_out, d),
            p + "self_attn.v_proj.weight": (kv_out, d),
            p + "self_attn.o_proj.weight": (d, q_out),
            p + "mlp.gate_proj.weight": (cfg.intermediate_size, d),
            p + "mlp.up_proj.weight": (cfg.intermediate_size, d),
            p + "mlp.down_proj.weight": (d, cfg.intermediate_size),
        }
        if cfg.attention_bias:
            shapes |= {
                p + "self_attn.q_proj.bias": (q_out,),
                p + "self_attn.k_proj.bias": (kv_out,),
                p + "self_attn.v_proj.bias": (kv_out,),
            }
    return shapes


class WeightStore:
    """Name -> WeightTensor for one model; subclasses say where the bytes come from."""

    def get(self, name: str) -> WeightTensor:
        raise NotImplementedError

    def names(self) -> Iterator[str]:
        raise NotImplementedError

    def graph_constants(self) -> GraphConstants:
        """One graph's weight constants by name: new nodes that own (a share of) the bytes
        they alias, so the graph, and anything compiled from it, keeps them alive whatever
        becomes of this store."""
        return lambda name: weight_constant(self.get(name))

    def load(self, name: str) -> None:
        """Have the tensor ready for graphs (mapped, or made into what its constants hold)."""
        self.get(name)

    def embedding_rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Rows of the table ``name`` in f32, as the graph's lookup decompresses them (an
        embedding lookup done on the host)."""
        return self.get(name).to_float32_rows(rows)

    def identity(self) -> dict[str, Any] | None:
        """What identifies these weight values (the compile cache's key); None: nothing does."""
        return None

    def unsettled(self) -> str | None:
        """Why the values may no longer be the ones ``identity`` names (the files changed since
        they were opened, or were written too shortly before to be told apart from a later
        write); None when they are. In-memory weights never change."""
        return None


def weight_constant(tensor: WeightTensor) -> ov.Node:
    """A new constant node of the tensor, owning (a share of) the bytes it aliases."""
    return array_constant(tensor.array, tensor.element_type, tensor.owner)


def check_weights(store: WeightStore, cfg: ModelConfig, source: str) -> None:
    """Every tensor the graphs need is present with the right shape, or a clear error."""
    present = set(store.names())
    for name, shape in expected_shapes(cfg).items():
        if name not in present:
            raise CompileAheadError(f"{source}: weight {name!r} is missing")
        tensor = store.get(name)  # an unsupported dtype says so, naming file and tensor
        if tensor.shape != shape:
            raise CompileAheadError(
                f"{source}: weight {name!r} has shape {list(tensor.shape)}, expected {list(shape)}"
            )
