"""Static-shape decoder graphs per KV capacity, built with OpenVINO's opset.

One builder makes the step graph for a chunk of L tokens against a past of capacity C:
L=1 is the decode step, L>1 a prefill chunk. The past K/V are explicit inputs of static shape
[B, kv_heads, C, head_dim] (head-major, so each KV head's slots are contiguous; B sequences,
1 unless the spec batches, each with its own past length, positions and mask); attention
scores the C past slots and the chunk's own tokens separately and never concatenates the
cache, so a step reads the cache once and copies nothing. Only the chunk's new K/V and the
logits come out; the host writes the new K/V into the cache.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from numpy.typing import ArrayLike, DTypeLike
from openvino import opset13 as ops

from compile_ahead.runtime.base.precision import OV_TYPES
from compile_ahead.runtime.graphs.decompression import mark_decompression
from compile_ahead.runtime.graphs.fold_guard import keep_lookups_unfolded
from compile_ahead.runtime.graphs.spec import (
    INPUT_IDS,
    LAST_INDEX,
    LOGITS,
    PAST_LENGTH,
    GraphSpec,
    new_key_name,
    new_value_name,
    past_key_name,
    past_value_name,
)
from compile_ahead.runtime.model.architecture import ModelConfig, RopeConfig
from compile_ahead.runtime.model.weight_constants import CompressedWeight
from compile_ahead.runtime.model.weights import WeightStore


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


def const(value: ArrayLike, dtype: DTypeLike = np.float32) -> ov.Node:
    return ops.constant(np.asarray(value, dtype=dtype))


class WeightConstants:
    """Weight constants for one graph: compressed storage aliased, decompressed in-graph.

    The constants own what they alias (WeightStore.graph_constants): the graph and anything
    compiled from it outlive the store, the source and the caller's references safely.
    """

    def __init__(self, store: WeightStore):
        self._constants = store.graph_constants()
        self._nodes: dict[str, ov.Output] = {}

    def __call__(self, name: str) -> ov.Output:
        if name not in self._nodes:
            const = self._constants(name)
            if isinstance(const, CompressedWeight):
                self._nodes[name] = decompressed(const)
                return self._nodes[name]
            node = const.output(0)
            if const.get_element_type() != ov.Type.f32:
                convert = ops.convert(node, ov.Type.f32)
                mark_decompression(convert)
                node = convert.output(0)
            self._nodes[name] = node
        return self._nodes[name]


def decompressed(weight: CompressedWeight) -> ov.Output:
    """New nodes of one graph: a compressed weight in f32, computed from constants that share
    its memory as (values - zero points) * scales, reshaped to the weight's shape. A MatMul
    (or an embedding Gather) over this is what the CPU plugin fuses into its compressed-weight
    kernel, which reads the values as they are stored."""
    values = ops.convert(ov.op.Constant(weight.values), ov.Type.f32)
    if weight.zero_points is not None:
        zero = ov.op.Constant(weight.zero_points).output(0)
        if weight.zero_points.get_element_type() != ov.Type.f32:
            zero = ops.convert(zero, ov.Type.f32).output(0)
        values = ops.subtract(values, zero)
    scales = ops.convert(ov.op.Constant(weight.scales), ov.Type.f32)
    mark_decompression(scales)
    full = ops.multiply(values, scales)
    return ops.reshape(full, const(weight.shape, np.int64), False).output(0)


def linear(x: ov.Output, w: WeightConstants, name: str, bias: bool = False) -> ov.Output:
    y = ops.matmul(x, w(name + ".weight"), transpose_a=False, transpose_b=True)
    return ops.add(y, w(name + ".bias")).output(0) if bias else y.output(0)


def rms_norm(x: ov.Output, weight: ov.Output, eps: float) -> ov.Output:
    var = ops.reduce_mean(ops.multiply(x, x), const([-1], np.int64), keep_dims=True)
    normed = ops.divide(x, ops.sqrt(ops.add(var, const(eps))))
    return ops.multiply(normed, weight).output(0)


def rotate(x: ov.Output, cos: ov.Output, sin: ov.Output) -> ov.Output:
    """x*cos + rotate_half(x)*sin, rotate_half(x) = [-x2, x1] over the last axis."""
    x1, x2 = ops.split(x, const(-1, np.int64), 2).outputs()
    rotated = ops.concat([ops.negative(x2), x1], -1)
    return ops.add(ops.multiply(x, cos), ops.multiply(rotated, sin)).output(0)


# -- decoder pieces, shared by the whole step graph and the split graphs ----------------------


# Rotary angles from tables: a position is split into base-ANGLE_BASE digits (exact integer
# ops), and the cos/sin of each digit's angle are looked up in a host-computed table of
# ANGLE_BASE rows. ANGLE_DIGITS digits cover positions below 2**24, far beyond any context
# (and beyond max_position_embeddings, which baselines may run past).
ANGLE_BASE = 256
ANGLE_DIGITS = 3


def exact_angles(kv_precision: str) -> bool:
    """Whether a graph computes its rotary cos/sin from angle tables (rope_cos_sin): when
    its cache is bf16 or f16.

    Such a graph runs at a low inference precision (the KV precision follows it by default),
    where the CPU plugin computes the in-graph angles f32(position) * inv_freq in bf16: a
    position above 256 is no longer exact and the angles drift by radians. The tables keep
    positions out of floating point; the low precision then rounds only cos/sin values, as it
    rounds q and k anyway. An f32 cache keeps the f32 product: it is what transformers
    computes at f32, so f32 results stay the reference's to the last bit (the tables give the
    exact angles, not the f32 product's). With an f32 cache at bf16 inference precision the CPU
    plugin keeps this product in f32.
    """
    return kv_precision != "f32"


def _angle_table(inv_freq: np.ndarray, step: int) -> tuple[ov.Output, ov.Output]:
    """cos and sin [ANGLE_BASE, hd/2] of r*step*inv_freq, computed in float64, stored in f32."""
    rows = np.arange(ANGLE_BASE, dtype=np.float64) * step
    angles = np.outer(rows, inv_freq.astype(np.float64))
    return const(np.cos(angles)).output(0), const(np.sin(angles)).output(0)


def rope_cos_sin(
    cfg: ModelConfig, positions: ov.Output, exact: bool
) -> tuple[ov.Output, ov.Output]:
    """cos and sin [..., hd] for i64 ``positions`` [...] (see exact_angles for ``exact``).

    exact: the angle p*inv is the sum of one term per base-ANGLE_BASE digit d_k of p,
    d_k*ANGLE_BASE**k*inv, each term's cos/sin gathered from its table and the terms summed
    by the angle-sum identities cos(a+b) = cos a cos b - sin a sin b and
    sin(a+b) = sin a cos b + cos a sin b.
    """
    inv_freq = rope_inv_freq(cfg.head_dim, cfg.rope)
    if not exact:
        pos = ops.unsqueeze(ops.convert(positions, ov.Type.f32), const([-1], np.int64))
        freqs = ops.multiply(pos, const(inv_freq))
        emb = ops.concat([freqs, freqs], -1)
        return ops.cos(emb).output(0), ops.sin(emb).output(0)
    base = const(ANGLE_BASE, np.int64)

    def digit_term(k: int, rest: ov.Output) -> tuple[ov.Output, ov.Output, ov.Output]:
        """cos and sin of digit k's term, and the position's digits above it."""
        digit = ops.floor_mod(rest, base)
        cos_table, sin_table = _angle_table(inv_freq, ANGLE_BASE**k)
        axis = const(0, np.int64)
        return (
            ops.gather(cos_table, digit, axis).output(0),
            ops.gather(sin_table, digit, axis).output(0),
            ops.divide(ops.subtract(rest, digit), base).output(0),
        )

    cos, sin, rest = digit_term(0, positions)
    for k in range(1, ANGLE_DIGITS):
        c, s, rest = digit_term(k, rest)
        cos, sin = (
            ops.subtract(ops.multiply(cos, c), ops.multiply(sin, s)).output(0),
            ops.add(ops.multiply(sin, c), ops.multiply(cos, s)).output(0),
        )
    return ops.concat([cos, cos], -1).output(0), ops.concat([sin, sin], -1).output(0)


def rope_tables(
    cfg: ModelConfig,
    past_len: ov.Output,
    chunk: int | ov.Output,
    batch: int = 1,
    exact: bool = False,
) -> tuple[ov.Output, ov.Output]:
    """cos/sin [B, 1, L, hd] for positions t..t+L-1 (t = past_len, a scalar, or per sequence
    [B] when ``batch`` > 1); ``chunk`` is L, or a scalar i64 output holding it in a dynamic
    graph; ``exact``: see exact_angles."""
    hd = cfg.head_dim
    stop = const(chunk, np.int64) if isinstance(chunk, int) else chunk
    tokens = ops.range(const(0, np.int64), stop, const(1, np.int64), ov.Type.i64).output(0)
    if batch > 1:  # [1, L] + [B, 1]: each sequence's own positions
        tokens = ops.unsqueeze(tokens, const([0], np.int64)).output(0)
        past_len = ops.unsqueeze(past_len, const([1], np.int64)).output(0)
    cos, sin = rope_cos_sin(cfg, ops.add(tokens, past_len).output(0), exact)
    shape = const([batch, 1, chunk if isinstance(chunk, int) else -1, hd], np.int64)
    return (
        ops.reshape(cos, shape, False).output(0),
        ops.reshape(sin, shape, False).output(0),
    )


def layer_qkv(
    cfg: ModelConfig,
    w: WeightConstants,
    x: ov.Output,
    layer: int,
    rope: tuple[ov.Output, ov.Output],
    chunk: int,
    batch: int = 1,
) -> tuple[ov.Output, ov.Output, ov.Output]:
    """Input norm, q/k/v projections and RoPE: q [B, H, L, hd], k and v [B, kv, L, hd]
    (``chunk`` -1: L is dynamic)."""
    p = f"model.layers.{layer}."
    h = rms_norm(x, w(p + "input_layernorm.weight"), cfg.rms_norm_eps)

    def heads_first(t: ov.Output, n: int) -> ov.Output:
        t = ops.reshape(t, const([batch, chunk, n, cfg.head_dim], np.int64), False)
        return ops.transpose(t, const([0, 2, 1, 3], np.int64)).output(0)

    bias = cfg.attention_bias
    q = heads_first(linear(h, w, p + "self_attn.q_proj", bias), cfg.num_heads)
    k = heads_first(linear(h, w, p + "self_attn.k_proj", bias), cfg.num_kv_heads)
    v = heads_first(linear(h, w, p + "self_attn.v_proj", bias), cfg.num_kv_heads)
    cos, sin = rope
    return rotate(q, cos, sin), rotate(k, cos, sin), v


def as_stored(t: ov.Output, kv_type: ov.Type) -> tuple[ov.Output, ov.Output]:
    """A new K or V as the cache stores it, and that rounded value back in f32, so a token
    attends to itself exactly as later tokens will see it."""
    if kv_type == ov.Type.f32:
        return t, t
    stored = ops.convert(t, kv_type).output(0)
    return stored, ops.convert(stored, ov.Type.f32).output(0)


def past_kv_inputs(
    cfg: ModelConfig, spec: GraphSpec, layer: int, filled: ov.Output | None = None
) -> tuple[list[ov.Node], ov.Output, ov.Output]:
    """Parameters past_key.i / past_value.i and their first C slots in f32 (a dynamic graph:
    their first ``filled`` slots, ``filled`` a [1] i64 output)."""
    kv_type = OV_TYPES[spec.kv_precision]
    shape = [spec.batch, cfg.num_kv_heads, spec.input_capacity, cfg.head_dim]
    params = [
        ops.parameter(shape, kv_type, name=past_key_name(layer)),
        ops.parameter(shape, kv_type, name=past_value_name(layer)),
    ]
    views = []
    for param in params:
        t = param.output(0)
        if filled is not None:
            # Only the filled slots: attention never scores the empty part of the buffer.
            t = ops.slice(
                t, const([0], np.int64), filled, const([1], np.int64), const([2], np.int64)
            ).output(0)
        elif spec.input_capacity > spec.capacity:
            # Only the first C slots: the Slice copies that prefix, never the whole buffer.
            t = ops.slice(
                t,
                const([0], np.int64),
                const([spec.capacity], np.int64),
                const([1], np.int64),
                const([2], np.int64),
            ).output(0)
        if kv_type != ov.Type.f32:
            t = ops.convert(t, ov.Type.f32).output(0)
        views.append(t)
    return params, views[0], views[1]


class AttentionMasks:
    """Additive masks shared by every layer of a graph, and how the scores split into past
    slots and chunk tokens."""

    def __init__(
        self, cfg: ModelConfig, past_len: ov.Output, capacity: int, chunk: int, batch: int = 1
    ):
        # Past slots j < t are valid (batched: j < t_b for sequence b, a [B, 1, 1, C] mask).
        slots = ops.range(
            const(0, np.int64), const(capacity, np.int64), const(1, np.int64), ov.Type.i64
        )
        if batch > 1:
            past_len = ops.reshape(past_len, const([batch, 1, 1, 1], np.int64), False).output(0)
        self.past: ov.Output | None = ops.select(
            ops.less(slots, past_len), const(0.0), const(-np.inf)
        ).output(0)
        self.batch = batch
        # Chunk rows are (query group g, token i) flattened g-major; token i sees tokens j <= i.
        causal = np.where(np.tril(np.ones((chunk, chunk), bool)), 0.0, -np.inf).astype(np.float32)
        self.chunk = const(np.tile(causal, (cfg.group_size, 1)))  # [G*L, L]
        self.scale = const(1.0 / np.sqrt(cfg.head_dim))
        self.split = const([capacity, chunk], np.int64)  # score columns: past, chunk
        self.chunk_len = chunk  # -1: dynamic

    @classmethod
    def filled(cls, cfg: ModelConfig, past_len: ov.Output, length: ov.Output) -> AttentionMasks:
        """A dynamic graph's: the past is sliced to its filled slots (nothing to mask) and
        the chunk has ``length`` (a scalar i64 output) tokens."""
        masks = cls.__new__(cls)
        masks.past = None
        tokens = ops.range(const(0, np.int64), length, const(1, np.int64), ov.Type.i64)
        row = ops.unsqueeze(tokens, const([1], np.int64))
        causal = ops.select(ops.less_equal(tokens, row), const(0.0), const(-np.inf))  # [L, L]
        groups = const([cfg.group_size, 1], np.int64)
        masks.chunk = ops.tile(causal, groups).output(0)  # [G*L, L], g-major rows
        masks.scale = const(1.0 / np.sqrt(cfg.head_dim))
        one = const([1], np.int64)
        masks.split = ops.concat([ops.reshape(past_len, one, False), const([-1], np.int64)], 0)
        masks.chunk_len = -1
        masks.batch = 1
        return masks


def attention(
    cfg: ModelConfig,
    q: ov.Output,
    k: ov.Output,
    v: ov.Output,
    past_k: ov.Output,
    past_v: ov.Output,
    masks: AttentionMasks,
) -> ov.Output:
    """Scores the C past slots and the chunk's own tokens separately (no KV concat).

    GQA without repeating KV: the G query heads of each KV head become rows.
    Returns [B, L, H*hd].
    """
    L, hd, heads, B = masks.chunk_len, cfg.head_dim, cfg.num_heads, masks.batch
    rows = cfg.group_size * L if L > 0 else -1
    qg = ops.reshape(q, const([B, cfg.num_kv_heads, rows, hd], np.int64), False)
    qg = ops.multiply(qg, masks.scale)  # scale the G*L query rows, not the G*L x C scores
    s_past = ops.matmul(qg, past_k, False, True)
    if masks.past is not None:
        s_past = ops.add(s_past, masks.past)
    s_new = ops.add(ops.matmul(qg, k, False, True), masks.chunk)
    probs = ops.softmax(ops.concat([s_past, s_new], -1), -1)
    p_past, p_new = ops.variadic_split(probs, const(-1, np.int64), masks.split).outputs()
    out = ops.add(ops.matmul(p_past, past_v, False, False), ops.matmul(p_new, v, False, False))
    out = ops.reshape(out, const([B, heads, L, hd], np.int64), False)
    return ops.reshape(
        ops.transpose(out, const([0, 2, 1, 3], np.int64)),
        const([B, L, heads * hd], np.int64),
        False,
    ).output(0)


def layer_out(
    cfg: ModelConfig, w: WeightConstants, x: ov.Output, attn: ov.Output, layer: int
) -> ov.Output:
    """o_proj residual, then the post-attention norm and SwiGLU MLP residual."""
    p = f"model.layers.{layer}."
    x = ops.add(x, linear(attn, w, p + "self_attn.o_proj")).output(0)
    h = rms_norm(x, w(p + "post_attention_layernorm.weight"), cfg.rms_norm_eps)
    gate = linear(h, w, p + "mlp.gate_proj")
    up = linear(h, w, p + "mlp.up_proj")
    mlp = linear(ops.multiply(ops.swish(gate), up).output(0), w, p + "mlp.down_proj")
    return ops.add(x, mlp).output(0)


def lm_head(cfg: ModelConfig, w: WeightConstants, row: ov.Output) -> ov.Output:
    """Final norm and the (possibly tied) output projection: [B, D] -> [B, vocab]."""
    row = rms_norm(row, w("model.norm.weight"), cfg.rms_norm_eps)
    return linear(row, w, "model.embed_tokens" if cfg.tie_word_embeddings else "lm_head")


def name_io(params: list, results: list) -> None:
    """Tensor names = friendly names, so requests address ports by name."""
    for node in params + results:
        node.output(0).get_tensor().set_names({node.get_friendly_name()})


def build_step_model(cfg: ModelConfig, store: WeightStore, spec: GraphSpec) -> ov.Model:
    """The decode (chunk=1) or prefill-chunk graph for capacity ``spec.capacity``.

    Inputs: input_ids [1, L] i64; past_length [] i64 (valid past slots t, the chunk sits at
    positions t..t+L-1); past_key.i / past_value.i [1, kv, C, hd]; for L>1 also last_index []
    i64 (the row whose logits to return, for a chunk padded past the prompt's end).
    Outputs: logits [1, vocab] f32; new_key.i / new_value.i [1, kv, L, hd].
    Rows of a padded chunk beyond the prompt never influence valid rows (causal mask).
    A dynamic spec takes input_ids [1, ?] (no padding) and attends over the t filled slots.
    A batched spec (B > 1, static only) takes B rows of ids and per sequence past_length [B]
    (and last_index [B]); its outputs lead with B: logits [B, vocab], new K/V [B, kv, L, hd].
    """
    L, B = spec.chunk, spec.batch
    kv_type = OV_TYPES[spec.kv_precision]
    w = WeightConstants(store)

    ids = ops.parameter([B, -1 if spec.dynamic else L], ov.Type.i64, name=INPUT_IDS)
    per_sequence = [] if B == 1 else [B]
    past_len = ops.parameter(per_sequence, ov.Type.i64, name=PAST_LENGTH)
    params = [ids, past_len]
    last_index = const(0, np.int64)
    if L > 1 or spec.dynamic:
        last_index = ops.parameter(per_sequence, ov.Type.i64, name=LAST_INDEX)
        params.append(last_index)

    x = ops.gather(w("model.embed_tokens.weight"), ids, const(0, np.int64)).output(0)  # [1,L,D]
    filled = None
    if spec.dynamic:
        length = ops.gather(ops.shape_of(ids), const(1, np.int64), const(0, np.int64)).output(0)
        rope = rope_tables(cfg, past_len, length, exact=exact_angles(spec.kv_precision))
        masks = AttentionMasks.filled(cfg, past_len, length)
        filled = ops.reshape(past_len, const([1], np.int64), False).output(0)
        L = -1
    else:
        rope = rope_tables(cfg, past_len, L, B, exact_angles(spec.kv_precision))
        masks = AttentionMasks(cfg, past_len, spec.capacity, L, B)

    results = []
    for i in range(cfg.num_layers):
        q, k, v = layer_qkv(cfg, w, x, i, rope, L, B)
        new_k, k = as_stored(k, kv_type)
        new_v, v = as_stored(v, kv_type)
        results += [
            ops.result(new_k, name=new_key_name(i)),
            ops.result(new_v, name=new_value_name(i)),
        ]
        past_params, past_k, past_v = past_kv_inputs(cfg, spec, i, filled)
        params += past_params
        x = layer_out(cfg, w, x, attention(cfg, q, k, v, past_k, past_v, masks), i)

    batch_dims = 1 if B > 1 and L > 1 else 0  # batched: each sequence's own last_index
    row = ops.gather(x, last_index, const(1, np.int64), batch_dims).output(0)  # [B, D]
    results.insert(0, ops.result(lm_head(cfg, w, row), name=LOGITS))
    name_io(params, results)
    shape = ("dyn" if spec.dynamic else f"L{spec.chunk}") + (f"_N{B}" if B > 1 else "")
    model = ov.Model(
        results, params, f"{spec.kind}_C{spec.capacity}_{shape}_B{spec.input_capacity}"
    )
    keep_lookups_unfolded(model)  # static input_ids: see graphs/fold_guard.py
    return model
