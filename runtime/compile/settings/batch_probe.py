"""Whether a device compiles a graph that is static in a batch of B sequences, asked before a
batched run compiles any rung.

A static-shape device compiles every shape it is given, B included, and a device may take only
one sequence per graph, or only some B. The probe asks the device itself: a graph with a batch
dimension of B (a Parameter [B, 1] through a MatMul and an Add) compiled with the run's device
properties, once per (device, properties, B) and process. It costs one tiny compile (a few
milliseconds on a CPU); a device that refuses it is refused in one line carrying its reason,
before any rung or output exists. A device OpenVINO cannot compile for at all is refused
earlier (properties.check_device_compiles).
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.ov_core import core, openvino_error_summary
from compile_ahead.runtime.compile.settings.options import CompileOptions, device_config


def batch_probe_model(batch: int) -> ov.Model:
    """x [B, 1] -> x @ w + b: the smallest graph that is static in a batch of ``batch``."""
    x = ops.parameter([batch, 1], ov.Type.f32, name="x")
    y = ops.matmul(x, ops.constant(np.ones((1, 1), np.float32)), False, False)
    y = ops.add(y, ops.constant(np.zeros((1, 1), np.float32)))
    return ov.Model([ops.result(y)], [x], f"batch_probe_N{batch}")


# (device, its properties as text, B) -> the device's refusal, or None: asked once a process.
_ASKED: dict[tuple[str, str, int], str | None] = {}


def _batch_error(device: str, config: dict[str, object], batch: int) -> str | None:
    key = (device, repr(sorted((k, str(v)) for k, v in config.items())), batch)
    if key not in _ASKED:
        try:
            core().compile_model(batch_probe_model(batch), device, config)
            _ASKED[key] = None
        except RuntimeError as err:
            _ASKED[key] = openvino_error_summary(err)
    return _ASKED[key]


def check_batch_compiles(options: CompileOptions, batch: int) -> None:
    """Refuse, before any rung is compiled, a batch of ``batch`` sequences on a device that
    does not compile a graph with that batch dimension (with the device's own reason)."""
    if batch == 1:
        return
    try:
        config = device_config(options)
    except RuntimeError as err:  # no such device (the commands refuse it before this)
        summary = openvino_error_summary(err)
        raise CompileAheadError(f"--device {options.device}: {summary}") from None
    error = _batch_error(options.device, config, batch)
    if error is not None:
        raise CompileAheadError(
            f"--batch {batch}: {options.device} cannot compile a graph of {batch} sequences "
            f"here: {error}; run one sequence per process (no --batch) on this device"
        )
