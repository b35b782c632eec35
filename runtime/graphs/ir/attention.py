"""Attention without the KV concat, for rung graphs cut from an IR.

An optimum-intel decoder attends with ScaledDotProductAttention over Concat(past, new), with
GQA done by Unsqueeze/Broadcast/Reshape of the concatenated K/V to every query head. In a
static rung graph that copies the whole cache (times the query group) every step. Where that
exact pattern is found, the SDPA is replaced by the form our own graphs use: the G query heads
of each KV head become rows, the C past slots and the L new rows are scored separately
against the same (sliced) cache input, one softmax spans both, and nothing is concatenated
but the scores. The IR's own mask (fed attention_mask, causal part) is split the same way.
A pattern that does not match keeps its SDPA: slower, never wrong.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from numpy.typing import ArrayLike, DTypeLike
from openvino import opset13 as ops

from compile_ahead.runtime.model.ir_reader import KVInputs

# Ops between a Concat(past, new) and the SDPA input that only repeat KV heads for GQA.
_GQA_REPEAT = {"Unsqueeze", "Broadcast", "Reshape"}


def _const(value: ArrayLike, dtype: DTypeLike = np.int64) -> ov.Output:
    return ops.constant(np.asarray(value, dtype=dtype)).output(0)


def concat_behind(value: ov.Output, concats: set[str]) -> ov.Node | None:
    """The KV Concat a SDPA key/value input repeats, if only GQA ops lie in between."""
    node = value.get_node()
    for _ in range(4):
        if node.get_type_name() == "Concat":
            return node if node.get_friendly_name() in concats else None
        if node.get_type_name() not in _GQA_REPEAT:
            return None
        node = node.input_value(0).get_node()
    return None


def _additive(mask: ov.Output) -> ov.Output:
    if mask.get_element_type() == ov.Type.boolean:
        zero, minus_inf = _const(0.0, np.float32), _const(-np.inf, np.float32)
        return ops.select(mask, zero, minus_inf).output(0)
    if mask.get_element_type() != ov.Type.f32:
        return ops.convert(mask, ov.Type.f32).output(0)
    return mask


def _replace(sdpa: ov.Node, k_cat: ov.Node, v_cat: ov.Node, capacity: int) -> bool:
    q = sdpa.input_value(0)
    qs, ks = q.get_partial_shape(), k_cat.input_value(0).get_partial_shape()
    mask = sdpa.input_value(3)
    ms = mask.get_partial_shape()
    if qs.is_dynamic or ks.is_dynamic or ms.is_dynamic or q.get_element_type() != ov.Type.f32:
        return False
    batch, heads, L, hd = (d.get_length() for d in qs)
    kv = ks[1].get_length()
    if heads % kv or len(ms) != 4 or ms[1].get_length() != 1 or ms[2].get_length() != L:
        return False
    if ms[0].get_length() not in (1, batch):  # one mask per sequence, or one for all
        return False
    group = heads // kv
    past_k, new_k = k_cat.input_value(0), k_cat.input_value(1)
    past_v, new_v = v_cat.input_value(0), v_cat.input_value(1)
    if sdpa.get_input_size() > 4:
        scale = sdpa.input_value(4)
    else:
        scale = _const(1.0 / np.sqrt(hd), np.float32)
    # Rows (g, i) g-major: query head kv_i * G + g of token i, as the GQA repeat orders heads.
    qg = ops.reshape(q, _const([batch, kv, group * L, hd]), False)
    qg = ops.multiply(qg, scale)
    mask = _additive(mask)
    m_past, m_new = ops.variadic_split(mask, _const(-1), _const([capacity, L])).outputs()
    m_past = ops.tile(m_past, _const([1, 1, group, 1]))
    m_new = ops.tile(m_new, _const([1, 1, group, 1]))
    s_past = ops.add(ops.matmul(qg, past_k, False, True), m_past)
    s_new = ops.add(ops.matmul(qg, new_k, False, True), m_new)
    probs = ops.softmax(ops.concat([s_past, s_new], -1), -1)
    p_past, p_new = ops.variadic_split(probs, _const(-1), _const([capacity, L])).outputs()
    out = ops.add(ops.matmul(p_past, past_v, False, False), ops.matmul(p_new, new_v, False, False))
    out = ops.reshape(out, _const([batch, heads, L, hd]), False)
    for target in list(sdpa.output(0).get_target_inputs()):
        target.replace_source_output(out.output(0))
    return True


def replace_attention(model: ov.Model, kv: KVInputs, capacity: int) -> int:
    """Replace every matching SDPA; returns how many were replaced."""
    concats = {c.get_friendly_name() for c in kv.concats.values()}
    replaced = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() != "ScaledDotProductAttention" or node.get_input_size() < 4:
            continue
        if node.get_attributes().get("causal", False):
            continue  # the mask input is not the whole mask
        k_cat = concat_behind(node.input_value(1), concats)
        v_cat = concat_behind(node.input_value(2), concats)
        if k_cat is not None and v_cat is not None and _replace(node, k_cat, v_cat, capacity):
            replaced += 1
    return replaced
