"""Static-shape decoder graphs per KV capacity, built with OpenVINO's opset.

One builder makes the step graph for a chunk of L tokens against a past of capacity C:
L=1 is the decode step, L>1 a prefill chunk. The past K/V are explicit inputs of static shape
[1, kv_heads, C, head_dim] (head-major, so each KV head's slots are contiguous); attention
scores the C past slots and the chunk's own tokens separately and never concatenates the
cache, so a step reads the cache once and copies nothing. Only the chunk's new K/V and the
logits come out; the host writes the new K/V into the cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from .config import ModelConfig, RopeConfig
from .precision import OV_TYPES
from .weights import WeightStore

# rt_info key the CPU plugin reads to keep a Convert of compressed weights as decompression
# (weights stay f16/bf16 in memory) instead of constant-folding them to f32.
DECOMPRESSION_KEY = "decompression_0"

INPUT_IDS = "input_ids"
PAST_LENGTH = "past_length"
LAST_INDEX = "last_index"
LOGITS = "logits"


def past_key_name(layer: int) -> str:
    return f"past_key.{layer}"


def past_value_name(layer: int) -> str:
    return f"past_value.{layer}"


def new_key_name(layer: int) -> str:
    return f"new_key.{layer}"


def new_value_name(layer: int) -> str:
    return f"new_value.{layer}"


def rope_inv_freq(head_dim: int, rope: RopeConfig) -> np.ndarray:
    """Inverse RoPE frequencies [head_dim/2], including the scaling types we implement."""
    inv = 1.0 / (rope.theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    if rope.rope_type == "linear":
        inv = inv / rope.factor
    elif rope.rope_type == "llama3":
        old_ctx = rope.original_max_position_embeddings
        low_wavelen = old_ctx / rope.low_freq_factor
        high_wavelen = old_ctx / rope.high_freq_factor
        wavelen = 2 * np.pi / inv
        smooth = (old_ctx / wavelen - rope.low_freq_factor) / (
            rope.high_freq_factor - rope.low_freq_factor
        )
        blended = (1 - smooth) * inv / rope.factor + smooth * inv
        inv = np.where(wavelen > low_wavelen, inv / rope.factor, inv)
        mid = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
        inv = np.where(mid, blended, inv)
    return inv.astype(np.float32)


def _const(value, dtype=np.float32) -> ov.Node:
    return ops.constant(np.asarray(value, dtype=dtype))


class _Weights:
    """Weight constants for one graph: compressed storage aliased, decompressed in-graph.

    The constants alias the store's arrays without owning them: the store (held by the
    ModelSource) must outlive every model and compiled model built from it.
    """

    def __init__(self, store: WeightStore):
        self._store = store
        self._nodes: dict[str, ov.Output] = {}

    def __call__(self, name: str) -> ov.Output:
        if name not in self._nodes:
            tensor = self._store.get(name)
            array = np.ascontiguousarray(tensor.array)
            const = ov.op.Constant(ov.Tensor(array, list(array.shape), tensor.element_type))
            node = const.output(0)
            if tensor.element_type != ov.Type.f32:
                convert = ops.convert(node, ov.Type.f32)
                convert.get_rt_info()[DECOMPRESSION_KEY] = ""
                node = convert.output(0)
            self._nodes[name] = node
        return self._nodes[name]


def _linear(x: ov.Output, w: _Weights, name: str, bias: bool = False) -> ov.Output:
    y = ops.matmul(x, w(name + ".weight"), transpose_a=False, transpose_b=True)
    return ops.add(y, w(name + ".bias")).output(0) if bias else y.output(0)


def _rms_norm(x: ov.Output, weight: ov.Output, eps: float) -> ov.Output:
    var = ops.reduce_mean(ops.multiply(x, x), _const([-1], np.int64), keep_dims=True)
    normed = ops.divide(x, ops.sqrt(ops.add(var, _const(eps))))
    return ops.multiply(normed, weight).output(0)


def _rotate(x: ov.Output, cos: ov.Output, sin: ov.Output) -> ov.Output:
    """x*cos + rotate_half(x)*sin, rotate_half(x) = [-x2, x1] over the last axis."""
    x1, x2 = ops.split(x, _const(-1, np.int64), 2).outputs()
    rotated = ops.concat([ops.negative(x2), x1], -1)
    return ops.add(ops.multiply(x, cos), ops.multiply(rotated, sin)).output(0)


@dataclass(frozen=True)
class GraphSpec:
    capacity: int  # C: past KV slots the graph reads
    chunk: int = 1  # L: tokens per call (1 = decode step)
    kv_precision: str = "f32"
    # Slots of the bound KV buffer when larger than ``capacity``: the graph then reads the
    # buffer's first ``capacity`` slots (a shared top-capacity reservation, b1/i3).
    buffer_capacity: int | None = None

    @property
    def input_capacity(self) -> int:
        return max(self.capacity, self.buffer_capacity or 0)

    @property
    def kind(self) -> str:
        return "decode" if self.chunk == 1 else "prefill"


def build_step_model(cfg: ModelConfig, store: WeightStore, spec: GraphSpec) -> ov.Model:
    """The decode (chunk=1) or prefill-chunk graph for capacity ``spec.capacity``.

    Inputs: input_ids [1, L] i64; past_length [] i64 (valid past slots t, the chunk sits at
    positions t..t+L-1); past_key.i / past_value.i [1, kv, C, hd]; for L>1 also last_index []
    i64 (the row whose logits to return, for a chunk padded past the prompt's end).
    Outputs: logits [1, vocab] f32; new_key.i / new_value.i [1, kv, L, hd].
    Rows of a padded chunk beyond the prompt never influence valid rows (causal mask).
    """
    C, L = spec.capacity, spec.chunk
    kv_heads, hd, heads, group = cfg.num_kv_heads, cfg.head_dim, cfg.num_heads, cfg.group_size
    kv_type = OV_TYPES[spec.kv_precision]
    w = _Weights(store)

    ids = ops.parameter([1, L], ov.Type.i64, name=INPUT_IDS)
    past_len = ops.parameter([], ov.Type.i64, name=PAST_LENGTH)
    params = [ids, past_len]
    last_index = None
    if L > 1:
        last_index = ops.parameter([], ov.Type.i64, name=LAST_INDEX)
        params.append(last_index)

    x = ops.gather(w("model.embed_tokens.weight"), ids, _const(0, np.int64)).output(0)  # [1,L,D]

    # RoPE tables for positions t..t+L-1: [1, 1, L, hd]
    positions = ops.convert(
        ops.add(
            ops.range(_const(0, np.int64), _const(L, np.int64), _const(1, np.int64), ov.Type.i64),
            past_len,
        ),
        ov.Type.f32,
    )
    freqs = ops.multiply(
        ops.unsqueeze(positions, _const([1], np.int64)),
        _const(rope_inv_freq(hd, cfg.rope)[None, :]),
    )
    emb = ops.concat([freqs, freqs], -1)
    cos = ops.reshape(ops.cos(emb), _const([1, 1, L, hd], np.int64), False).output(0)
    sin = ops.reshape(ops.sin(emb), _const([1, 1, L, hd], np.int64), False).output(0)

    # Past slots j < t are valid: an additive mask over the C slots, shared by all layers.
    slots = ops.range(_const(0, np.int64), _const(C, np.int64), _const(1, np.int64), ov.Type.i64)
    past_mask = ops.select(ops.less(slots, past_len), _const(0.0), _const(-np.inf)).output(0)
    # Chunk rows are (query group g, token i) flattened g-major; token i sees chunk tokens j <= i.
    causal = np.where(np.tril(np.ones((L, L), bool)), 0.0, -np.inf).astype(np.float32)
    chunk_mask = _const(np.tile(causal, (group, 1)))  # [G*L, L]
    scale = _const(1.0 / np.sqrt(hd))

    results = []
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        h = _rms_norm(x, w(p + "input_layernorm.weight"), cfg.rms_norm_eps)
        bias = cfg.attention_bias

        def heads_first(t: ov.Output, n: int) -> ov.Output:
            t = ops.reshape(t, _const([1, L, n, hd], np.int64), False)
            return ops.transpose(t, _const([0, 2, 1, 3], np.int64)).output(0)  # [1, n, L, hd]

        q = heads_first(_linear(h, w, p + "self_attn.q_proj", bias), heads)
        k = heads_first(_linear(h, w, p + "self_attn.k_proj", bias), kv_heads)
        v = heads_first(_linear(h, w, p + "self_attn.v_proj", bias), kv_heads)
        q = _rotate(q, cos, sin)
        k = _rotate(k, cos, sin)

        new_k = ops.convert(k, kv_type) if kv_type != ov.Type.f32 else k
        new_v = ops.convert(v, kv_type) if kv_type != ov.Type.f32 else v
        results.append(ops.result(new_k, name=new_key_name(i)))
        results.append(ops.result(new_v, name=new_value_name(i)))

        past_k = ops.parameter(
            [1, kv_heads, spec.input_capacity, hd], kv_type, name=past_key_name(i)
        )
        past_v = ops.parameter(
            [1, kv_heads, spec.input_capacity, hd], kv_type, name=past_value_name(i)
        )
        params += [past_k, past_v]
        pk, pv = past_k.output(0), past_v.output(0)
        if spec.input_capacity > C:
            # Only the first C slots: the Slice copies that prefix, never the whole buffer.
            pk, pv = (
                ops.slice(
                    t,
                    _const([0], np.int64),
                    _const([C], np.int64),
                    _const([1], np.int64),
                    _const([2], np.int64),
                ).output(0)
                for t in (pk, pv)
            )
        if kv_type != ov.Type.f32:
            pk, pv = ops.convert(pk, ov.Type.f32).output(0), ops.convert(pv, ov.Type.f32).output(0)
        if kv_type != ov.Type.f32:
            # Round the chunk's own K/V as the cache will hold them, so a token attends to
            # itself exactly as later tokens will see it.
            k = ops.convert(new_k, ov.Type.f32).output(0)
            v = ops.convert(new_v, ov.Type.f32).output(0)

        # GQA without repeating KV: the G query heads of each KV head become rows.
        qg = ops.reshape(q, _const([1, kv_heads, group * L, hd], np.int64), False)
        s_past = ops.add(ops.multiply(ops.matmul(qg, pk, False, True), scale), past_mask)
        s_new = ops.add(ops.multiply(ops.matmul(qg, k, False, True), scale), chunk_mask)
        probs = ops.softmax(ops.concat([s_past, s_new], -1), -1)
        p_past, p_new = ops.variadic_split(
            probs, _const(-1, np.int64), _const([C, L], np.int64)
        ).outputs()
        attn = ops.add(ops.matmul(p_past, pv, False, False), ops.matmul(p_new, v, False, False))
        attn = ops.reshape(attn, _const([1, heads, L, hd], np.int64), False)
        attn = ops.reshape(
            ops.transpose(attn, _const([0, 2, 1, 3], np.int64)),
            _const([1, L, heads * hd], np.int64),
            False,
        )
        x = ops.add(x, _linear(attn.output(0), w, p + "self_attn.o_proj")).output(0)

        h = _rms_norm(x, w(p + "post_attention_layernorm.weight"), cfg.rms_norm_eps)
        gate = _linear(h, w, p + "mlp.gate_proj")
        up = _linear(h, w, p + "mlp.up_proj")
        x = ops.add(
            x, _linear(ops.multiply(ops.swish(gate), up).output(0), w, p + "mlp.down_proj")
        ).output(0)

    x = _rms_norm(x, w("model.norm.weight"), cfg.rms_norm_eps)
    row = ops.gather(
        x, last_index if last_index is not None else _const(0, np.int64), _const(1, np.int64)
    )  # [1, D]
    head = "model.embed_tokens" if cfg.tie_word_embeddings else "lm_head"
    logits = _linear(row.output(0), w, head)
    results.insert(0, ops.result(logits, name=LOGITS))

    for node in params + results:
        node.output(0).get_tensor().set_names({node.get_friendly_name()})
    return ov.Model(results, params, f"{spec.kind}_C{C}_L{L}_B{spec.input_capacity}")
