"""Compile step graphs for a device, with the precision options applied and time measured."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import openvino as ov

from compile_ahead.runtime.base.ov_core import compile_model
from compile_ahead.runtime.compile.cache import (
    CacheOutcome,
    cached_compile,
    step_graph_identity,
)
from compile_ahead.runtime.compile.options import CompileOptions, device_config
from compile_ahead.runtime.compile.worker_protocol import PhaseSpan
from compile_ahead.runtime.graphs import decoder as graphs
from compile_ahead.runtime.graphs.paged_prefill import kv_cache_config
from compile_ahead.runtime.graphs.step import CompiledStep
from compile_ahead.runtime.sources.base import ModelSource


@dataclass
class CompileResult:
    step: CompiledStep
    build_s: float  # graph construction on the host (0 on a cache hit)
    compile_s: float  # compile_model wall time (0 on a cache hit: nothing was compiled)
    cache: str = "off"  # "hit" (imported), "miss" (compiled, then stored) or "off"
    import_s: float = 0.0  # importing the cached graph (hit)
    store_s: float = 0.0  # exporting and writing it to the cache (miss)
    # A compile worker's phases (for the job's trace track); empty when compiled here.
    phases: list[PhaseSpan] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        step: CompiledStep,
        outcome: CacheOutcome | None,
        build_s: float = 0.0,
        compile_s: float = 0.0,
        phases: list[PhaseSpan] | None = None,
    ) -> CompileResult:
        """A step and what the compile cache did for it (None: no cache used); the step
        carries the outcome too, for reports that see only the step."""
        if outcome is not None:
            step.compile_cache = outcome  # type: ignore[attr-defined]
        state, import_s, store_s = (
            ("off", 0.0, 0.0)
            if outcome is None
            else (outcome.state, outcome.import_s, outcome.store_s)
        )
        return cls(step, build_s, compile_s, state, import_s, store_s, phases or [])


def compile_graph(
    source: ModelSource, spec: graphs.GraphSpec, options: CompileOptions
) -> tuple[ov.CompiledModel, float, float]:
    """Build (ModelSource.build_graph) and compile one step graph: (compiled model, build
    seconds, compile seconds). The graph kind's defaults (CompileOptions.for_graph) are added
    here too, so a worker given the options compile_step was given compiles the same graph
    (adding them twice changes nothing)."""
    options = options.resolved().for_graph(spec.kind)
    t0 = time.perf_counter()
    model = source.build_graph(spec)
    t1 = time.perf_counter()
    what = f"the C={spec.capacity} {spec.kind} graph"
    config = device_config(options)
    if spec.paged:
        config.update(kv_cache_config(spec))
    compiled = compile_model(model, options.device, config, what)
    t2 = time.perf_counter()
    return compiled, t1 - t0, t2 - t1


# The CPU plugin cannot import an exported paged-attention graph (its PagedAttention nodes lose
# the head counts they need: "k_head_size and num_k_heads are required"), so a paged prefill
# graph is compiled in this process every run: never cached, never a worker's blob.
PAGED_NOT_CACHED = "not cached: the plugin cannot import an exported paged-attention graph"


def not_exportable(spec: graphs.GraphSpec) -> str | None:
    """Why ``spec``'s compiled graph cannot go through an export and an import (so it is
    neither cached nor compiled by a worker), or None."""
    return PAGED_NOT_CACHED if spec.paged else None


def compile_step(
    source: ModelSource, spec: graphs.GraphSpec, options: CompileOptions, store_later: bool = False
) -> CompileResult:
    """Compile or import one step graph. ``store_later``: a cache miss is not written now
    (exporting a graph takes seconds) but by ``step.store_pending()``, e.g. once the graph
    has served the first token."""
    options = options.for_graph(spec.kind)
    unexportable = not_exportable(spec)
    cache = None if unexportable else options.cache
    (compiled, build_s, compile_s), outcome = cached_compile(
        cache,
        source,
        step_graph_identity(spec),
        options,
        lambda opts: compile_graph(source, spec, opts),
        # weightless entries restore weights from the uncompiled graph: ours only
        (lambda: source.build_graph(spec)) if source.built_from_weights else None,
        store=not store_later,
    )
    if unexportable and options.cache is not None:
        outcome = CacheOutcome("off", note=unexportable)
    result = CompileResult.of(source.make_step(compiled, spec), outcome, build_s, compile_s)
    if store_later and cache is not None and outcome.state == "miss":
        defer_store(result.step, lambda: cache.store(outcome, compiled))
    return result


def defer_store(step: CompiledStep, write: Callable[[], CacheOutcome]) -> None:
    """Leave ``step``'s cache entry to ``step.store_pending()``, called when the caller has
    time: it writes the entry, and the step then carries (and it returns) the outcome."""

    def store_now() -> CacheOutcome:
        step.compile_cache = write()  # type: ignore[attr-defined]
        return step.compile_cache  # type: ignore[attr-defined]

    step.store_pending = store_now  # type: ignore[attr-defined]
