"""How a graph is compiled: the device, precisions, extra OpenVINO properties and the compile
cache; and the device config they make."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.base.ov_core import core
from compile_ahead.runtime.base.precision import (
    OV_TYPES,
    PRECISIONS,
    check_precision,
    default_inference_precision,
)
from compile_ahead.runtime.compile.settings.device_defaults import decode_properties

if TYPE_CHECKING:
    from compile_ahead.runtime.compile.cache.store import CompileCache


@dataclass(frozen=True)
class CompileOptions:
    device: str = "CPU"
    inference_precision: str | None = None  # None: the device's default
    kv_precision: str | None = None  # None: follow the inference precision (a mismatch
    # makes the CPU plugin reorder the whole cache input every step)
    extra_config: dict[str, str] = field(default_factory=dict)
    # Compiled graphs kept across runs (compile_cache.cache_from_flags); None compiles all.
    cache: CompileCache | None = field(default=None, compare=False)
    # Set by resolved(): the precisions are settled and checked, nothing is checked again.
    settled: bool = field(default=False, compare=False, repr=False)

    def resolved(self) -> CompileOptions:
        """The device's default precisions applied and the user's checked (once: resolved
        options are returned as they are)."""
        if self.settled:
            return self
        inf = self.inference_precision or _hint_in(self.extra_config)
        if self.inference_precision and _hint_in(self.extra_config) not in (None, inf):
            raise CompileAheadError(
                f"--inference-precision {inf} and INFERENCE_PRECISION_HINT="
                f"{self.extra_config['INFERENCE_PRECISION_HINT']} disagree; give one"
            )
        inf = inf or default_inference_precision(self.device)
        check_precision(inf, "--inference-precision")
        kv = check_precision(self.kv_precision or inf, "--kv-precision")
        return replace(
            self,
            inference_precision=inf,
            kv_precision=kv,
            extra_config=dict(self.extra_config),
            settled=True,
        )

    def graph_defaults(self, kind: str) -> dict[str, str]:
        """The properties a graph of ``kind`` (GraphSpec.kind) gets beside the user's: for a
        decode graph, the device's measured decode properties (device_defaults.py) that this
        OpenVINO accepts and the user did not set."""
        if kind != "decode":
            return {}
        return {
            key: value
            for key, value in decode_properties(self.device).items()
            if key not in self.extra_config and device_refusal(self.device, key, value) is None
        }

    def for_graph(self, kind: str) -> CompileOptions:
        """These options for a graph of ``kind``, its graph_defaults added."""
        defaults = self.graph_defaults(kind)
        if not defaults:
            return self
        return replace(self, extra_config={**defaults, **self.extra_config})


@functools.cache
def device_refusal(device: str, key: str, value: str) -> str | None:
    """Why ``device`` does not take ``key=value`` (one line), or None if it does. For
    properties a device takes without listing them in SUPPORTED_PROPERTIES (property_facts
    asks a fresh Core), once per process."""
    from compile_ahead.runtime.compile.settings.property_facts import refusal

    return refusal(device, {key: value})


def _hint_in(extra_config: dict[str, str]) -> str | None:
    """The inference precision a user property sets (the reports and the KV precision follow
    it), or None."""
    hint = extra_config.get("INFERENCE_PRECISION_HINT")
    return str(hint).lower() if hint is not None and str(hint).lower() in PRECISIONS else None


DYNAMIC_QUANTIZATION = "DYNAMIC_QUANTIZATION_GROUP_SIZE"


def device_config(options: CompileOptions) -> dict[str, object]:
    cfg: dict[str, object] = dict(options.extra_config)
    supported = core().get_property(options.device, "SUPPORTED_PROPERTIES")
    if "INFERENCE_PRECISION_HINT" in supported and options.inference_precision:
        cfg.setdefault("INFERENCE_PRECISION_HINT", OV_TYPES[options.inference_precision])
    if options.inference_precision == "f32" and DYNAMIC_QUANTIZATION in supported:
        # At f32 the graphs compute what the reference computes: the CPU plugin's kernels
        # over compressed (u8/u4) weights otherwise quantize the activations to 8 bits per
        # group of this size. Weights in f32/f16/bf16 are not affected.
        cfg.setdefault(DYNAMIC_QUANTIZATION, 0)
    if "PERFORMANCE_HINT" in supported:
        cfg.setdefault("PERFORMANCE_HINT", "LATENCY")
    return cfg
