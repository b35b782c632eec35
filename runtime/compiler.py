"""Compile step graphs for a device, with the precision options applied and time measured."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import openvino as ov

from compile_ahead.errors import CompileAheadError

from . import graphs
from .precision import OV_TYPES, check_precision, default_inference_precision
from .sources import ModelSource
from .step import CompiledStep

if TYPE_CHECKING:
    from .compile_cache import CompileCache


@dataclass(frozen=True)
class CompileOptions:
    device: str = "CPU"
    inference_precision: str | None = None  # None: the device's default
    kv_precision: str | None = None  # None: follow the inference precision (a mismatch
    # makes the CPU plugin reorder the whole cache input every step)
    extra_config: dict[str, str] = field(default_factory=dict)
    # Compiled graphs kept across runs (compile_cache.cache_from_flags); None compiles all.
    cache: CompileCache | None = field(default=None, compare=False)

    def resolved(self) -> CompileOptions:
        inf = self.inference_precision or default_inference_precision(self.device)
        check_precision(inf, "--inference-precision")
        kv = check_precision(self.kv_precision or inf, "--kv-precision")
        return replace(
            self, inference_precision=inf, kv_precision=kv, extra_config=dict(self.extra_config)
        )


_core: ov.Core | None = None


# Where OpenVINO says an error was raised ("Exception from src/...:NN:", "Check 'x' failed at
# src/...:NN:"); it may start a line or follow a message ("... Error: Exception from ...").
_OV_LOCATION = re.compile(r"(?:Exception from|Check '.*?' failed at) \S+:\d+:\s*")
# "Cannot load library "P": P: reason" names the path twice.
_OV_REPEATED_PATH = re.compile(r'"([^"]+)": \1: ')
_OV_SUMMARY_MAX = 600


def openvino_error_summary(err: BaseException) -> str:
    """An OpenVINO exception as one line that keeps its reason.

    OpenVINO nests messages under source locations, one per line; a line such as "VCL compiler
    loading failed, aborting. Error:" or "Check 'ptr' failed at ...:" is not the reason, the
    text after it is. So the locations are dropped and what remains is joined in order.
    """
    parts: list[str] = []
    for line in str(err).splitlines():
        text = _OV_LOCATION.sub("", line).strip()
        if text and (not parts or parts[-1] != text):
            parts.append(text)
    if not parts:
        return (str(err).strip().splitlines() or [repr(err)])[0]
    summary = parts[0]
    for text in parts[1:]:
        summary += (" " if summary.endswith(":") else ": ") + text
    summary = _OV_REPEATED_PATH.sub(r'"\1": ', summary)
    if summary == "std::bad_alloc":
        summary = "out of memory (std::bad_alloc)"
    if len(summary) > _OV_SUMMARY_MAX:  # keep the head (what failed) and the tail (why)
        half = _OV_SUMMARY_MAX // 2
        summary = f"{summary[:half]} ... {summary[-half:]}"
    return summary


def core() -> ov.Core:
    global _core
    if _core is None:
        _core = ov.Core()
    return _core


def compile_model(
    model: ov.Model, device: str, config: dict[str, object], what: str
) -> ov.CompiledModel:
    """core().compile_model, with OpenVINO's error turned into one line that names `what`."""
    try:
        return core().compile_model(model, device, config)
    except RuntimeError as err:
        summary = openvino_error_summary(err)
        raise CompileAheadError(f"compiling {what} for {device} failed: {summary}") from err


def device_config(options: CompileOptions) -> dict[str, object]:
    cfg: dict[str, object] = dict(options.extra_config)
    supported = core().get_property(options.device, "SUPPORTED_PROPERTIES")
    if "INFERENCE_PRECISION_HINT" in supported and options.inference_precision:
        cfg.setdefault("INFERENCE_PRECISION_HINT", OV_TYPES[options.inference_precision])
    if "PERFORMANCE_HINT" in supported:
        cfg.setdefault("PERFORMANCE_HINT", "LATENCY")
    return cfg


@dataclass
class CompileResult:
    step: CompiledStep
    build_s: float  # graph construction on the host (0 on a cache hit)
    compile_s: float  # compile_model wall time (0 on a cache hit: nothing was compiled)
    cache: str = "off"  # "hit" (imported), "miss" (compiled, then stored) or "off"
    import_s: float = 0.0  # importing the cached graph (hit)
    store_s: float = 0.0  # exporting and writing it to the cache (miss)


def compile_graph(
    source: ModelSource, spec: graphs.GraphSpec, options: CompileOptions
) -> tuple[ov.CompiledModel, float, float]:
    """Build (ModelSource.build_graph) and compile one step graph: (compiled model, build
    seconds, compile seconds)."""
    options = options.resolved()
    t0 = time.perf_counter()
    model = source.build_graph(spec)
    t1 = time.perf_counter()
    what = f"the C={spec.capacity} {spec.kind} graph"
    compiled = compile_model(model, options.device, device_config(options), what)
    t2 = time.perf_counter()
    return compiled, t1 - t0, t2 - t1


def compile_step(
    source: ModelSource, spec: graphs.GraphSpec, options: CompileOptions
) -> CompileResult:
    from .compile_cache import cached_compile, step_graph_identity  # imports this module

    (compiled, build_s, compile_s), outcome = cached_compile(
        options.cache,
        source,
        step_graph_identity(spec),
        options,
        lambda opts: compile_graph(source, spec, opts),
        # weightless entries restore weights from the uncompiled graph: ours only
        (lambda: source.build_graph(spec)) if source.built_from_weights else None,
    )
    step = make_step(compiled, spec, source.config.num_layers)
    # The compiled model may alias memory-mapped weights: they live as long as the step.
    step.keep_alive = source.weights
    step.compile_cache = outcome  # type: ignore[attr-defined]  # hit/miss for reports
    return CompileResult(step, build_s, compile_s, outcome.state, outcome.import_s, outcome.store_s)


def make_step(compiled: ov.CompiledModel, spec: graphs.GraphSpec, num_layers: int) -> CompiledStep:
    """The step that drives a compiled graph: ours, or one cut from an IR (it takes a mask)."""
    from .ir_step import IRStep, is_ir_graph  # imports this module

    if is_ir_graph(compiled):
        return IRStep(compiled, spec, num_layers)  # type: ignore[return-value]
    return CompiledStep(compiled, spec, num_layers)
