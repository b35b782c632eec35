"""A GGUF file (llama.cpp's format) read as a model: its configuration, its tensors as they
are stored, and its tokenizer and chat template (the header read by ``gguf_layout``, the type
names the `gguf` package's).

What is read:

- the architectures ``llama`` (SmolLM2, TinyLlama) and ``qwen2``, whose metadata give a
  ModelConfig like a checkpoint's config.json;
- tensors of type F32, F16, BF16, Q8_0, Q4_0 and Q4_1, kept as stored: a quantized weight is
  its rows of blocks (Q8_0: an f16 scale and 32 int8; Q4_0: an f16 scale and 32 4-bit values;
  Q4_1: an f16 scale, an f16 minimum and 32 4-bit values), never dequantized on the host;
- llama.cpp's converter permutes the rows of a llama model's Q and K projections (it pairs
  rotary halves as interleaved rows); reading undoes it, row by row, which needs no
  dequantization since a row's blocks are its own.

Anything else is refused in one line naming what: a file that is not GGUF or is cut short, an
architecture or a tensor type not listed, a tensor whose bytes disagree with its shape, a
tensor a layer needs that is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.architecture import ModelConfig, RopeConfig
from compile_ahead.runtime.model.gguf_layout import LayoutError, TensorInfo, read_layout

ARCHITECTURES = ("llama", "qwen2")
# GGML type name -> (values per block, bytes per block)
TENSOR_TYPES = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "Q8_0": (32, 34),
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
}
# The tensors every layer has (llama.cpp's names); qwen2 adds biases on q, k and v.
LAYER_TENSORS = (
    "attn_norm.weight",
    "attn_q.weight",
    "attn_k.weight",
    "attn_v.weight",
    "attn_output.weight",
    "ffn_norm.weight",
    "ffn_gate.weight",
    "ffn_up.weight",
    "ffn_down.weight",
)
MAGIC = b"GGUF"


@dataclass(frozen=True)
class GGUFTensor:
    """A tensor as stored: ``shape`` in torch's order ([out, in] for a weight), ``data`` its
    rows of blocks (uint8 [rows, bytes per row] for a quantized type, the values else), a
    view of the file's memory map."""

    name: str
    kind: str  # one of TENSOR_TYPES
    shape: tuple[int, ...]
    data: np.ndarray

    @property
    def quantized(self) -> bool:
        return TENSOR_TYPES[self.kind][0] > 1


@dataclass(frozen=True)
class GGUFTokenizer:
    """The file's tokenizer: its model (gpt2: byte-level BPE; llama: sentencepiece), vocabulary,
    merges and special ids, and the chat template."""

    model: str
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    pre: str | None
    chat_template: str | None


@dataclass(frozen=True)
class GGUFModel:
    path: Path
    architecture: str
    name: str | None
    config: ModelConfig
    tensors: dict[str, GGUFTensor]
    tokenizer: GGUFTokenizer | None
    metadata: dict[str, Any] = field(default_factory=dict)  # scalar and string fields


def read_gguf(path: str | Path) -> GGUFModel:
    """The model in the GGUF file ``path``, checked; one line otherwise."""
    path = Path(path)
    _check_magic(path)
    try:
        layout = read_layout(path)
    except (LayoutError, OSError) as err:
        raise CompileAheadError(f"{path}: not a whole GGUF file ({err})") from None
    fields = {k: v for k, v in layout.fields.items() if not isinstance(v, list)}
    arch = fields.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise CompileAheadError(
            f"{path}: architecture {arch!r} is not one of {', '.join(ARCHITECTURES)}"
        )
    data = np.memmap(path, dtype=np.uint8, mode="r")
    tensors = {t.name: _tensor(t, data, path) for t in layout.tensors}
    _check_spans(layout.tensors, tensors, data.size, layout.alignment, path)
    config = _config(fields, arch, tensors, path)
    _check_layers(tensors, config, path)
    if arch == "llama":
        tensors = _unpermute_qk(tensors, config)
    tokenizer = _tokenizer(layout.fields)
    return GGUFModel(path, arch, fields.get("general.name"), config, tensors, tokenizer, fields)


def _check_magic(path: Path) -> None:
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
    except OSError as err:
        raise CompileAheadError(f"{path}: cannot read it ({err.strerror or err})") from None
    if head != MAGIC:
        raise CompileAheadError(f"{path}: not a GGUF file (it starts {head!r}, not {MAGIC!r})")


def _kind(type_id: int) -> str:
    """A GGML type id's name (the `gguf` package's names: F32, Q4_1, ...)."""
    import gguf

    try:
        return gguf.GGMLQuantizationType(type_id).name
    except ValueError:
        return f"GGML type {type_id}"


def _tensor(t: TensorInfo, data: np.ndarray, path: Path) -> GGUFTensor:
    kind = _kind(t.type_id)
    if kind not in TENSOR_TYPES:
        raise CompileAheadError(
            f"{path}: tensor {t.name} is {kind}, which is not read here (only "
            f"{', '.join(TENSOR_TYPES)})"
        )
    shape = tuple(reversed(t.dims))  # GGUF lists the fastest dimension first
    per_block, block_bytes = TENSOR_TYPES[kind]
    if not shape or shape[-1] % per_block:
        raise CompileAheadError(
            f"{path}: tensor {t.name} ({kind}) has rows of {shape[-1] if shape else 0} values, "
            f"not whole blocks of {per_block}"
        )
    expected = int(np.prod(shape)) // per_block * block_bytes
    if t.start + expected > data.size:
        raise CompileAheadError(
            f"{path}: not a whole GGUF file (tensor {t.name}'s {expected} bytes from byte "
            f"{t.start} run past its end at {data.size})"
        )
    raw = data[t.start : t.start + expected]
    if kind == "F32":
        return GGUFTensor(t.name, kind, shape, raw.view(np.float32).reshape(shape))
    if kind == "F16":
        return GGUFTensor(t.name, kind, shape, raw.view(np.float16).reshape(shape))
    rows = (*shape[:-1], shape[-1] // per_block * block_bytes)  # BF16 and blocks: bytes
    return GGUFTensor(t.name, kind, shape, raw.reshape(rows))


def _check_spans(
    listed: list[TensorInfo], tensors: dict[str, GGUFTensor], end: int, alignment: int,
    path: Path,
) -> None:  # fmt: skip
    """Each tensor's bytes, as its shape and type give them, fill the room the file leaves it
    up to the next tensor (or the end), short of the alignment padding: a tensor whose shape
    says more or fewer bytes than were written for it is refused."""
    ordered = sorted(listed, key=lambda t: t.start)
    for t, following in zip(ordered, [*ordered[1:], None], strict=True):
        room = (end if following is None else following.start) - t.start
        stored = tensors[t.name]
        needed = stored.data.nbytes  # what its shape and type take (_tensor)
        if needed > room or (following is not None and room - needed >= max(alignment, 1)):
            raise CompileAheadError(
                f"{path}: tensor {t.name} ({stored.kind} {list(stored.shape)}) needs {needed} "
                f"bytes, but the file holds {room} for it"
            )


def _config(
    fields: dict[str, Any], arch: str, tensors: dict[str, GGUFTensor], path: Path
) -> ModelConfig:
    def need(key: str) -> Any:
        value = fields.get(f"{arch}.{key}")
        if value is None:
            raise CompileAheadError(f"{path}: its metadata has no {arch}.{key}")
        return value

    hidden, heads = int(need("embedding_length")), int(need("attention.head_count"))
    if "token_embd.weight" not in tensors:
        raise CompileAheadError(f"{path}: no token_embd.weight tensor")
    vocab = int(fields.get(f"{arch}.vocab_size", tensors["token_embd.weight"].shape[0]))
    eos = fields.get("tokenizer.ggml.eos_token_id")
    return ModelConfig(
        architecture=arch,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=int(need("feed_forward_length")),
        num_layers=int(need("block_count")),
        num_heads=heads,
        num_kv_heads=int(fields.get(f"{arch}.attention.head_count_kv", heads)),
        head_dim=int(fields.get(f"{arch}.attention.key_length", hidden // heads)),
        rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        rope=RopeConfig(theta=float(fields.get(f"{arch}.rope.freq_base", 10000.0))),
        tie_word_embeddings="output.weight" not in tensors,
        attention_bias="blk.0.attn_q.bias" in tensors,
        max_position_embeddings=int(need("context_length")),
        eos_token_ids=(int(eos),) if eos is not None else (),
    ).validate()


def _check_layers(tensors: dict[str, GGUFTensor], config: ModelConfig, path: Path) -> None:
    for layer in range(config.num_layers):
        for part in LAYER_TENSORS:
            if f"blk.{layer}.{part}" not in tensors:
                raise CompileAheadError(f"{path}: no tensor blk.{layer}.{part}")
    if "output_norm.weight" not in tensors:
        raise CompileAheadError(f"{path}: no tensor output_norm.weight")


def unpermute_rows(rows: np.ndarray, heads: int) -> np.ndarray:
    """The inverse of llama.cpp's row permutation of a Q or K projection of ``heads`` heads:
    its converter stores each head's rows as (pairs, 2) where the checkpoint has (2, pairs)."""
    out = rows.shape[0]
    per_head = out // heads
    grouped = rows.reshape(heads, per_head // 2, 2, *rows.shape[1:])
    return np.ascontiguousarray(grouped.swapaxes(1, 2).reshape(rows.shape))


def _unpermute_qk(tensors: dict[str, GGUFTensor], config: ModelConfig) -> dict[str, GGUFTensor]:
    fixed = dict(tensors)
    for name, t in tensors.items():
        if name.endswith(("attn_q.weight", "attn_q.bias")):
            heads = config.num_heads
        elif name.endswith(("attn_k.weight", "attn_k.bias")):
            heads = config.num_kv_heads
        else:
            continue
        fixed[name] = GGUFTensor(name, t.kind, t.shape, unpermute_rows(t.data, heads))
    return fixed


def _tokenizer(fields: dict[str, Any]) -> GGUFTokenizer | None:
    model = fields.get("tokenizer.ggml.model")
    if model is None:
        return None

    def strings(key: str) -> list[str]:
        return [str(s) for s in fields.get(key) or []]

    return GGUFTokenizer(
        model=str(model),
        tokens=strings("tokenizer.ggml.tokens"),
        token_types=[int(v) for v in fields.get("tokenizer.ggml.token_type") or []],
        merges=strings("tokenizer.ggml.merges"),
        bos_id=_int_or_none(fields.get("tokenizer.ggml.bos_token_id")),
        eos_id=_int_or_none(fields.get("tokenizer.ggml.eos_token_id")),
        add_bos=bool(fields.get("tokenizer.ggml.add_bos_token", False)),
        pre=fields.get("tokenizer.ggml.pre"),
        chat_template=fields.get("tokenizer.chat_template"),
    )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
