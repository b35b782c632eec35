"""A GGUF file's layout, read in one pass over its header: the metadata (every key's value: a
number, a string, or an array of them) and each tensor's name, dimensions, GGML type and the
bytes it starts at.

The `gguf` package's reader makes a numpy view of every value it parses, which for a
tokenizer's tens of thousands of strings takes seconds; this reads the header as bytes,
strings one by one and numeric arrays whole. The format (version 2 and 3, little-endian):
the magic, the version, the tensor and key counts, the keys (each a string, a value type and a
value; an array is an element type, a count and the elements), the tensor infos (a name, the
dimension count, the dimensions fastest first, the type, the offset into the data), then the
data, aligned to ``general.alignment`` (32 unless given).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# value type id -> (struct format, numpy dtype) for the fixed-size ones
_FIXED: dict[int, tuple[str, str]] = {
    0: ("<B", "<u1"),
    1: ("<b", "<i1"),
    2: ("<H", "<u2"),
    3: ("<h", "<i2"),
    4: ("<I", "<u4"),
    5: ("<i", "<i4"),
    6: ("<f", "<f4"),
    7: ("<?", "<u1"),  # bool
    10: ("<Q", "<u8"),
    11: ("<q", "<i8"),
    12: ("<d", "<f8"),
}
_STRING, _ARRAY, _BOOL = 8, 9, 7
DEFAULT_ALIGNMENT = 32


class LayoutError(ValueError):
    """The header is cut short or does not parse (said in one line by the caller)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # fastest first, as the file lists them
    type_id: int  # a GGML type id
    start: int  # the byte of the file its data starts at


@dataclass(frozen=True)
class GGUFLayout:
    version: int
    fields: dict[str, Any]  # a number, a string, or a list of them
    tensors: list[TensorInfo]
    data_start: int
    alignment: int


class _Cursor:
    def __init__(self, buf: mmap.mmap) -> None:
        self.buf, self.at = buf, 0

    def unpack(self, fmt: str) -> Any:
        try:
            (value,) = struct.unpack_from(fmt, self.buf, self.at)
        except struct.error:
            raise LayoutError(f"the header ends at byte {self.at}") from None
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        end = self.at + n
        if end > len(self.buf):
            raise LayoutError(f"a string of {n} bytes at byte {self.at} runs past the end")
        raw = self.buf[self.at : end]
        self.at = end
        return raw.decode("utf-8", errors="replace")

    def value(self, kind: int) -> Any:
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            return self.array()
        if kind not in _FIXED:
            raise LayoutError(f"unknown value type {kind} at byte {self.at}")
        return self.unpack(_FIXED[kind][0])  # a bool's "<?" gives a bool

    def array(self) -> list[Any]:
        kind, n = self.unpack("<I"), self.unpack("<Q")
        if kind in _FIXED:
            dtype = np.dtype(_FIXED[kind][1])
            end = self.at + n * dtype.itemsize
            if end > len(self.buf):
                raise LayoutError(f"an array of {n} values at byte {self.at} runs past the end")
            values = np.frombuffer(self.buf, dtype, n, self.at)
            self.at = end
            return [bool(v) for v in values] if kind == _BOOL else values.tolist()
        if n > len(self.buf) - self.at:  # every element takes at least a byte
            raise LayoutError(f"an array of {n} values at byte {self.at} runs past the end")
        return [self.value(kind) for _ in range(n)]


def read_layout(path: Path) -> GGUFLayout:
    """The header of the GGUF file ``path`` (whose magic the caller has checked)."""
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf)
        cur.at = 4  # the magic
        version = cur.unpack("<I")
        if version not in (2, 3):
            raise LayoutError(f"GGUF version {version} (versions 2 and 3 are read)")
        n_tensors, n_fields = cur.unpack("<Q"), cur.unpack("<Q")
        fields: dict[str, Any] = {}
        for _ in range(n_fields):
            key = cur.string()
            if key in fields:
                raise LayoutError(f"the metadata key {key} appears twice")
            fields[key] = cur.value(cur.unpack("<I"))
        infos = []
        for _ in range(n_tensors):
            name = cur.string()
            dims = tuple(int(cur.unpack("<Q")) for _ in range(cur.unpack("<I")))
            infos.append((name, dims, cur.unpack("<I"), cur.unpack("<Q")))
        alignment = int(fields.get("general.alignment", DEFAULT_ALIGNMENT)) or DEFAULT_ALIGNMENT
        data_start = -(-cur.at // alignment) * alignment
    names = [i[0] for i in infos]
    if len(set(names)) != len(names):
        raise LayoutError("a tensor name appears twice")
    tensors = [TensorInfo(n, d, t, data_start + off) for n, d, t, off in infos]
    return GGUFLayout(version, fields, tensors, data_start, alignment)
