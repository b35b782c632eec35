"""Precision options: names users type, OpenVINO element types, numpy storage dtypes."""

from __future__ import annotations

import numpy as np
import openvino as ov

from compile_ahead.errors import CompileAheadError

from .options import PRECISIONS  # the names users type (defined where OpenVINO is not loaded)

OV_TYPES = {"f32": ov.Type.f32, "f16": ov.Type.f16, "bf16": ov.Type.bf16}
# numpy has no bfloat16: bf16 buffers hold raw uint16 bits.
STORAGE_DTYPES = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16),
}


def check_precision(value: str, what: str) -> str:
    if value not in PRECISIONS:
        raise CompileAheadError(f"{what} must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return value


def default_inference_precision(device: str) -> str:
    """What the device computes in when not told: the CPU plugin picks bf16 on AMX, f16 on NPU."""
    core = ov.Core()
    try:
        hint = core.get_property(device, "INFERENCE_PRECISION_HINT")
    except RuntimeError:
        return "f16"
    return next((name for name, t in OV_TYPES.items() if t == hint), "f16")


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even f32 -> bf16 bits."""
    u = np.ascontiguousarray(values, np.float32).view(np.uint32)
    rounded = u + 0x7FFF + ((u >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


def with_precisions(
    cfg: dict[str, object],
    inference_precision: str | None,
    kv_cache_precision: str | None,
    extra: dict[str, object] | None,
) -> dict[str, object]:
    """cfg with the inference and KV cache precision hints set (None leaves the device's
    default) and `extra` applied last."""
    if inference_precision is not None:
        cfg["INFERENCE_PRECISION_HINT"] = OV_TYPES[check_precision(inference_precision, "hint")]
    if kv_cache_precision is not None:
        cfg["KV_CACHE_PRECISION"] = OV_TYPES[check_precision(kv_cache_precision, "KV")]
    cfg.update(extra or {})
    return cfg
