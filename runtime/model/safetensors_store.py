"""Memory-mapped safetensors checkpoints: each file's header parsed and checked (every tensor's
byte span against its dtype and shape), its tensors aliased in place, its identity kept from
when it was opened."""

from __future__ import annotations

import json
import math
import os
import struct
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.model.file_identity import file_identity, racy_change
from compile_ahead.runtime.model.weight_constants import (
    GraphConstants,
    MappedFile,
    MappedTensor,
)
from compile_ahead.runtime.model.weights import WeightStore, WeightTensor, weight_constant

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
                return weight_constant(self.get(name))
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
