"""The plain-CPU baseline: the stateful model (runtime/graphs/stateful.py) on the CPU plugin with
dynamic shapes and its fused stateful attention, configured as a chat app would (LATENCY)."""

from __future__ import annotations

from compile_ahead.runtime.base.precision import with_precisions
from compile_ahead.runtime.baselines.stateful_runner import StatefulRunner
from compile_ahead.runtime.sources.base import ModelSource


def cpu_config(
    inference_precision: str | None = None,
    kv_cache_precision: str | None = None,
    extra: dict[str, object] | None = None,
) -> dict[str, object]:
    """compile_model properties for the plain-CPU dynamic-shape run (LATENCY, as a chat app)."""
    return with_precisions(
        {"PERFORMANCE_HINT": "LATENCY"}, inference_precision, kv_cache_precision, extra
    )


def compile_dynamic_cpu(
    source: ModelSource,
    inference_precision: str | None = None,
    kv_cache_precision: str | None = None,
    extra: dict[str, object] | None = None,
    via_ir: bool = True,
) -> StatefulRunner:
    """The stateful model on the CPU plugin, dynamic shapes, fused stateful attention.

    kv_cache_precision None keeps the plugin's default cache precision (which may be a
    quantized one such as u8); pass "bf16" to compare with graphs whose KV is bf16, "f32" for
    exact checks.
    """
    cfg = cpu_config(inference_precision, kv_cache_precision, extra)
    return StatefulRunner("cpu-dynamic", source, "CPU", cfg, via_ir=via_ir)
