"""Weight constants that own the bytes they point at.

A graph's weight constants alias their storage (a checkpoint stays memory-mapped and
compressed), and the CPU plugin's compiled models alias them in turn (bf16 and f16 weights are
used in place). So each constant must hold its storage itself, in OpenVINO's C++ objects:
a Python reference beside the graph (on the source, or on an ov.Model wrapper) is lost as soon
as the caller drops it, and the next inference reads unmapped memory.

What OpenVINO 2026.4's Python API offers for that, checked by experiment:
- ``ov.op.Constant(array, shared_memory=True)`` holds the numpy array in C++ for as long as
  the constant, or anything compiled from it, lives. numpy has no bfloat16, so this serves
  f16 and f32 only (an array of ml_dtypes' bfloat16 is refused: "Unsupported data type");
- ``ov.op.Constant(ov.Tensor(...))`` holds the C++ tensor, which owns its memory only when
  OpenVINO allocated it (a tensor over a numpy array does not keep the array), and
  ``ov.tensor_from_file`` reads a file into such memory as u8 (a copy, one element type);
- ``Core.read_model`` of an IR maps its weights file itself, and every constant read from it
  holds that mapping. A checkpoint's tensors are therefore read as an IR whose weights file
  is the safetensors file: a few hundred Const layers at the tensors' byte offsets, mapped
  once per file by OpenVINO, any element type. The read (OpenVINO's IR reader) costs in
  proportion to the tensor count, once per file and process: the one thing a graph's
  ownership of its weights adds to a cold start.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError

BLOCK = 32  # values per block of a compressed weight (each block has its own scale)


@dataclass(frozen=True)
class CompressedWeight:
    """One quantized weight as OpenVINO memory: ``values`` (i8 or u4, [rows, blocks, 32]),
    ``scales`` (f16, [rows, blocks, 1]) and ``zero_points`` (Q4_0: u8 8; Q4_1: f32
    [rows, blocks, 1]; Q8_0: none); ``shape`` the weight's own ([out, in])."""

    kind: str  # Q8_0, Q4_0 or Q4_1 (values per block: BLOCK)
    shape: tuple[int, ...]
    values: ov.Tensor
    scales: ov.Tensor
    zero_points: ov.Tensor | None

    def rows_f32(self, rows: np.ndarray) -> np.ndarray:
        """Rows of the weight in f32, computed as the graph computes them (an embedding
        lookup done on the host: only the rows asked for)."""
        grid = [len(rows), self.shape[-1] // BLOCK, BLOCK]
        q = _unpack(self.values, self.kind)[rows].reshape(grid).astype(np.float32)
        d = self.scales.data.view(np.float16)[rows].astype(np.float32)  # [n, blocks, 1]
        if self.kind == "Q4_0":
            q = q - np.float32(8)
        elif self.kind == "Q4_1":
            assert self.zero_points is not None
            q = q - self.zero_points.data[rows]
        return (q * d).reshape(len(rows), *self.shape[1:])


def _unpack(values: ov.Tensor, kind: str) -> np.ndarray:
    """The quantized values [rows, in] as integers (i8, or the u4 nibbles as uint8)."""
    shape = list(values.get_shape())
    if kind == "Q8_0":
        return values.data.view(np.int8).reshape(shape[0], -1)
    packed = values.data.view(np.uint8).reshape(shape[0], -1)
    q = np.empty((shape[0], packed.shape[1] * 2), np.uint8)
    q[:, 0::2], q[:, 1::2] = packed & 0x0F, packed >> 4
    return q


# One graph's weight constants, by tensor name: a constant node, or a compressed weight that
# the graph decompresses (graphs/decoder.py).
GraphConstants = Callable[[str], "ov.Node | CompressedWeight"]


def owned_tensor(element_type: ov.Type, values: np.ndarray) -> ov.Tensor:
    """``values`` (storage: bf16 as raw uint16 bits) copied into memory OpenVINO allocated,
    which the tensor, and every constant made from it, owns."""
    tensor = ov.Tensor(element_type, list(values.shape))
    if values.size:
        # A bf16 tensor's data is its bits typed float16: reinterpreted, never converted.
        tensor.data.view(values.dtype)[...] = values
    return tensor


def array_constant(
    array: np.ndarray, element_type: ov.Type, owner: ov.Tensor | None = None
) -> ov.Node:
    """A new constant of ``array`` (its storage, typed ``element_type``) that owns it:
    ``owner`` (OpenVINO memory the array views) when given, else the array itself where
    numpy can type it (and it is writeable, as OpenVINO requires to share it), else a copy in
    OpenVINO memory (bf16 bits without an owner, a read-only array)."""
    if owner is not None:
        return ov.op.Constant(owner)
    array = np.ascontiguousarray(array)
    if ov.Type(array.dtype) == element_type and array.flags.writeable:
        return ov.op.Constant(array, shared_memory=True)
    return ov.op.Constant(owned_tensor(element_type, array))


@dataclass(frozen=True)
class MappedTensor:
    """One tensor of a weights file: its name, element type, shape and absolute byte span."""

    name: str
    element_type: ov.Type
    shape: tuple[int, ...]
    begin: int
    end: int


def _precision(element_type: ov.Type) -> str:
    return {"bf16": "BF16", "f16": "FP16", "f32": "FP32"}[element_type.get_type_name()]


def _ir_xml(tensors: Sequence[MappedTensor]) -> str:
    """An IR of one Const layer (and its Result) per tensor, at the tensor's offset in the
    weights file."""
    layers, edges = [], []
    for i, t in enumerate(tensors):
        dims = "".join(f"<dim>{d}</dim>" for d in t.shape)
        port = f'<port id="0" precision="{_precision(t.element_type)}">{dims}</port>'
        data = (
            f'element_type="{t.element_type.get_type_name()}" '
            f'shape="{",".join(map(str, t.shape))}" offset="{t.begin}" size="{t.end - t.begin}"'
        )
        layers.append(
            f'<layer id="{2 * i}" name={quoteattr(t.name)} type="Const" version="opset1">'
            f"<data {data}/><output>{port}</output></layer>"
            f'<layer id="{2 * i + 1}" name="result{i}" type="Result" version="opset1">'
            f"<input>{port}</input></layer>"
        )
        edges.append(
            f'<edge from-layer="{2 * i}" from-port="0" to-layer="{2 * i + 1}" to-port="0"/>'
        )
    return (
        '<?xml version="1.0"?><net name="weights" version="11">'
        f"<layers>{''.join(layers)}</layers><edges>{''.join(edges)}</edges></net>"
    )


def _fd_path(fd: int, path: Path) -> str:
    """A name that opens the very file behind ``fd`` where the system has one (a path may
    name another file by now), else ``path``."""
    for proc in (f"/proc/self/fd/{fd}", f"/dev/fd/{fd}"):
        if os.path.exists(proc):
            return proc
    return str(path)


def read_mapped(path: Path, fd: int, tensors: Sequence[MappedTensor]) -> ov.Model:
    """The tensors of the open weights file ``fd`` (named ``path``) as constants of one
    model, each holding OpenVINO's own mapping of the file."""
    from compile_ahead.runtime.base.ov_core import core, openvino_error_summary

    weights = _fd_path(fd, path)
    try:
        with tempfile.TemporaryDirectory(prefix="compile-ahead-weights-") as tmp:
            xml = Path(tmp) / "weights.xml"
            xml.write_text(_ir_xml(tensors))
            model = core().read_model(str(xml), weights)
    except OSError as err:  # the IR is read from a file: the temporary directory must work
        raise CompileAheadError(
            f"{path}: cannot map its tensors: a temporary file cannot be written "
            f"({err.strerror or err})"
        ) from None
    except RuntimeError as err:
        raise CompileAheadError(
            f"{path}: OpenVINO cannot map its tensors: {openvino_error_summary(err)}"
        ) from None
    opened = os.fstat(fd)
    try:
        read = os.stat(weights)
    except OSError:
        read = None
    if read is None or (opened.st_ino, opened.st_dev) != (read.st_ino, read.st_dev):
        raise CompileAheadError(f"{path}: replaced on disk while being opened; run again")
    return model


class MappedFile:
    """One weights file's tensors, read once as OpenVINO constants (``read_mapped``); each
    graph gets its own copies of the nodes (``graph_constants``), which share the mapping."""

    def __init__(self, path: Path, fd: int, tensors: Sequence[MappedTensor]):
        self.path, self.fd, self.tensors = path, fd, tuple(tensors)
        self._model: ov.Model | None = None
        self._lock = threading.Lock()

    def clone(self) -> dict[str, ov.Node]:
        """New constant nodes of every tensor, by name (a clone shares the mapped bytes)."""
        with self._lock:  # graphs may be built on several threads
            if self._model is None:
                self._model = read_mapped(self.path, self.fd, self.tensors)
            copy = self._model.clone()
        return {
            op.get_friendly_name(): op for op in copy.get_ops() if op.get_type_name() == "Constant"
        }
