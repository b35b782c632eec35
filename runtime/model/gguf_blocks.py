"""A GGUF's quantized weights as compressed graph constants, decompressed inside the graph.

Each block of 32 values is split on the host into what the CPU plugin's compressed-weight
kernels read, without dequantizing anything:

- Q8_0 (an f16 scale d, 32 int8 q): i8 [rows, blocks, 32] and the f16 scales [rows, blocks, 1];
  the graph computes d * q.
- Q4_0 (an f16 scale d, 32 4-bit q with an implicit zero point 8): u4 [rows, blocks, 32] and
  the scales; the graph computes d * (q - 8).
- Q4_1 (an f16 scale d, an f16 minimum m, 32 4-bit q): u4 and the scales, and the minimum as
  an f32 zero point z = -m / d, so the graph computes d * (q - z) = d * q + m. The plugin fuses
  a Subtract of a zero point into its kernel, not an Add of a minimum (an Add leaves the
  weight folded to f32 at compile time). A block with d = 0 is m everywhere: it is stored as
  q = 0, d = 1, z = -m, which gives m exactly.

The decompression (Convert -> Subtract -> Multiply -> Reshape, graphs/decoder.py's
``decompressed``) is the pattern the plugin fuses
into a FullyConnected over the compressed weight when a MatMul reads it, and into a
compressed Gather for an embedding lookup. The 4-bit nibbles are repacked: a GGUF block keeps
value j in the low nibble of byte j and value j + 16 in its high nibble; OpenVINO's u4 keeps
value 2i in the low nibble of byte i and value 2i + 1 in its high nibble.
"""

from __future__ import annotations

import numpy as np
import openvino as ov

from compile_ahead.runtime.model.weight_constants import BLOCK, CompressedWeight, owned_tensor

QUANTIZED = ("Q8_0", "Q4_0", "Q4_1")


def compress(kind: str, data: np.ndarray, shape: tuple[int, ...]) -> CompressedWeight:
    """The weight of type ``kind`` whose rows of blocks are ``data`` (uint8, as stored)."""
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    blocks = np.asarray(data, np.uint8).reshape(rows, shape[-1] // BLOCK, -1)
    scales = np.ascontiguousarray(blocks[..., :2]).view(np.float16)  # [rows, blocks, 1]
    grid = [rows, shape[-1] // BLOCK, BLOCK]
    if kind == "Q8_0":
        q8 = np.ascontiguousarray(blocks[..., 2:]).view(np.int8)
        return CompressedWeight(
            kind, shape, owned_tensor(ov.Type.i8, q8), owned_tensor(ov.Type.f16, scales), None
        )
    nibbles = blocks[..., 2:] if kind == "Q4_0" else blocks[..., 4:]
    q = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)  # [rows, blocks, 32]
    if kind == "Q4_0":
        zero = owned_tensor(ov.Type.u8, np.full((1, 1, 1), 8, np.uint8))
    else:
        minimum = np.ascontiguousarray(blocks[..., 2:4]).view(np.float16).astype(np.float32)
        d = scales.astype(np.float32)
        flat = d == 0
        if flat.any():  # every value is the minimum: q = 0, d = 1, z = -m
            q = np.where(flat, np.uint8(0), q)
            scales = np.where(flat, np.float16(1), scales)
            d = np.where(flat, np.float32(1), d)
        zero = owned_tensor(ov.Type.f32, (-minimum / d).astype(np.float32))
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    values = ov.Tensor(ov.Type.u4, grid)
    values.data.reshape(-1)[...] = packed.reshape(-1)
    return CompressedWeight(kind, shape, values, owned_tensor(ov.Type.f16, scales), zero)
