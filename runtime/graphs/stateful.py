"""The optimum-style stateful decoder: one dynamic-shape model whose KV cache lives in state.

This is the layout OpenVINO's own LLM pipelines take (optimum-intel exports it, the CPU plugin
fuses its attention, NPUW's LLM path converts it to static prefill/generate graphs), so the
upstream baselines run the very same weights as our static step graphs.

Inputs: input_ids [B, S] i64, attention_mask [B, T] i64 (1 = attend; T = past + S),
position_ids [B, S] i64, beam_idx [B] i32. Output: logits [B, S, vocab] f32.
Per layer and for K and V one state variable, head-major [B, kv_heads, T, head_dim], updated as
ReadValue -> Gather(beam_idx) -> Concat(new) -> Assign. The variable ids follow optimum's
"past_key_values.{i}.key" + "present.{i}.key" convention, which NPUW's StatefulToStateless pass
parses to name and order the stateless KV inputs and outputs.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from numpy.typing import ArrayLike
from openvino import opset13 as ops

from compile_ahead.runtime.base.precision import OV_TYPES
from compile_ahead.runtime.graphs.decoder import (
    WeightConstants,
    linear,
    rms_norm,
    rope_cos_sin,
    rotate,
)
from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.weights import WeightStore

INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
POSITION_IDS = "position_ids"
BEAM_IDX = "beam_idx"
LOGITS = "logits"

# Additive mask value for excluded slots: finite, as in transformers. A fully masked row (a left
# pad row in NPUW's static prefill) then averages instead of producing NaN, which would leak into
# that row's K/V in later layers and from there, through 0 * NaN, into every valid row.
MASKED = -1.0e4


def past_name(layer: int, kind: str) -> str:
    """Stateless input name of a layer's past K or V (kind: "key" | "value")."""
    return f"past_key_values.{layer}.{kind}"


def present_name(layer: int, kind: str) -> str:
    return f"present.{layer}.{kind}"


def variable_id(layer: int, kind: str) -> str:
    return past_name(layer, kind) + present_name(layer, kind)


def _i64(values: ArrayLike) -> ov.Node:
    return ops.constant(np.asarray(values, dtype=np.int64))


def _f32(value: ArrayLike) -> ov.Node:
    return ops.constant(np.asarray(value, dtype=np.float32))


def _dim(shape: ov.Output, axis: int) -> ov.Output:
    """One dimension of a ShapeOf output, as a [1] i64 tensor (for Concat-built shapes)."""
    return ops.gather(shape, _i64([axis]), _i64(0)).output(0)


def _attention_bias(attention_mask: ov.Output, query_len: ov.Output) -> ov.Output:
    """Additive mask [B, 1, S, T]: causal over the last S of T slots, and the padding mask.

    The S queries are the last S of the T positions (the past precedes them), so query s may
    see slots j <= T - S + s, and only those whose attention_mask entry is nonzero.
    """
    total = _dim(ops.shape_of(attention_mask), 1)
    slots = ops.range(_i64(0), ops.squeeze(total, _i64(0)), _i64(1), ov.Type.i64)  # [T]
    queries = ops.range(_i64(0), ops.squeeze(query_len, _i64(0)), _i64(1), ov.Type.i64)
    query_pos = ops.add(queries, ops.subtract(total, query_len))  # [S]
    causal = ops.less_equal(slots, ops.unsqueeze(query_pos, _i64(1)))  # [S, T]
    keep = ops.not_equal(attention_mask, _i64(0))  # [B, T]
    keep = ops.logical_and(causal, ops.unsqueeze(keep, _i64([1, 2])))  # [B, 1, S, T]
    return ops.select(keep, _f32(0.0), _f32(MASKED)).output(0)


def _rope_tables(
    cfg: ModelConfig, position_ids: ov.Output, exact: bool
) -> tuple[ov.Output, ov.Output]:
    """cos and sin [B, 1, S, head_dim] for the given positions."""
    cos, sin = rope_cos_sin(cfg, position_ids, exact)  # [B, S, hd]
    return ops.unsqueeze(cos, _i64(1)).output(0), ops.unsqueeze(sin, _i64(1)).output(0)


def _kv_state(
    layer: int, kind: str, new: ov.Output, beam_idx: ov.Output, cfg: ModelConfig, kv_type: ov.Type
) -> tuple[ov.Output, ov.Node]:
    """Past ++ new for one layer's K or V (f32), and the Assign that stores it.

    The state starts empty: [B, kv_heads, 0, head_dim], B taken from the new K/V. A narrower
    state type converts right after ReadValue and right before Assign, the two places where the
    CPU plugin's stateful-SDPA fusion accepts a Convert.
    """
    info = ov.op.util.VariableInfo()
    info.data_shape = ov.PartialShape([-1, cfg.num_kv_heads, -1, cfg.head_dim])
    info.data_type = kv_type
    info.variable_id = variable_id(layer, kind)
    variable = ov.op.util.Variable(info)

    batch = _dim(ops.shape_of(new), 0)
    empty_shape = ops.concat([batch, _i64([cfg.num_kv_heads, 0, cfg.head_dim])], 0)
    init = ops.broadcast(ov.op.Constant(kv_type, ov.Shape([]), [0.0]), empty_shape)
    stored = ops.read_value(init, variable)
    if kv_type != ov.Type.f32:
        stored = ops.convert(stored, ov.Type.f32)
    present = ops.concat([ops.gather(stored, beam_idx, _i64(0)), new], 2)
    to_store = ops.convert(present, kv_type) if kv_type != ov.Type.f32 else present
    return present.output(0), ops.assign(to_store, variable)


def _repeat_kv(kv: ov.Output, group: int, heads: int, head_dim: int) -> ov.Output:
    """[B, kv, T, hd] -> [B, kv*group, T, hd]: Unsqueeze, bidirectional Broadcast, Reshape,
    the GQA form the CPU plugin folds into its fused stateful attention."""
    if group == 1:
        return kv
    wide = ops.broadcast(
        ops.unsqueeze(kv, _i64(2)), _i64([1, 1, group, 1, 1]), broadcast_spec="BIDIRECTIONAL"
    )
    return ops.reshape(wide, _i64([0, heads, -1, head_dim]), True).output(0)


def _layer(
    cfg: ModelConfig,
    w: WeightConstants,
    i: int,
    x: ov.Output,
    rope: tuple[ov.Output, ov.Output],
    bias: ov.Output,
    beam_idx: ov.Output,
    kv_type: ov.Type,
) -> tuple[ov.Output, list]:
    """Decoder layer ``i`` on the residual ``x``: the new residual, and its K/V states'
    assigns (the model's sinks)."""
    heads, kv_heads, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    cos, sin = rope
    scale = _f32(1.0 / np.sqrt(hd))
    p = f"model.layers.{i}."
    h = rms_norm(x, w(p + "input_layernorm.weight"), cfg.rms_norm_eps)

    def heads_first(t: ov.Output, n: int) -> ov.Output:
        t = ops.reshape(t, _i64([0, 0, n, hd]), True)
        return ops.transpose(t, _i64([0, 2, 1, 3])).output(0)  # [B, n, S, hd]

    q = heads_first(linear(h, w, p + "self_attn.q_proj", cfg.attention_bias), heads)
    k = heads_first(linear(h, w, p + "self_attn.k_proj", cfg.attention_bias), kv_heads)
    v = heads_first(linear(h, w, p + "self_attn.v_proj", cfg.attention_bias), kv_heads)
    q = rotate(q, cos, sin)
    k = rotate(k, cos, sin)
    k_all, k_assign = _kv_state(i, "key", k, beam_idx, cfg, kv_type)
    v_all, v_assign = _kv_state(i, "value", v, beam_idx, cfg, kv_type)
    group = cfg.group_size
    attn = ops.scaled_dot_product_attention(
        q,
        _repeat_kv(k_all, group, heads, hd),
        _repeat_kv(v_all, group, heads, hd),
        bias,
        scale,
    )  # [B, H, S, hd]
    attn = ops.reshape(ops.transpose(attn, _i64([0, 2, 1, 3])), _i64([0, 0, heads * hd]), True)
    x = ops.add(x, linear(attn.output(0), w, p + "self_attn.o_proj")).output(0)

    h = rms_norm(x, w(p + "post_attention_layernorm.weight"), cfg.rms_norm_eps)
    gate = linear(h, w, p + "mlp.gate_proj")
    up = linear(h, w, p + "mlp.up_proj")
    mlp = linear(ops.multiply(ops.swish(gate), up).output(0), w, p + "mlp.down_proj")
    return ops.add(x, mlp).output(0), [k_assign, v_assign]


def build_stateful_model(
    cfg: ModelConfig, store: WeightStore, kv_precision: str = "f32", exact_angles: bool = True
) -> ov.Model:
    """The whole decoder as one stateful dynamic-shape model (see the module docstring).

    kv_precision is the element type of the state variables; "f32" is optimum's layout (the
    device then picks its own cache precision, e.g. the CPU plugin's KV_CACHE_PRECISION or
    NPUW's f16 KV). The model's weights alias the store's storage and hold it (decoder.py,
    WeightConstants). exact_angles: rotary cos/sin from angle tables (decoder.exact_angles);
    on by default, since the device picks the precision this model computes at, and a caller
    that knows it computes at f32 may turn it off to compute what transformers does.
    """
    kv_type = OV_TYPES[kv_precision]
    w = WeightConstants(store)

    ids = ops.parameter([-1, -1], ov.Type.i64, name=INPUT_IDS)
    mask = ops.parameter([-1, -1], ov.Type.i64, name=ATTENTION_MASK)
    positions = ops.parameter([-1, -1], ov.Type.i64, name=POSITION_IDS)
    beam_idx = ops.parameter([-1], ov.Type.i32, name=BEAM_IDX)
    params = [ids, mask, positions, beam_idx]

    query_len = _dim(ops.shape_of(ids), 1)
    bias = _attention_bias(mask.output(0), query_len)
    cos, sin = _rope_tables(cfg, positions.output(0), exact_angles)

    x = ops.gather(w("model.embed_tokens.weight"), ids, _i64(0)).output(0)  # [B, S, D]
    sinks = []
    for i in range(cfg.num_layers):
        x, assigns = _layer(cfg, w, i, x, (cos, sin), bias, beam_idx.output(0), kv_type)
        sinks += assigns

    x = rms_norm(x, w("model.norm.weight"), cfg.rms_norm_eps)
    head = "model.embed_tokens" if cfg.tie_word_embeddings else "lm_head"
    logits = ops.result(linear(x, w, head), name=LOGITS)

    for node in [*params, logits]:
        node.output(0).get_tensor().set_names({node.get_friendly_name()})
    return ov.Model([logits], sinks, params, "stateful_decoder")
