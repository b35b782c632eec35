"""Where a run's background compiles go: a Placement owns the threads (and processes) it
starts, and the ladder gets a future for each compile it asks of it.

Every placement runs its work on helper threads of the interrupt layer
(compile_ahead.interrupts.in_background): they block the interrupt signals, and they are
registered while they run, so a command that ends with a compile still running leaves the
process at once instead of tearing OpenVINO down under it. What differs is where the graph
itself is compiled (``compile``):

- in-process: on that thread, in this process (compile_model releases the GIL, so decoding
  goes on);
- worker: in a compile worker process at idle priority (worker/client.py), which exports the
  compiled graph for this process to import; a graph that cannot be exported (a paged prefill
  graph) compiles in-process.

A new placement is a Placement subclass, its name in modes.PlacementKind and its line in
PLACEMENTS.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, ClassVar, TypeVar

from compile_ahead.errors import CompileAheadError
from compile_ahead.interrupts import in_background
from compile_ahead.runtime.compile.cache.keys import step_graph_identity
from compile_ahead.runtime.compile.cache.outcome import CacheOutcome, Compiled
from compile_ahead.runtime.compile.cache.store import cached_compile
from compile_ahead.runtime.compile.graph.result import CompileResult
from compile_ahead.runtime.compile.graph.step_compile import compile_step, not_exportable
from compile_ahead.runtime.compile.settings.modes import DEFAULT_COMPILE_TIMEOUT_S, PlacementKind

if TYPE_CHECKING:
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.compile.worker.client import CompileWorker
    from compile_ahead.runtime.compile.worker.protocol import Fault, PhaseSpan
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.sources.base import ModelSource

T = TypeVar("T")


class Placement(ABC):
    kind: ClassVar[PlacementKind]

    def __init__(
        self,
        source: ModelSource,
        options: CompileOptions,
        timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
    ):
        """``options`` resolved; ``timeout_s``: how long a compile may take where the
        placement can stop one (a worker process)."""
        self.source = source
        self.options = options
        self.timeout_s = timeout_s

    def submit(self, work: Callable[[], T], name: str) -> Future[T]:
        """Start ``work`` (a background compile and what the caller does with it) on a helper
        thread of this placement, named ``compile-NAME``; its result, or its error, is the
        future's."""
        return in_background(work, f"compile-{name}")

    @abstractmethod
    def compile(self, spec: GraphSpec, fault: Fault | None = None) -> CompileResult:
        """One background compile of ``spec``, for the calling thread (one ``submit``
        started). A miss's cache entry is left to the caller (the result's pending store).
        ``fault``: an injected worker fault (tests)."""

    @abstractmethod
    def shutdown(self) -> None:
        """The run is over: stop what can be stopped."""


class InProcessPlacement(Placement):
    kind = PlacementKind.IN_PROCESS

    def compile(self, spec: GraphSpec, fault: Fault | None = None) -> CompileResult:
        return compile_step(self.source, spec, self.options, store_later=True)

    def shutdown(self) -> None:
        """Nothing to stop: a compile_model still running cannot be, and runs on to its end on
        its helper thread (the exit path knows it runs)."""


class WorkerProcessPlacement(Placement):
    """A compile worker process at idle priority, started at the first compile and killed at
    shutdown; a cache entry is imported instead when there is one, and the worker's export is
    left for the run to store as the entry."""

    kind = PlacementKind.WORKER

    def __init__(
        self,
        source: ModelSource,
        options: CompileOptions,
        timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
    ):
        super().__init__(source, options, timeout_s)
        self._worker: CompileWorker | None = None

    def compile(self, spec: GraphSpec, fault: Fault | None = None) -> CompileResult:
        if not_exportable(spec) is not None:
            return compile_step(self.source, spec, self.options, store_later=True)
        options = self.options.for_graph(spec.kind)
        phases: list[PhaseSpan] = []
        # An injected fault is the worker's: importing the entry would skip it unseen.
        cache = None if fault is not None else options.cache
        compiled, outcome, pending = cached_compile(
            cache,
            self.source,
            step_graph_identity(spec),
            options,
            lambda opts: self._in_worker(spec, opts, fault, phases),
            store_later=True,
        )
        if fault is not None and options.cache is not None:
            outcome = CacheOutcome("off", note=f"not used: worker fault {fault!r} injected")
        step = self.source.make_step(compiled.model, spec)
        return CompileResult(
            step, outcome, compiled.build_s, compiled.compile_s, tuple(phases), pending
        )

    def _in_worker(
        self, spec: GraphSpec, options: CompileOptions, fault: Fault | None, phases: list
    ) -> Compiled:
        from compile_ahead.runtime.compile.worker.client import CompileWorker

        if self._worker is None:
            self._worker = CompileWorker(priority="idle")
        reopen = self.source.reopen()
        kept: list[bytes] = []  # the worker's export: a miss's entry is written from it
        result = self._worker.compile(
            reopen,
            spec,
            options,
            timeout_s=self.timeout_s,
            fault=fault,
            blob_sink=kept.append,
            # The worker opens the model itself: it must find the weights this run opened.
            weights=self.source.weights_identity(),
        )
        if result.model_config != self.source.config:
            raise CompileAheadError(
                f"the compile worker opened {reopen.target!r} as another model than this run's"
            )
        phases.extend(result.phases)
        return Compiled(result.compiled, result.build_s, result.compile_s, kept.pop())

    def shutdown(self) -> None:
        """Kill the compile worker, if one was started (a compile in flight fails)."""
        if self._worker is not None:
            self._worker.shutdown()


PLACEMENTS: dict[PlacementKind, type[Placement]] = {
    PlacementKind.IN_PROCESS: InProcessPlacement,
    PlacementKind.WORKER: WorkerProcessPlacement,
}


def make_placement(
    kind: PlacementKind,
    source: ModelSource,
    options: CompileOptions,
    timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
) -> Placement:
    return PLACEMENTS[kind](source, options, timeout_s)
