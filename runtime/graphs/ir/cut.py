"""A static rung graph cut out of a stateful decoder IR.

After OpenVINO's ``stateful_to_stateless_transformation`` each layer reads past K/V inputs and
returns ``present`` = Concat(past, new) along the sequence axis. For the ladder:

- the past inputs take our stores' element type and a static [B, kv_heads, S, head_dim] shape
  (B = the sequences of a batch, S = the bound buffer's slots; a rung of capacity C < S reads
  the first C, the Slice copying only that prefix), so the host binds its buffers once and
  passes nothing per step;
- each present output is cut to the Concat's new-token input: only the L new rows come out,
  never the whole cache;
- a prefill chunk (L > 1) gathers the hidden row of ``last_index`` before the LM head, so one
  row of logits is computed instead of L;
- input_ids, attention_mask and position_ids get static shapes [B, L], [B, C + L], [B, L]; the
  mask and positions (fed per step, per sequence) hide each sequence's unwritten past slots;
- a decode graph attends without the KV concat (attention.py).

The weights are the IR's constants as read (memory-mapped): compressed stays compressed.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from numpy.typing import ArrayLike, DTypeLike
from openvino import opset13 as ops

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision import OV_TYPES
from compile_ahead.runtime.graphs.fold_guard import keep_lookups_unfolded
from compile_ahead.runtime.graphs.ir.attention import replace_attention
from compile_ahead.runtime.graphs.spec import (
    LAST_INDEX,
    PAST_LENGTH,
    GraphSpec,
    new_key_name,
    new_value_name,
    past_key_name,
    past_value_name,
)
from compile_ahead.runtime.model.ir_reader import (
    ATTENTION_MASK,
    INPUT_IDS,
    LOGITS,
    POSITION_IDS,
    KVInputs,
)


def _const(value: ArrayLike, dtype: DTypeLike = np.int64) -> ov.Output:
    return ops.constant(np.asarray(value, dtype=dtype)).output(0)


def _place_past(
    param: ov.Node, spec: GraphSpec, kv_type: ov.Type, name: str, filled: ov.Output | None
) -> None:
    """Make a past input our buffer's type and shape; the graph sees its first C slots (a
    dynamic graph: its ``filled`` first slots) in the IR's own element type."""
    own_type = param.get_element_type()
    kv_heads = param.get_output_partial_shape(0)[1].get_length()
    head_dim = param.get_output_partial_shape(0)[3].get_length()
    old_targets = list(param.output(0).get_target_inputs())
    param.set_element_type(kv_type)
    param.set_partial_shape(ov.PartialShape([spec.batch, kv_heads, spec.input_capacity, head_dim]))
    param.set_friendly_name(name)
    param.output(0).get_tensor().set_names({name})
    view = param.output(0)
    if filled is not None:
        view = ops.slice(view, _const([0]), filled, _const([1]), _const([2])).output(0)
    elif spec.input_capacity > spec.capacity:
        view = ops.slice(
            view, _const([0]), _const([spec.capacity]), _const([1]), _const([2])
        ).output(0)
    if kv_type != own_type:
        view = ops.convert(view, own_type).output(0)
    if view is not param.output(0):
        for target in old_targets:
            target.replace_source_output(view)


def _cut_present(model: ov.Model, concat: ov.Node, kv_type: ov.Type, name: str) -> None:
    """Replace the layer's present output (the whole cache) with the new rows only."""
    for target in list(concat.output(0).get_target_inputs()):
        node = target.get_node()
        if node.get_type_name() == "Result":
            model.remove_result(node)
    new_rows = concat.input_value(1)
    if new_rows.get_element_type() != kv_type:
        new_rows = ops.convert(new_rows, kv_type).output(0)
    result = ops.result(new_rows)
    result.set_friendly_name(name)
    result.output(0).get_tensor().set_names({name})
    model.add_results([result])


def _lm_head_input(logits: ov.Output) -> ov.Input:
    """The hidden-state input of the MatMul that produces the logits (through element-wise
    ops such as a Convert or logit scaling)."""
    node = logits.get_node()
    for _ in range(8):
        if node.get_type_name() == "MatMul":
            return node.input(0)
        node = node.input_value(0).get_node()
    raise CompileAheadError("the model's logits do not come from a MatMul (LM head not found)")


def gather_last(model: ov.Model, logits: ov.Output, token_axis: int = 1) -> ov.Node:
    """Compute the logits of one chunk row: gather the hidden state's ``last_index`` row on
    the token axis (1 in [batch, tokens, hidden]) before the LM head."""
    last = ops.parameter([1], ov.Type.i64, name=LAST_INDEX)
    last.output(0).get_tensor().set_names({LAST_INDEX})
    head_in = _lm_head_input(logits)
    row = ops.gather(head_in.get_source_output(), last.output(0), _const(token_axis))
    head_in.replace_source_output(row.output(0))
    model.add_parameters([last])
    return last


def build_ir_step_model(
    model: ov.Model, kv: KVInputs, spec: GraphSpec, fast_attention: bool | None = None
) -> ov.Model:
    """Turn a stateless decoder (ir_model.stateless) into the rung graph for ``spec``.

    ``fast_attention`` (default: decode graphs only) replaces the IR's SDPA over the KV concat
    (attention.py). Measured on the CPU plugin: for one token the concat, repeated per query
    group, costs several times the step; for a prefill chunk the plugin's fused SDPA kernel
    beats the decomposed form, whose score matrices grow with chunk x capacity.

    A dynamic spec keeps the IR's dynamic token axis (input_ids, position_ids and
    attention_mask [1, ?]) and adds past_length [1] i64: the past inputs are sliced to their
    filled slots, so the fused SDPA attends over those and the chunk only.
    """
    if fast_attention is None:
        fast_attention = spec.chunk == 1 and not spec.dynamic
    kv_type = OV_TYPES[spec.kv_precision]
    L, C = spec.chunk, spec.capacity
    filled = None
    if spec.dynamic:
        past_length = ops.parameter([1], ov.Type.i64, name=PAST_LENGTH)
        past_length.output(0).get_tensor().set_names({PAST_LENGTH})
        model.add_parameters([past_length])
        filled = past_length.output(0)
    for i, (key, value) in enumerate(zip(kv.keys, kv.values, strict=True)):
        for param, past_name, new_name in (
            (key, past_key_name(i), new_key_name(i)),
            (value, past_value_name(i), new_value_name(i)),
        ):
            concat = kv.concats[param.get_friendly_name()]
            _cut_present(model, concat, kv_type, new_name)
            _place_past(param, spec, kv_type, past_name, filled)
    logits = next(p for p in model.outputs if LOGITS in p.get_names())
    if L > 1 or spec.dynamic:
        gather_last(model, logits)
    b = spec.batch
    shapes = {INPUT_IDS: [b, L], ATTENTION_MASK: [b, C + L], POSITION_IDS: [b, L]}
    if spec.dynamic:
        shapes = {INPUT_IDS: [1, -1], ATTENTION_MASK: [1, -1], POSITION_IDS: [1, -1]}
    for param in model.get_parameters():
        names = param.output(0).get_names()
        for name, shape in shapes.items():
            if name in names:
                param.set_partial_shape(ov.PartialShape(shape))
    model.validate_nodes_and_infer_types()
    if fast_attention:
        replace_attention(model, kv, C)
    model.validate_nodes_and_infer_types()
    keep_lookups_unfolded(model)  # static input_ids: see graphs/fold_guard.py
    return model
