"""Precision options: names users type, OpenVINO element types, numpy storage dtypes.

Importing this module does not load OpenVINO (profile-compile arms its collector first);
``OV_TYPES`` loads it on first use. It loads numpy: the command-line parsers take the names
from precision_names.py, which loads nothing.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.precision_names import PRECISIONS as PRECISIONS

if TYPE_CHECKING:
    import openvino as ov


@functools.cache
def _ov_types() -> dict[str, ov.Type]:
    import openvino as ov

    return {"f32": ov.Type.f32, "f16": ov.Type.f16, "bf16": ov.Type.bf16}


def __getattr__(name: str) -> Any:
    if name == "OV_TYPES":  # OpenVINO element types by precision name, made on first use
        return _ov_types()
    raise AttributeError(name)


# numpy has no bfloat16: bf16 buffers hold raw uint16 bits.
STORAGE_DTYPES: dict[str, np.dtype[Any]] = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16),
}


def check_precision(value: str, what: str) -> str:
    if value not in PRECISIONS:
        raise CompileAheadError(f"{what} must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return value


def default_inference_precision(device: str) -> str:
    """What the device computes in when not told: the CPU plugin picks bf16 where the CPU has
    bf16 instructions (AVX512_BF16 or AMX), else f32; the NPU computes in f16."""
    from compile_ahead.runtime.base.ov_core import core

    try:
        hint = core().get_property(device, "INFERENCE_PRECISION_HINT")
    except RuntimeError:
        return "f16"
    return next((name for name, t in _ov_types().items() if t == hint), "f16")


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
        cfg["INFERENCE_PRECISION_HINT"] = _ov_types()[check_precision(inference_precision, "hint")]
    if kv_cache_precision is not None:
        cfg["KV_CACHE_PRECISION"] = _ov_types()[check_precision(kv_cache_precision, "KV")]
    cfg.update(extra or {})
    return cfg
