"""Weight stores: memory-mapped safetensors checkpoints and seeded synthetic weights.

A store hands out each tensor as its raw storage array plus the OpenVINO element type, so the
graph can keep weights compressed (f16/bf16) and alias the mapped file instead of copying it.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError

from .config import ModelConfig
from .precision import bf16_bits_to_f32

# safetensors dtype -> (numpy storage dtype, OpenVINO element type). numpy has no bfloat16, so
# bf16 is stored as its raw uint16 bits and typed bf16 on the OpenVINO side.
_SAFETENSORS_DTYPES: dict[str, tuple[np.dtype, ov.Type]] = {
    "F32": (np.dtype(np.float32), ov.Type.f32),
    "F16": (np.dtype(np.float16), ov.Type.f16),
    "BF16": (np.dtype(np.uint16), ov.Type.bf16),
}


@dataclass(frozen=True)
class WeightTensor:
    array: np.ndarray  # storage, C-contiguous; for bf16 the raw uint16 bits
    element_type: ov.Type

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def to_float32(self) -> np.ndarray:
        if self.element_type == ov.Type.bf16:
            return bf16_bits_to_f32(self.array)
        return self.array.astype(np.float32)


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the graphs read, with its Hugging Face name and shape."""
    d, hd = cfg.hidden_size, cfg.head_dim
    q_out, kv_out = cfg.num_heads * hd, cfg.num_kv_heads * hd
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (cfg.vocab_size, d),
        "model.norm.weight": (d,),
    }
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, d)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q_out, d),
            p + "self_attn.k_proj.weight": (kv_out, d),
            p + "self_attn.v_proj.weight": (kv_out, d),
            p + "self_attn.o_proj.weight": (d, q_out),
            p + "mlp.gate_proj.weight": (cfg.intermediate_size, d),
            p + "mlp.up_proj.weight": (cfg.intermediate_size, d),
            p + "mlp.down_proj.weight": (d, cfg.intermediate_size),
        }
        if cfg.attention_bias:
            shapes |= {
                p + "self_attn.q_proj.bias": (q_out,),
                p + "self_attn.k_proj.bias": (kv_out,),
                p + "self_attn.v_proj.bias": (kv_out,),
            }
    return shapes


class WeightStore:
    """Name -> WeightTensor for one model; subclasses say where the bytes come from."""

    def get(self, name: str) -> WeightTensor:
        raise NotImplementedError

    def names(self) -> Iterator[str]:
        raise NotImplementedError


def _read_safetensors_header(path: Path) -> tuple[int, dict]:
    """Parse the safetensors header (8-byte length + JSON) without reading the tensors.

    Done by hand because safetensors' numpy loader cannot represent bf16, and we need the
    byte offsets to memory-map each tensor in place.
    """
    try:
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) != 8:
                raise CompileAheadError(f"{path}: truncated safetensors file (no header)")
            (length,) = struct.unpack("<Q", prefix)
            if length > 100_000_000:
                raise CompileAheadError(f"{path}: not a safetensors file (header length {length})")
            header = json.loads(f.read(length))
    except OSError as err:
        raise CompileAheadError(f"{path}: cannot read ({err.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CompileAheadError(f"{path}: corrupt safetensors header") from None
    header.pop("__metadata__", None)
    return 8 + length, header


class SafetensorsStore(WeightStore):
    """Tensors of one or more .safetensors files, memory-mapped read-only."""

    def __init__(self, files: list[Path]):
        self._index: dict[str, tuple[np.memmap, int, dict]] = {}
        for path in files:
            data_start, header = _read_safetensors_header(path)
            size = path.stat().st_size
            mapped = np.memmap(path, dtype=np.uint8, mode="r") if size else None
            for name, info in header.items():
                end = info["data_offsets"][1]
                if mapped is None or data_start + end > size:
                    raise CompileAheadError(f"{path}: truncated file, tensor {name!r} is cut off")
                self._index[name] = (mapped, data_start, info)

    def names(self) -> Iterator[str]:
        return iter(self._index)

    def get(self, name: str) -> WeightTensor:
        try:
            mapped, data_start, info = self._index[name]
        except KeyError:
            raise CompileAheadError(f"checkpoint has no tensor {name!r}") from None
        dtype_name = info["dtype"]
        if dtype_name not in _SAFETENSORS_DTYPES:
            raise CompileAheadError(
                f"tensor {name!r} has dtype {dtype_name}; supported: "
                f"{', '.join(_SAFETENSORS_DTYPES)}"
            )
        np_dtype, ov_type = _SAFETENSORS_DTYPES[dtype_name]
        begin, end = info["data_offsets"]
        raw = mapped[data_start + begin : data_start + end]
        array = raw.view(np_dtype).reshape(info["shape"])
        return WeightTensor(array, ov_type)


def checkpoint_files(model_dir: Path) -> list[Path]:
    """The safetensors files of a checkpoint directory, single file or sharded with an index."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, json.JSONDecodeError, KeyError) as err:
            raise CompileAheadError(f"{index}: unreadable shard index ({err})") from None
        files = [model_dir / f for f in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.exists()]
        if missing:
            raise CompileAheadError(f"{model_dir}: shard files missing: {', '.join(missing)}")
        return files
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise CompileAheadError(f"{model_dir}: no *.safetensors weights in the model directory")
    return files


class SyntheticStore(WeightStore):
    """Seeded random weights of a model's exact shapes, stored as f16 (never a real model).

    Each tensor is drawn from its own generator seeded by (seed, crc32(name)), so a tensor's
    values do not depend on which others were drawn before it. With ``zeros=True`` every tensor
    is zero-filled lazily (pages never touched), for graph-structure work on huge presets.
    """

    def __init__(self, cfg: ModelConfig, seed: int = 0, zeros: bool = False):
        self._shapes = expected_shapes(cfg)
        self._seed = seed
        self._zeros = zeros
        self._cache: dict[str, WeightTensor] = {}

    def names(self) -> Iterator[str]:
        return iter(self._shapes)

    def get(self, name: str) -> WeightTensor:
        if name not in self._cache:
            self._cache[name] = self._make(name)
        return self._cache[name]

    def _make(self, name: str) -> WeightTensor:
        shape = self._shapes[name]
        if self._zeros:
            return WeightTensor(np.zeros(shape, np.float16), ov.Type.f16)
        rng = np.random.default_rng([self._seed, zlib.crc32(name.encode())])
        if name.endswith("norm.weight"):
            values = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        else:
            values = 0.02 * rng.standard_normal(shape, dtype=np.float32)
        return WeightTensor(values.astype(np.float16), ov.Type.f16)


def check_weights(store: WeightStore, cfg: ModelConfig, source: str) -> None:
    """Every tensor the graphs need is present with the right shape, or a clear error."""
    for name, shape in expected_shapes(cfg).items():
        try:
            tensor = store.get(name)
        except CompileAheadError:
            raise CompileAheadError(f"{source}: weight {name!r} is missing") from None
        if tensor.shape != shape:
            raise CompileAheadError(
                f"{source}: weight {name!r} has shape {list(tensor.shape)}, expected {list(shape)}"
            )
