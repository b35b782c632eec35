"""A GGUF file's own tokenizer as a `tokenizers` Tokenizer, built from its vocabulary and
merges (runtime/model/gguf_file.py reads them), never fetched.

The ``gpt2`` model (byte-level BPE: SmolLM2, Qwen2) is built as transformers builds it from a
GGUF, which is the reference its tests hold it to: a BPE model over the file's tokens and
merges with byte fallback, the byte-level pre-tokenizer without a prefix space, the control
tokens (token type 3) as special tokens, and the beginning-of-sequence token put before every
text when the file names one. Other tokenizer models are refused in one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from compile_ahead.runtime.model.gguf_file import GGUFTokenizer

CONTROL = 3  # llama.cpp's token type of a control (special) token
SUPPORTED_MODELS = ("gpt2",)


def gguf_tokenizer(tok: GGUFTokenizer, where: str) -> Tokenizer:
    """The Tokenizer of a GGUF's ``tok``; ``where`` names the file in a refusal."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    if tok.model not in SUPPORTED_MODELS:
        raise CompileAheadError(
            f"{where}: its tokenizer model is {tok.model!r}; only {', '.join(SUPPORTED_MODELS)} "
            "(byte-level BPE) is read here: pass token ids with --prompt-ids instead"
        )
    vocab = {token: i for i, token in enumerate(tok.tokens)}
    merges = [tuple(m.split(" ", 1)) for m in tok.merges]
    bpe = models.BPE(vocab, merges, byte_fallback=True)
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=True
    )
    tokenizer.decoder = decoders.ByteLevel()
    special = [
        AddedToken(t, special=True, normalized=False)
        for t, kind in zip(tok.tokens, tok.token_types, strict=False)
        if kind == CONTROL
    ]
    tokenizer.add_special_tokens(special)
    if tok.bos_id is not None:
        bos = tok.tokens[tok.bos_id]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.bos_id)]
        )
    return tokenizer
