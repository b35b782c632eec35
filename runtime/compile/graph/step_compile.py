"""Compile step graphs for a device, with the precision options applied and time measured."""

from __future__ import annotations

import time

from compile_ahead.runtime.base.ov_core import compile_model
from compile_ahead.runtime.compile.cache.keys import step_graph_identity
from compile_ahead.runtime.compile.cache.outcome import CacheOutcome, Compiled
from compile_ahead.runtime.compile.cache.store import cached_compile
from compile_ahead.runtime.compile.graph.result import CompileResult
from compile_ahead.runtime.compile.settings.options import CompileOptions, device_config
from compile_ahead.runtime.graphs.ir.paged_prefill import kv_cache_config
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.sources.base import ModelSource


def compile_graph(source: ModelSource, spec: GraphSpec, options: CompileOptions) -> Compiled:
    """Build (ModelSource.build_graph) and compile one step graph, timing both. The graph
    kind's defaults (CompileOptions.for_graph) are added here too, so a worker given the
    options compile_step was given compiles the same graph (adding them twice changes
    nothing)."""
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
    return Compiled(compiled, t1 - t0, t2 - t1)


# The CPU plugin cannot import an exported paged-attention graph (its PagedAttention nodes lose
# the head counts they need: "k_head_size and num_k_heads are required"), so a paged prefill
# graph is compiled in this process every run: never cached, never a worker's blob.
PAGED_NOT_CACHED = "not cached: the plugin cannot import an exported paged-attention graph"


def not_exportable(spec: GraphSpec) -> str | None:
    """Why ``spec``'s compiled graph cannot go through an export and an import (so it is
    neither cached nor compiled by a worker), or None."""
    return PAGED_NOT_CACHED if spec.paged else None


def compile_step(
    source: ModelSource, spec: GraphSpec, options: CompileOptions, store_later: bool = False
) -> CompileResult:
    """Compile or import one step graph. ``store_later``: a cache miss is not written now
    (exporting a graph takes seconds) but by the result's ``pending_store``, e.g. once the
    graph has served the first token."""
    options = options.for_graph(spec.kind)
    unexportable = not_exportable(spec)
    compiled, outcome, pending = cached_compile(
        None if unexportable else options.cache,
        source,
        step_graph_identity(spec),
        options,
        lambda opts: compile_graph(source, spec, opts),
        # weightless entries restore weights from the uncompiled graph: ours only
        (lambda: source.build_graph(spec)) if source.built_from_weights else None,
        store_later=store_later,
    )
    if unexportable and options.cache is not None:
        outcome = CacheOutcome("off", note=unexportable)
    step = source.make_step(compiled.model, spec)
    return CompileResult(step, outcome, compiled.build_s, compiled.compile_s, pending_store=pending)
