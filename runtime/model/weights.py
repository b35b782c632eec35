"""Weight stores: memory-mapped safetensors checkpoints and seeded synthetic weights.

A store hands out each tensor as its raw storage array plus the OpenVINO element type, and a
graph's weight constants (``graph_constants``) that keep weights compressed (f16/bf16) and
alias the mapped file instead of copying it, owning what they alias (weight_constants.py).
"""

from __future__ import annotations

import json
import math
import os
import struct
import time
import weakref
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision import bf16_bits_to_f32, f32_to_bf16_bits
from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.model.weight_constants import (
    GraphConstants,
    MappedFile,
    MappedTensor,
    array_constant,
    owned_tensor,
)

# safetensors dtype -> (numpy storage dtype, OpenVINO element type). numpy has no bfloat16, so
# bf16 is stored as its raw uint16 bits and typed bf16 on the OpenVINO side.
_SAFETENSORS_DTYPES: dict[str, tuple[np.dtype, ov.Type]] = {
    "F32": (np.dtype(np.float32), ov.Type.f32),
    "F16": (np.dtype(np.float16), ov.Type.f16),
    "BF16": (np.dtype(np.uint16), ov.Type.bf16),
}
# Bytes per element of every dtype the safetensors format defines, to check each tensor's byte
# span against its shape even when we cannot load that dtype.
_SAFETENSORS_ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
    "U32": 4, "I32": 4, "F32": 4,
    "U64": 8, "I64": 8, "F64": 8,
}  # fmt: skip


@dataclass(frozen=True)
class WeightTensor:
    array: np.ndarray  # storage, C-contiguous; for bf16 the raw uint16 bits
    element_type: ov.Type
    owner: ov.Tensor | None = None  # OpenVINO memory ``array`` views, when it does

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def to_float32(self) -> np.ndarray:
        if self.element_type == ov.Type.bf16:
            return bf16_bits_to_f32(self.array)
        return self.array.astype(np.float32)

    def to_float32_rows(self, rows: np.ndarray) -> np.ndarray:
        picked = self.array[rows]
        if self.element_type == ov.Type.bf16:
            return bf16_bits_to_f32(picked)
        return picked.astype(np.float32)


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

    def graph_constants(self) -> GraphConstants:
        """One graph's weight constants by name: new nodes that own (a share of) the bytes
        they alias, so the graph, and anything compiled from it, keeps them alive whatever
        becomes of this store."""
        return lambda name: _constant(self.get(name))

    def load(self, name: str) -> None:
        """Have the tensor ready for graphs (mapped, or made into what its constants hold)."""
        self.get(name)

    def embedding_rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Rows of the table ``name`` in f32, as the graph's lookup decompresses them (an
        embedding lookup done on the host)."""
        return self.get(name).to_float32_rows(rows)

    def identity(self) -> dict[str, Any] | None:
        """What identifies these weight values (the compile cache's key); None: nothing does."""
        return None

    def unsettled(self) -> str | None:
        """Why the values may no longer be the ones ``identity`` names (the files changed since
        they were opened, or were written too shortly before to be told apart from a later
        write); None when they are. In-memory weights never change."""
        return None


def _constant(tensor: WeightTensor) -> ov.Node:
    return array_constant(tensor.array, tensor.element_type, tensor.owner)


def file_identity(path: Path, st: os.stat_result) -> dict[str, Any]:
    """A file as it was when opened. ctime and the inode cannot be set back by a user (mtime
    can, with ``touch -r``): a file rewritten in place or replaced gets another identity."""
    return {
        "path": str(path.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "inode": st.st_ino,
        "device": st.st_dev,
    }


# ctime comes from the kernel's coarse clock (one tick) and a file system's time granularity: a
# write within the tick of the last change leaves ctime as it was. A file opened later than this
# after its last change gets a new ctime from any later write.
_COARSE_TICK_NS = int(time.clock_getres(getattr(time, "CLOCK_REALTIME_COARSE", 0)) * 1e9)
_RACY_NS = max(2 * _COARSE_TICK_NS, 10_000_000)
_RACY_WHOLE_SECOND_NS = 2_000_000_000  # a file system that keeps whole seconds (or FAT's two)


def racy_change(path: Path, identity: dict[str, Any], opened_ns: int) -> str | None:
    """Why ``identity`` (taken at ``opened_ns``, time.time_ns) cannot tell the opened bytes
    from a write that followed in the same clock tick; None when it can."""
    ctime = identity["ctime_ns"]
    margin = _RACY_WHOLE_SECOND_NS if ctime % 1_000_000_000 == 0 else _RACY_NS
    if opened_ns - ctime < margin:
        return f"{path} was written just before it was opened (a later write could keep its ctime)"
    return None


def wait_until_settled(path: Path) -> None:
    """Return once a later write to ``path`` would change its ctime (``racy_change``), so that
    its file identity names its bytes: a clock tick or two after it was written (two seconds on
    a file system that keeps whole seconds)."""
    while racy_change(path, file_identity(path, os.stat(path)), time.time_ns()):
        time.sleep(0.005)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    fields = ("st_ino", "st_dev", "st_size", "st_mtime_ns", "st_ctime_ns")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def _read_safetensors_header(path: Path) -> tuple[int, int, dict[str, object]]:
    """Parse the safetensors header (8-byte length + JSON) without reading the tensors:
    (offset of the data section, file size, entries without ``__metadata__``).

    Done by hand because safetensors' numpy loader cannot represent bf16, and we need the
    byte offsets to memory-map each tensor in place.
    """
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            prefix = f.read(8)
            if len(prefix) != 8:
                raise CompileAheadError(f"{path}: truncated safetensors file (no header)")
            (length,) = struct.unpack("<Q", prefix)
            if length > 100_000_000:
                raise CompileAheadError(f"{path}: not a safetensors file (header length {length})")
            raw = f.read(length)
    except OSError as err:
        raise CompileAheadError(f"{path}: cannot read ({err.strerror})") from None
    if len(raw) != length:
        raise CompileAheadError(
            f"{path}: truncated safetensors file (header of {length} bytes, {len(raw)} present)"
        )
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CompileAheadError(f"{path}: corrupt safetensors header") from None
    if not isinstance(header, dict):
        raise CompileAheadError(
            f"{path}: corrupt safetensors header (a JSON {type(header).__name__}, not an object "
            "of tensors)"
        )
    header.pop("__metadata__", None)
    return 8 + length, size, header


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class _Entry:
    """Where one tensor lives: file, absolute byte span, dtype name and shape (checked)."""

    path: Path
    begin: int
    end: int
    dtype: str
    shape: tuple[int, ...]


def _parse_entry(path: Path, name: str, info: object, data_start: int, size: int) -> _Entry:
    """One header entry, checked against the format and the file before any byte is read."""
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict):
        raise CompileAheadError(f"{where}: header entry is a {type(info).__name__}, not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str):
        raise CompileAheadError(f"{where}: header entry has no dtype string")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise CompileAheadError(
            f"{where}: shape must be a list of non-negative integers, got {shape!r}"
        )
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_int, offsets))):
        raise CompileAheadError(
            f"{where}: data_offsets must be two integers [begin, end], got {offsets!r}"
        )
    begin, end = offsets
    available = size - data_start
    if not 0 <= begin <= end:
        raise CompileAheadError(f"{where}: data_offsets {offsets} must satisfy 0 <= begin <= end")
    if end > available:
        raise CompileAheadError(
            f"{where}: data_offsets end {end} is past the data section ({available} bytes; "
            "truncated file?)"
        )
    itemsize = _SAFETENSORS_ITEMSIZE.get(dtype)
    if itemsize is not None and (end - begin) != math.prod(shape) * itemsize:
        raise CompileAheadError(
            f"{where}: shape {shape} of {dtype} needs {math.prod(shape) * itemsize} bytes but "
            f"data_offsets span {end - begin}"
        )
    return _Entry(path, data_start + begin, data_start + end, dtype, tuple(shape))


class SafetensorsStore(WeightStore):
    """Tensors of one or more .safetensors files, memory-mapped read-only.

    Every header entry is checked when the store opens (a malformed file fails there, naming
    the file and tensor); tensors are mapped, not read. Graph constants come from OpenVINO's
    own mapping of each file (weight_constants.py), which they hold.
    """

    def __init__(self, files: list[Path]):
        self._index: dict[str, tuple[np.memmap, _Entry]] = {}
        self._mapped: dict[str, MappedFile] = {}  # tensor name -> its file as constants
        self._identity: list[dict[str, Any]] = []
        # Each mapped file's descriptor, kept open to see an in-place write (MAP_SHARED shows
        # the new bytes) by the file rather than by a path that may name another file now.
        # (closed when the store goes: weakref.finalize, without a ResourceWarning).
        self._opened: list[tuple[Path, int, os.stat_result, int]] = []
        for path in files:
            before = path.stat()
            data_start, size, header = _read_safetensors_header(path)
            entries = {
                name: _parse_entry(path, name, info, data_start, size)
                for name, info in header.items()
            }
            if not entries:
                continue
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            weakref.finalize(self, os.close, fd)
            opened_ns = time.time_ns()  # before the fstat: a lower bound of when it was read
            opened = os.fstat(fd)
            with open(fd, "rb", closefd=False) as f:
                mapped = np.memmap(f, dtype=np.uint8, mode="r")
            if not _same_file(before, opened):
                raise CompileAheadError(f"{path}: changed while being opened; try again")
            # Taken now, for the mapping in use: a file replaced or rewritten later is another
            # identity, while these weights stay the ones mapped here.
            self._identity.append(file_identity(path, opened))
            self._opened.append((path, fd, opened, opened_ns))
            for name, entry in entries.items():
                self._index[name] = (mapped, entry)
            self._map_constants(path, fd, entries)

    def _map_constants(self, path: Path, fd: int, entries: dict[str, _Entry]) -> None:
        tensors = [
            MappedTensor(name, _SAFETENSORS_DTYPES[e.dtype][1], e.shape, e.begin, e.end)
            for name, e in entries.items()
            if e.dtype in _SAFETENSORS_DTYPES and e.end > e.begin
        ]
        if tensors:
            as_constants = MappedFile(path, fd, tensors)  # read when a graph first needs it
            self._mapped |= {t.name: as_constants for t in tensors}

    def graph_constants(self) -> GraphConstants:
        clones: dict[int, dict[str, ov.Node]] = {}  # this graph's nodes, per file

        def constant(name: str) -> ov.Node:
            mapped = self._mapped.get(name)
            if mapped is None:  # no bytes to map, or a dtype ``get`` refuses with its reason
                return _constant(self.get(name))
            if id(mapped) not in clones:
                clones[id(mapped)] = mapped.clone()
            return clones[id(mapped)][name]

        return constant

    def names(self) -> Iterator[str]:
        return iter(self._index)

    def identity(self) -> dict[str, Any] | None:
        return {"files": self._identity}

    def unsettled(self) -> str | None:
        for (path, fd, opened, opened_ns), identity in zip(
            self._opened, self._identity, strict=True
        ):
            now = os.fstat(fd)
            if now.st_nlink == 0:
                return f"{path} was replaced or removed on disk since this run opened it"
            if not _same_file(opened, now):
                return f"{path} changed on disk since this run opened it"
            if reason := racy_change(path, identity, opened_ns):
                return reason
        return None

    def get(self, name: str) -> WeightTensor:
        try:
            mapped, entry = self._index[name]
        except KeyError:
            raise CompileAheadError(f"checkpoint has no tensor {name!r}") from None
        if entry.dtype not in _SAFETENSORS_DTYPES:
            raise CompileAheadError(
                f"{entry.path}: tensor {name!r} has unsupported dtype {entry.dtype}; supported: "
                f"{', '.join(_SAFETENSORS_DTYPES)}"
            )
        np_dtype, ov_type = _SAFETENSORS_DTYPES[entry.dtype]
        array = mapped[entry.begin : entry.end].view(np_dtype).reshape(entry.shape)
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
    """Seeded random weights of a model's exact shapes (never a real model), stored as f16 by
    default; ``dtype`` "bf16" or "f32" stores the same draws at that precision.

    Each tensor is drawn from its own generator seeded by (seed, crc32(name)), so a tensor's
    values do not depend on which others were drawn before it. With ``zeros=True`` every tensor
    is zero-filled lazily (pages never touched), for graph-structure work on huge presets.
    """

    DTYPES = ("f16", "bf16", "f32")

    def __init__(self, cfg: ModelConfig, seed: int = 0, zeros: bool = False, dtype: str = "f16"):
        if dtype not in self.DTYPES:
            raise CompileAheadError(
                f"synthetic weights dtype must be one of {', '.join(self.DTYPES)}, got {dtype!r}"
            )
        self._shapes = expected_shapes(cfg)
        self._seed = seed
        self._zeros = zeros
        self._dtype = dtype
        self._cache: dict[str, WeightTensor] = {}

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def zeros(self) -> bool:
        return self._zeros

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]

    def names(self) -> Iterator[str]:
        return iter(self._shapes)

    def identity(self) -> dict[str, Any] | None:
        drawn = {"seed": self._seed, "dtype": self._dtype}
        return {"synthetic_in_memory": drawn} | ({"zeros": True} if self._zeros else {})

    def get(self, name: str) -> WeightTensor:
        if name not in self._cache:
            drawn = self.draw(name)
            if drawn.element_type == ov.Type.bf16:
                # numpy cannot type bf16 for a constant to own: the bits move to OpenVINO
                # memory once, which every graph's constants then share.
                owner = owned_tensor(drawn.element_type, drawn.array)
                drawn = WeightTensor(owner.data.view(np.uint16), drawn.element_type, owner)
            self._cache[name] = drawn
        return self._cache[name]

    def draw(self, name: str) -> WeightTensor:
        """The tensor's values, made afresh and not kept (for streaming them to a file)."""
        shape = self._shapes[name]
        if self._zeros:
            return WeightTensor(np.zeros(shape, np.float16), ov.Type.f16)
        rng = np.random.default_rng([self._seed, zlib.crc32(name.encode())])
        if name.endswith("norm.weight"):
            values = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        else:
            values = 0.02 * rng.standard_normal(shape, dtype=np.float32)
        if self._dtype == "f32":
            return WeightTensor(values, ov.Type.f32)
        if self._dtype == "bf16":
            return WeightTensor(f32_to_bf16_bits(values), ov.Type.bf16)
        return WeightTensor(values.astype(np.float16), ov.Type.f16)


def check_weights(store: WeightStore, cfg: ModelConfig, source: str) -> None:
    """Every tensor the graphs need is present with the right shape, or a clear error."""
    present = set(store.names())
    for name, shape in expected_shapes(cfg).items():
        if name not in present:
            raise CompileAheadError(f"{source}: weight {name!r} is missing")
        tensor = store.get(name)  # an unsupported dtype says so, naming file and tensor
        if tensor.shape != shape:
            raise CompileAheadError(
                f"{source}: weight {name!r} has shape {list(tensor.shape)}, expected {list(shape)}"
            )
