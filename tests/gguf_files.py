"""Small GGUF files for the tests, written by the gguf package's own writer as llama.cpp's
converter writes them (tests/test_gguf_file.py, tests/test_gguf_model.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 64, 4, 2, 128, 96
HEAD_DIM = HIDDEN // HEADS


def converter_permute(rows: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel.permute) as it documents it:
    a checkpoint's Q or K rows as the GGUF stores them."""
    return (
        rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:])
        .swapaxes(1, 2)
        .reshape(rows.shape)
    )


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    """A one-layer llama's tensors in the checkpoint's layout ([out, in])."""
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "token_embd.weight": w(VOCAB, HIDDEN),
        "output_norm.weight": w(HIDDEN),
        "blk.0.attn_norm.weight": w(HIDDEN),
        "blk.0.attn_q.weight": w(HIDDEN, HIDDEN),
        "blk.0.attn_k.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
        "blk.0.attn_v.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
        "blk.0.attn_output.weight": w(HIDDEN, HIDDEN),
        "blk.0.ffn_norm.weight": w(HIDDEN),
        "blk.0.ffn_gate.weight": w(FFN, HIDDEN),
        "blk.0.ffn_up.weight": w(FFN, HIDDEN),
        "blk.0.ffn_down.weight": w(HIDDEN, FFN),
    }


def write_gguf(
    path: Path,
    weights: dict[str, np.ndarray],
    arch: str = "llama",
    quant: dict[str, object] | None = None,
    extra=None,
    raw_shapes: dict[str, tuple[int, ...]] | None = None,
) -> Path:
    """``weights`` (checkpoint layout) written by the gguf package as llama.cpp's converter
    writes them: Q and K rows permuted (llama), each tensor in ``quant``'s type (F32 else);
    ``extra(writer)`` adds fields (a tokenizer), ``raw_shapes`` declares other shapes than the
    values have (a file whose shape and bytes disagree)."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_eos_token_id(2)
    w.add_vocab_size(weights["token_embd.weight"].shape[0])  # transformers reads it from here
    if extra is not None:
        extra(w)
    for name, value in weights.items():
        if arch == "llama" and name.endswith("attn_q.weight"):
            value = converter_permute(value, HEADS)
        elif arch == "llama" and name.endswith("attn_k.weight"):
            value = converter_permute(value, KV_HEADS)
        kind = (quant or {}).get(name)
        if kind is None:
            w.add_tensor(name, value, raw_shape=(raw_shapes or {}).get(name))
        else:
            w.add_tensor(name, gguf.quants.quantize(value, kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
