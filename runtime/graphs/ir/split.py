"""Split graphs cut from a stateful decoder IR: its weights in parts compiled once per batch
size, a rung only the weightless attention core (graphs/split.py's, shared with checkpoints).

The IR's rung graph for B sequences (cut.py, the IR's own attention kept) is cut at every
attention, one ScaledDotProductAttention per layer over Concat(past, new):

- each layer's query and new K/V rows become outputs (query.i, new_key.i, new_value.i), and
  its attention output an input attn_in.i [B, 1, heads*head_dim], the layout of the core's
  output. The core takes each sequence's past length and masks the unwritten past slots per
  sequence, as the whole graph's fed attention_mask does; the query is scaled so that the
  core's 1/sqrt(head_dim) gives the IR's own attention scale;
- what is left holds every weight and is cut in N+1 parts: a node belongs to the latest part
  among its inputs' (attn_in.i opens part i+1; input_ids and position_ids are fed to every
  part that reads them). Constants, with their decompression subgraphs, go with the part that
  reads them, so FP16, INT8 and INT4 weights stay as the IR stores them. A tensor a later part
  reads (the residual stream, RoPE cos/sin) is an output cut.<k> of its part and an input of
  that later part; the host passes it on (compile/graph/ir_split_parts.py).

The attention mask and the KV inputs stay behind with the IR's attention, so no weight part
depends on the capacity. An IR the cut cannot take is refused in one line (before anything is
compiled): a weight part that still reads the mask or the past (layers that use them outside
attention), or an attention the core cannot stand for (causal flag, no mask, extra inputs, K/V
not the layer's own cache, a scale computed in the graph; a constant behind Converts, as an
FP16 export keeps 1/8 in f16, is its value).
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from numpy.typing import ArrayLike, DTypeLike
from openvino import opset13 as ops

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.graphs.fold_guard import keep_lookups_unfolded
from compile_ahead.runtime.graphs.ir.attention import concat_behind
from compile_ahead.runtime.graphs.ir.cut import build_ir_step_model
from compile_ahead.runtime.graphs.spec import LOGITS, GraphSpec
from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.ir_reader import INPUT_IDS, POSITION_IDS, KVInputs

ATTN_IN = "attn_in."
HOST_INPUTS = (INPUT_IDS, POSITION_IDS)  # fed by the host to every part that reads them


def io_name(names: set[str]) -> str | None:
    """A part's own name of one of its ports, among the names OpenVINO gives it (the compiled
    part may add the IR's own names of that tensor)."""
    prefixes = ("cut.", "query.", ATTN_IN, "new_key.", "new_value.")
    ours = sorted(n for n in names if n in (*HOST_INPUTS, LOGITS) or n.startswith(prefixes))
    return ours[0] if ours else None


def query_name(layer: int) -> str:
    return f"query.{layer}"


def attn_in_name(layer: int) -> str:
    return f"{ATTN_IN}{layer}"


def _const(value: ArrayLike, dtype: DTypeLike = np.int64) -> ov.Output:
    return ops.constant(np.asarray(value, dtype=dtype)).output(0)


def _refuse(where: str, why: str) -> CompileAheadError:
    return CompileAheadError(f"{where}: --graph split cannot cut this IR: {why}; use --graph whole")


def _named_result(value: ov.Output, name: str) -> ov.Node:
    result = ops.result(value)
    result.set_friendly_name(name)
    result.output(0).get_tensor().set_names({name})
    return result


def _layer_attentions(model: ov.Model, kv: KVInputs, where: str) -> list[ov.Node]:
    """Each layer's SDPA, checked to be an attention the core stands for."""
    pairs = [
        (kv.concats[k.get_friendly_name()], kv.concats[v.get_friendly_name()])
        for k, v in zip(kv.keys, kv.values, strict=True)
    ]
    names = {concat.get_friendly_name() for pair in pairs for concat in pair}
    found: dict[int, ov.Node] = {}
    for node in model.get_ordered_ops():
        if node.get_type_name() != "ScaledDotProductAttention":
            continue
        k_cat = concat_behind(node.input_value(1), names)
        v_cat = concat_behind(node.input_value(2), names)
        layer = next((i for i, pair in enumerate(pairs) if pair == (k_cat, v_cat)), None)
        if layer is None or layer in found:
            raise _refuse(where, "an attention whose keys and values are not one layer's cache")
        if node.get_attributes().get("causal", False):
            raise _refuse(where, "a causal attention (its mask input is not the whole mask)")
        if not 4 <= node.get_input_size() <= 5:
            raise _refuse(where, "an attention without a mask, or with inputs beyond the scale")
        found[layer] = node
    if sorted(found) != list(range(len(pairs))):
        missing = sorted(set(range(len(pairs))) - set(found))
        raise _refuse(where, f"no attention over the cache of layers {missing}")
    return [found[i] for i in range(len(pairs))]


def _folded(value: ov.Output) -> ov.Tensor | None:
    """The tensor a Constant behind zero or more Converts holds, each Convert evaluated by
    OpenVINO (so rounded as the graph rounds it); None for anything computed otherwise."""
    node = value.get_node()
    if node.get_type_name() == "Constant":
        return node.get_tensor_view()
    if node.get_type_name() != "Convert":
        return None
    source = _folded(node.input_value(0))
    if source is None:
        return None
    tensor = ov.Tensor(node.get_output_element_type(0), source.get_shape())
    return tensor if node.evaluate([tensor], [source]) else None


def _scale(sdpa: ov.Node, head_dim: int, where: str) -> float:
    """The attention's scale: a scalar constant, possibly stored in another type behind
    Converts (an FP16 export keeps 1/8 in f16). SDPA's scale has its query's type, f32."""
    if sdpa.get_input_size() < 5:
        return 1.0 / float(np.sqrt(head_dim))
    tensor = _folded(sdpa.input_value(4))
    if tensor is None or tensor.get_size() != 1 or tensor.get_element_type() != ov.Type.f32:
        raise _refuse(where, "an attention scale computed in the graph")
    return float(tensor.data.reshape(-1)[0])


def _query(sdpa: ov.Node, cfg: ModelConfig, where: str) -> ov.Output:
    """The layer's query [B, heads, 1, head_dim], scaled for the core's 1/sqrt(head_dim)."""
    q = sdpa.input_value(0)
    shape = q.get_partial_shape()
    expected = [cfg.num_heads, 1, cfg.head_dim]
    if (
        shape.is_dynamic
        or list(shape.to_shape())[1:] != expected
        or (q.get_element_type() != ov.Type.f32)
    ):
        raise _refuse(
            where,
            f"an attention query {shape} {q.get_element_type().get_type_name()}, not f32 "
            f"[batch, {cfg.num_heads}, 1, {cfg.head_dim}] (config.json's num_attention_heads)",
        )
    factor = _scale(sdpa, cfg.head_dim, where) * float(np.sqrt(cfg.head_dim))
    if abs(factor - 1.0) > 1e-6:
        q = ops.multiply(q, _const(factor, np.float32)).output(0)
    return q


def _attention_input(sdpa: ov.Node, cfg: ModelConfig, batch: int, layer: int) -> ov.Node:
    """attn_in.i [B, 1, heads*head_dim] in place of the SDPA's output [B, heads, 1, head_dim]."""
    heads, head_dim = cfg.num_heads, cfg.head_dim
    param = ops.parameter([batch, 1, heads * head_dim], ov.Type.f32, name=attn_in_name(layer))
    param.output(0).get_tensor().set_names({attn_in_name(layer)})
    split_heads = ops.reshape(param, _const([batch, 1, heads, head_dim]), False)
    view = ops.transpose(split_heads, _const([0, 2, 1, 3])).output(0)
    for target in list(sdpa.output(0).get_target_inputs()):
        target.replace_source_output(view)
    return param


def _fold_static_shapes(model: ov.Model) -> None:
    """Shapes of static tensors as constants, so no part passes a shape on to another."""
    for node in model.get_ordered_ops():
        if node.get_type_name() != "ShapeOf" or node.get_input_partial_shape(0).is_dynamic:
            continue
        dtype = node.get_output_element_type(0).to_dtype()
        shape = _const(list(node.get_input_shape(0)), dtype)
        for target in list(node.output(0).get_target_inputs()):
            target.replace_source_output(shape)


def _reachable(results: list[ov.Node]) -> set[ov.Node]:
    seen: set[ov.Node] = set()
    stack = list(results)
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(value.get_node() for value in node.input_values())
    return seen


def _check_inputs(params: list[ov.Node], where: str) -> None:
    """The weight side reads only what the host feeds and the attention outputs."""
    for param in params:
        name = param.get_friendly_name()
        if name in HOST_INPUTS or name.startswith(ATTN_IN):
            continue
        if name.startswith(("past_", "attention_mask")):
            raise _refuse(
                where, "its layers read the attention mask or the KV cache outside attention"
            )
        raise _refuse(where, f"an input the split graphs do not feed: {name}")


def cut_weights(
    model: ov.Model, kv: KVInputs, cfg: ModelConfig, batch: int, kv_precision: str, where: str
) -> ov.Model:
    """The weight side of a stateless decoder (ir_reader.stateless) for ``batch`` sequences:
    every attention cut out, see the module docstring; weight_part takes its parts."""
    sdpas = _layer_attentions(model, kv, where)
    # The rung graph at a nominal capacity: the weight side never reads it (_check_inputs).
    model = build_ir_step_model(model, kv, GraphSpec(1, 1, kv_precision, batch=batch), False)
    outputs = {
        name: result.input_value(0)
        for result in model.get_results()
        for name in result.output(0).get_names()
        if name == LOGITS or name.startswith(("new_key.", "new_value."))
    }
    params = list(model.get_parameters())
    for i, sdpa in enumerate(sdpas):
        outputs[query_name(i)] = _query(sdpa, cfg, where)
        params.append(_attention_input(sdpa, cfg, batch, i))
    results = [_named_result(value, name) for name, value in outputs.items()]
    cut = ov.Model(results, params, "ir_weights")
    _fold_static_shapes(cut)
    reachable = _reachable(results)
    used = [p for p in params if p in reachable]
    _check_inputs(used, where)
    cut = ov.Model(results, used, f"ir_weights_N{batch}")
    _check_parts(cut, cfg.num_layers, where)
    return cut


def _stages(model: ov.Model) -> tuple[list[ov.Node], dict[ov.Node, int | None]]:
    """The model's ops in order, each with its part; None for constants and what is computed
    from constants alone (a weight and its decompression), which go with their reader."""
    order = list(model.get_ordered_ops())
    stage: dict[ov.Node, int | None] = {}
    for node in order:
        name = node.get_friendly_name()
        if node.get_type_name() == "Parameter":
            stage[node] = int(name.removeprefix(ATTN_IN)) + 1 if name.startswith(ATTN_IN) else 0
            continue
        known = [s for v in node.input_values() if (s := stage[v.get_node()]) is not None]
        stage[node] = max(known, default=None)
    return order, stage


def _check_parts(cut: ov.Model, layers: int, where: str) -> None:
    """Layer i's attention inputs come from part i, the logits from the head (part N)."""
    _, stage = _stages(cut)
    for result in cut.get_results():
        name = result.get_friendly_name()
        expected = layers if name == LOGITS else int(name.rpartition(".")[2])
        if stage[result] != expected:
            raise _refuse(where, f"{name} is computed after the attention it should feed")


def _crossings(order: list[ov.Node], stage: dict[ov.Node, int | None]) -> dict[ov.Output, str]:
    """Outputs a later part reads, named: a host input by its own name, others cut.<k>."""
    names: dict[ov.Output, str] = {}
    for node in order:
        s = stage[node]
        if s is None:
            continue
        for out in node.outputs():
            readers = [stage.get(t.get_node()) for t in out.get_target_inputs()]
            if any(r is not None and r > s for r in readers):
                host = node.get_type_name() == "Parameter"
                names[out] = node.get_friendly_name() if host else f"cut.{len(names)}"
    return names


def weight_part(cut: ov.Model, index: int, batch: int) -> ov.Model:
    """Part ``index`` (0..N, N the head) of ``cut_weights``'s graph, on a copy of it (whose
    constants alias the same weights)."""
    model = cut.clone()
    order, stage = _stages(model)
    crossings = _crossings(order, stage)
    params = [n for n in order if n.get_type_name() == "Parameter" and stage[n] == index]
    taken: dict[str, ov.Node] = {}
    results = []
    for node in order:
        if stage[node] != index:
            continue
        if node.get_type_name() == "Result":
            results.append(node)
            continue
        for port in node.inputs():
            source = port.get_source_output()
            earlier = stage[source.get_node()]
            if earlier is not None and earlier < index:
                name = crossings[source]
                if name not in taken:
                    taken[name] = ops.parameter(
                        source.get_partial_shape(), source.get_element_type(), name=name
                    )
                    taken[name].output(0).get_tensor().set_names({name})
                port.replace_source_output(taken[name].output(0))
        if node.get_type_name() != "Parameter":
            results += [_named_result(o, crossings[o]) for o in node.outputs() if o in crossings]
    head = any(r.get_friendly_name() == LOGITS for r in results)
    name = ("ir_weights_head" if head else f"ir_weights_part{index}") + (
        f"_N{batch}" if batch > 1 else ""
    )
    part = ov.Model(results, params + list(taken.values()), name)
    keep_lookups_unfolded(part)  # static input_ids: see graphs/fold_guard.py
    return part
