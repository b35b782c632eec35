"""How a rung graph is compiled, decided once: whole or split, in the foreground or where the
run's placement puts background compiles (compile/placements.py), imported from the compile
cache when it holds the graph.

The ladder asks for a rung (its graph spec, and whether the compile runs in the background)
and gets a CompileResult (compile/graph/result.py) whose step is ready to bind; it starts background
compiles on the placement's threads (``submit``). profile-compile asks the same way.

- whole: the rung's whole step graph (ModelSource.build_graph), compiled or imported;
- split: the weight parts are compiled once per batch size (``prepare``, or lazily with the
  first rung of that B; built from weights, compile/graph/split_step.py, or cut from an IR,
  compile/graph/ir_split_parts.py) and a rung is only its weightless attention core, compiled on
  the calling thread whatever the placement;
- foreground compiles and retries always compile in this process, on the calling thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

from compile_ahead.runtime.compile.graph.ir_split_parts import IRWeightParts
from compile_ahead.runtime.compile.graph.result import CompileResult
from compile_ahead.runtime.compile.graph.split_step import CompiledParts, WeightParts
from compile_ahead.runtime.compile.graph.step_compile import compile_step
from compile_ahead.runtime.compile.placements import make_placement
from compile_ahead.runtime.compile.settings.modes import (
    DEFAULT_COMPILE_TIMEOUT_S,
    GraphMode,
    PlacementKind,
)
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.sources.ir_source import IRSource

if TYPE_CHECKING:
    from compile_ahead.runtime.compile.cache.outcome import CacheOutcome
    from compile_ahead.runtime.compile.worker.protocol import Fault
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.sources.base import ModelSource

T = TypeVar("T")


def decode_defaults(options: CompileOptions, graph: GraphMode) -> dict[str, str]:
    """The device's decode-graph properties (device_defaults.py) that decode graphs of
    ``graph`` mode compile with. Split graphs (weight parts, attention cores) keep the plugin's
    defaults: with the CPU's snippets generator off their compile was 0.88x but decode
    1.00-1.02x slower (qwen2.5-0.5b bf16 checkpoint, C=1024, 12 fresh-process pairs of
    `compile-ahead run --graph split` with and without `--ov-config SNIPPETS_MODE=ENABLE`),
    and decode is what a run spends most on."""
    return {} if graph == GraphMode.SPLIT else options.graph_defaults("decode")


class RungBuilder:
    def __init__(
        self,
        source: ModelSource,
        options: CompileOptions,
        graph: GraphMode = GraphMode.WHOLE,
        placement: PlacementKind = PlacementKind.IN_PROCESS,
        compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
        batch: int = 1,
    ):
        """``options`` resolved, the modes as the run configuration settled them (checked
        there: ladder/settings/config.py); ``batch`` the B whose weight parts ``prepare``
        compiles."""
        self.source = source
        self.options = options
        self.graph = graph
        self.batch = batch
        self.placement = make_placement(placement, source, options, compile_timeout_s)
        self.weight_parts: dict[int, CompiledParts] = {}  # by batch size

    def submit(self, work: Callable[[], T], name: str) -> Future[T]:
        """Start background work (compiles) on a thread of the placement; its future."""
        return self.placement.submit(work, name)

    @property
    def decode_defaults(self) -> dict[str, str]:
        return decode_defaults(self.options, self.graph)

    @property
    def shares_weights(self) -> bool:
        """Split rungs share weight parts compiled once (``prepare``)."""
        return self.graph == GraphMode.SPLIT

    def label(self, spec: GraphSpec) -> str:
        """What a rung's compile is called in events and traces."""
        return "attention" if self.graph == GraphMode.SPLIT else spec.kind

    def prepare(self, batch: int | None = None) -> CacheOutcome | None:
        """Compile what every rung of ``batch`` (default: the builder's) shares (split: the
        weight parts); what the compile cache did for it, or None when nothing is shared."""
        if not self.shares_weights:
            return None
        return self._weight_parts(self.batch if batch is None else batch).cache_outcome

    def _weight_parts(self, batch: int) -> CompiledParts:
        if batch not in self.weight_parts:
            source = self.source
            self.weight_parts[batch] = (
                IRWeightParts(source, self.options, batch)
                if isinstance(source, IRSource)
                else WeightParts(source, self.options, batch)
            )
        return self.weight_parts[batch]

    def build(
        self, spec: GraphSpec, background: bool = False, worker_fault: Fault | None = None
    ) -> CompileResult:
        """One rung graph, compiled or imported where this builder places it. A cache miss's
        entry (seconds of export and file writing) is the caller's to write (the result's
        pending store): a foreground graph's off the critical path, and never one of a compile
        the run abandoned."""
        if self.shares_weights:
            if spec.chunk > 1:
                raise AssertionError("split graphs prefill token by token (RunConfig checks)")
            return self._weight_parts(spec.batch).compile_core(spec, self.options)
        if background:
            return self.placement.compile(spec, worker_fault)
        return compile_step(self.source, spec, self.options, store_later=True)

    def shutdown(self) -> None:
        """The run is over: the placement stops what it can (a compile worker)."""
        self.placement.shutdown()
