"""Where and how a rung graph is compiled, decided once: whole or split, in this process or in a
compile worker, imported from the compile cache when it holds the graph.

The ladder asks for a rung (its graph spec, and whether the compile runs in the background)
and gets a CompileResult whose step is ready to bind; profile-compile asks the same way.

- whole: the rung's whole step graph (ModelSource.build_graph), compiled or imported;
- split: the weight parts are compiled once (``prepare``, or lazily with the first rung) and
  a rung is only its weightless attention core (compile/split_step.py);
- in-process: compiled on the calling thread (a background thread for one-ahead compiles);
- worker: background compiles go to a compile worker process (compile/worker_client.py); a
  cache entry, when there is one, is imported instead, and the worker's blob is left for the
  run to store as the entry. Foreground compiles, retries and split attention cores always
  compile in-process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile.cache import step_graph_identity
from compile_ahead.runtime.compile.compiler import (
    CompileResult,
    compile_step,
    defer_store,
    not_exportable,
)
from compile_ahead.runtime.compile.device_defaults import GRAPH_MODES, PLACEMENTS
from compile_ahead.runtime.compile.options import CompileOptions
from compile_ahead.runtime.compile.split_step import WeightParts, compile_attention_core

if TYPE_CHECKING:
    from compile_ahead.runtime.compile.worker_client import WorkerPlacement
    from compile_ahead.runtime.compile.worker_protocol import Fault
    from compile_ahead.runtime.graphs.decoder import GraphSpec
    from compile_ahead.runtime.sources.base import ModelSource


def decode_defaults(options: CompileOptions, graph: str) -> dict[str, str]:
    """The device's decode-graph properties (device_defaults.py) that decode graphs of
    ``graph`` mode compile with. Split graphs (weight parts, attention cores) keep the plugin's
    defaults: with the CPU's snippets generator off their compile was 0.88x but decode
    1.00-1.02x slower (qwen2.5-0.5b bf16 checkpoint, C=1024, 12 fresh-process pairs of
    `compile-ahead run --graph split` with and without `--ov-config SNIPPETS_MODE=ENABLE`),
    and decode is what a run spends most on."""
    return {} if graph == "split" else options.graph_defaults("decode")


class RungBuilder:
    def __init__(
        self,
        source: ModelSource,
        options: CompileOptions,
        graph: str = "whole",
        placement: str = "in-process",
        compile_timeout_s: float = 600.0,
        model_ref: str | None = None,
    ):
        if graph not in GRAPH_MODES:
            raise CompileAheadError(
                f"--graph must be one of {', '.join(GRAPH_MODES)}, got {graph!r}"
            )
        if placement not in PLACEMENTS:
            raise CompileAheadError(
                f"--compile-placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}"
            )
        if graph == "split" and not source.built_from_weights:
            raise CompileAheadError(
                "--graph split is not available for an OpenVINO IR (its graph is cut, not "
                "rebuilt); use --graph whole"
            )
        self.source = source
        self.options = options.resolved()
        self.graph = graph
        self.placement = placement
        self.compile_timeout_s = compile_timeout_s
        self.model_ref = model_ref or source.name  # how a worker resolves the model
        self.weight_parts: WeightParts | None = None
        self._worker: WorkerPlacement | None = None

    @property
    def decode_defaults(self) -> dict[str, str]:
        return decode_defaults(self.options, self.graph)

    @property
    def shares_weights(self) -> bool:
        """Split rungs share weight parts compiled once (``prepare``)."""
        return self.graph == "split"

    def label(self, spec: GraphSpec) -> str:
        """What a rung's compile is called in events and traces."""
        return "attention" if self.graph == "split" else spec.kind

    def prepare(self) -> dict | None:
        """Compile what every rung shares (split: the weight parts); what to report of it, or
        None when there is nothing to share."""
        if not self.shares_weights:
            return None
        if self.weight_parts is None:
            self.weight_parts = WeightParts(self.source, self.options)
        parts = self.weight_parts
        info: dict = {"cache": parts.cache_state, "import_s": parts.import_s}
        misses = [o for o in parts.cache_outcomes if o.state == "miss"]
        if misses:
            info["cache_stored"] = all(o.stored for o in misses)
        notes = sorted({o.note for o in parts.cache_outcomes if o.note})
        if notes:
            info["cache_note"] = "; ".join(notes)
        return info

    def build(
        self, spec: GraphSpec, background: bool = False, worker_fault: Fault | None = None
    ) -> CompileResult:
        """One rung graph, compiled or imported where this builder places it."""
        if self.shares_weights:
            if spec.chunk > 1:
                raise CompileAheadError("--prefill-chunk > 1 is not available with --graph split")
            self.prepare()
            assert self.weight_parts is not None
            step = compile_attention_core(self.weight_parts, spec, self.options)
            return CompileResult.of(step, step.compile_cache)
        if background and self.placement == "worker" and not_exportable(spec) is None:
            return self._build_in_worker(spec, worker_fault)
        # The cache entry (seconds of export and file writing) is the run's to write: a
        # foreground graph's off the critical path, and never one of a compile it abandoned.
        return compile_step(self.source, spec, self.options, store_later=True)

    def _build_in_worker(self, spec: GraphSpec, fault: Fault | None) -> CompileResult:
        from compile_ahead.runtime.compile.cache import CacheOutcome
        from compile_ahead.runtime.compile.worker_client import WorkerPlacement

        options = self.options.for_graph(spec.kind)
        cache, sink = options.cache, None
        outcome = None
        blobs: list[bytes] = []  # the worker's export, stored as the entry by the run
        if cache is not None and fault is not None:
            # An injected fault is the worker's: importing the entry would skip it unseen.
            outcome = CacheOutcome("off", note=f"not used: worker fault {fault!r} injected")
        elif cache is not None:
            compiled, outcome = cache.lookup(self.source, step_graph_identity(spec), options)
            if compiled is not None:
                return CompileResult.of(self.source.make_step(compiled, spec), outcome)
            sink = blobs.append

        if self._worker is None:
            self._worker = WorkerPlacement(priority="idle")
        result = self._worker.compile(
            self.model_ref,
            spec,
            options,
            timeout_s=self.compile_timeout_s,
            fault=fault,
            blob_sink=sink,
            # The worker opens the model itself: it must find the weights this run opened.
            weights=self.source.weights_identity(),
        )
        if result.model_config != self.source.config:
            raise CompileAheadError(
                f"the compile worker resolved {self.model_ref!r} to another model than this run's"
            )
        step = self.source.make_step(result.compiled, spec)
        if cache is not None and blobs and outcome is not None and outcome.state == "miss":
            miss = outcome
            defer_store(step, lambda: cache.store_blob(miss, blobs.pop()))
        return CompileResult.of(step, outcome, result.build_s, result.compile_s, result.phases)

    def shutdown(self) -> None:
        """Stop the compile worker, if one was started."""
        if self._worker is not None:
            self._worker.shutdown()
