"""Split graphs: what holds weights is compiled once, only attention depends on capacity.

The decoder is cut at every attention:
- part 0: layer 0's input norm, q/k/v projections and RoPE;
- part i (1..N-1): layer i-1's o_proj and MLP, then layer i's norm, q/k/v and RoPE;
- the head: the last layer's o_proj and MLP, the final norm and lm_head;
- the attention core, weightless, one per capacity C: q, the new k/v and the past K/V of one
  layer -> that layer's attention output. One compiled core serves every layer.
The embedding row is gathered on the host. Every piece is the same function the whole step
graph uses (graphs/decoder.py), so the math is identical.

A batched piece (B > 1) leads every tensor with B and takes past_length [B]: each sequence has
its own positions (RoPE) and its own mask over the past slots, as the whole batched graph.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from compile_ahead.runtime.base.precision import OV_TYPES
from compile_ahead.runtime.graphs import decoder
from compile_ahead.runtime.graphs.spec import LOGITS, PAST_LENGTH, GraphSpec
from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.weights import WeightStore

HIDDEN_IN = "hidden_in"
HIDDEN_OUT = "hidden_out"
ATTN_IN = "attn_in"
ATTN_OUT = "attn_out"
QUERY = "query"
NEW_KEY = "new_key"
NEW_VALUE = "new_value"


def _qkv_results(
    cfg: ModelConfig,
    w: decoder.WeightConstants,
    x: ov.Output,
    layer: int,
    past_len: ov.Output,
    kv_precision: str,
    batch: int,
) -> list[ov.Node]:
    rope = decoder.rope_tables(cfg, past_len, 1, batch, decoder.exact_angles(kv_precision))
    q, k, v = decoder.layer_qkv(cfg, w, x, layer, rope, 1, batch)
    kv_type = OV_TYPES[kv_precision]
    new_k, _ = decoder.as_stored(k, kv_type)
    new_v, _ = decoder.as_stored(v, kv_type)
    return [
        ops.result(q, name=QUERY),
        ops.result(new_k, name=NEW_KEY),
        ops.result(new_v, name=NEW_VALUE),
    ]


def past_length_shape(batch: int) -> list[int]:
    """One past length for one sequence, one per sequence for a batch."""
    return [] if batch == 1 else [batch]


def build_weight_part(
    cfg: ModelConfig, store: WeightStore, index: int, kv_precision: str, batch: int = 1
) -> ov.Model:
    """Part ``index`` in 0..num_layers (num_layers is the head) for ``batch`` sequences, see
    the module docstring."""
    w = decoder.WeightConstants(store)
    d, qd = cfg.hidden_size, cfg.num_heads * cfg.head_dim
    x = ops.parameter([batch, 1, d], ov.Type.f32, name=HIDDEN_IN)
    params = [x]
    results = []
    hidden = x.output(0)
    if index > 0:
        attn = ops.parameter([batch, 1, qd], ov.Type.f32, name=ATTN_IN)
        params.append(attn)
        hidden = decoder.layer_out(cfg, w, hidden, attn.output(0), index - 1)
    if index < cfg.num_layers:
        past_len = ops.parameter(past_length_shape(batch), ov.Type.i64, name=PAST_LENGTH)
        params.append(past_len)
        if index > 0:
            results.append(ops.result(hidden, name=HIDDEN_OUT))
        results += _qkv_results(cfg, w, hidden, index, past_len, kv_precision, batch)
        name = f"weights_part{index}"
    else:
        row = ops.reshape(hidden, decoder.const([batch, d], np.int64), False).output(0)
        results.append(ops.result(decoder.lm_head(cfg, w, row), name=LOGITS))
        name = "weights_head"
    decoder.name_io(params, results)
    return ov.Model(results, params, name + (f"_N{batch}" if batch > 1 else ""))


def build_attention_core(cfg: ModelConfig, spec: GraphSpec) -> ov.Model:
    """Weightless attention of one layer at capacity C (decode, one token per sequence)."""
    kv_type = OV_TYPES[spec.kv_precision]
    hd, B = cfg.head_dim, spec.batch
    q = ops.parameter([B, cfg.num_heads, 1, hd], ov.Type.f32, name=QUERY)
    new_k = ops.parameter([B, cfg.num_kv_heads, 1, hd], kv_type, name=NEW_KEY)
    new_v = ops.parameter([B, cfg.num_kv_heads, 1, hd], kv_type, name=NEW_VALUE)
    past_len = ops.parameter(past_length_shape(B), ov.Type.i64, name=PAST_LENGTH)
    past_params, past_k, past_v = decoder.past_kv_inputs(cfg, spec, 0)
    k = ops.convert(new_k, ov.Type.f32).output(0) if kv_type != ov.Type.f32 else new_k.output(0)
    v = ops.convert(new_v, ov.Type.f32).output(0) if kv_type != ov.Type.f32 else new_v.output(0)
    masks = decoder.AttentionMasks(cfg, past_len, spec.capacity, 1, B)
    out = decoder.attention(cfg, q.output(0), k, v, past_k, past_v, masks)
    params = [q, new_k, new_v, past_len, *past_params]
    results = [ops.result(out, name=ATTN_OUT)]
    decoder.name_io(params, results)
    batch = f"_N{B}" if B > 1 else ""
    return ov.Model(results, params, f"attention_C{spec.capacity}{batch}_B{spec.input_capacity}")
