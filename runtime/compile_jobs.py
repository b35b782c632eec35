"""Compiling rungs: eagerly before decoding, or one ahead on a background thread.

A rung is its decode graph at one capacity. compile_model releases the GIL, so a background
compile runs on the CPU while the decode thread keeps inferring.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from compile_ahead.errors import CompileAheadError

from . import graphs
from .events import RunEvents
from .ladder import Ladder
from .step import CompiledStep


@dataclass
class Faults:
    """Test and benchmark hooks: slow or failing compiles, injected on purpose."""

    compile_delay_s: float = 0.0  # added to every background compile
    fail_compiles: dict[int, int] = field(default_factory=dict)  # capacity -> failures to inject
    # Emulates a device whose decode step is slower than this CPU's (added to every step), so
    # a tiny test model can have the decode runway a real model has.
    step_delay_s: float = 0.0

    def __post_init__(self) -> None:
        delays = {
            "--inject-compile-delay": self.compile_delay_s,
            "--step-delay": self.step_delay_s,
        }
        for flag, seconds in delays.items():
            # written so that NaN fails too
            if not (isinstance(seconds, int | float) and 0 <= seconds < float("inf")):
                raise CompileAheadError(
                    f"{flag} must be a finite number of seconds >= 0, got {seconds}"
                )
        for capacity, count in self.fail_compiles.items():
            if not isinstance(capacity, int) or capacity <= 0:
                raise CompileAheadError(
                    f"--inject-compile-failure: capacity must be a positive integer, "
                    f"got {capacity!r}"
                )
            if not isinstance(count, int) or count < 1:
                raise CompileAheadError(
                    f"--inject-compile-failure {capacity}:{count}: COUNT must be at least 1"
                )

    def validate(self, ladder: Ladder) -> Faults:
        """Every injected failure names a rung of ``ladder`` (else it could never fire)."""
        for capacity in self.fail_compiles:
            if capacity not in ladder.rungs:
                raise CompileAheadError(
                    f"--inject-compile-failure {capacity}: not a rung of the ladder {ladder}"
                )
        return self

    def after_step(self) -> None:
        if self.step_delay_s > 0:
            time.sleep(self.step_delay_s)

    def before_compile(self, capacity: int, background: bool) -> None:
        if background and self.compile_delay_s > 0:
            time.sleep(self.compile_delay_s)
        if self.fail_compiles.get(capacity, 0) > 0:
            self.fail_compiles[capacity] -= 1
            raise CompileAheadError(f"injected compile failure for capacity {capacity}")


@dataclass
class CompiledRung:
    capacity: int
    step: CompiledStep
    job: int
    background: bool
    started_ns: int
    finished_ns: int
    started_at_length: int  # context length when the compile started

    @property
    def compile_s(self) -> float:
        return (self.finished_ns - self.started_ns) / 1e9


class RungCompiler:
    """Builds and compiles one rung graph, reporting to the observer; counts what is resident."""

    def __init__(
        self,
        spec_for: Callable[[int, int], graphs.GraphSpec],
        build: Callable[[graphs.GraphSpec], CompiledStep],
        events: RunEvents,
        faults: Faults,
        on_ready: Callable[[CompiledStep], None] | None = None,
        label: Callable[[graphs.GraphSpec], str] = lambda spec: spec.kind,
    ):
        self.spec_for = spec_for
        self.build = build  # compiles one graph: the whole step graph, or a split rung's core
        self.events = events
        self.faults = faults
        self.on_ready = on_ready  # e.g. bind a shared KV buffer while still off the critical path
        self.label = label  # what a compile is called in events (decode, prefill, attention)
        self._jobs = itertools.count(1)
        self._lock = threading.Lock()
        self.resident: dict[tuple[int, int], CompiledRung] = {}  # (capacity, chunk) -> graph
        self.resident_max = 0
        self.in_flight = 0
        self.in_flight_max = 0

    def compile_shared(self, kind: str, work: Callable[[], object]) -> float:
        """A foreground compile that no rung owns (split mode's weight parts), as its own job."""
        job = next(self._jobs)
        start = time.monotonic_ns()
        self.events.compile_started(job, 0, kind, False, start)
        try:
            work()
        except Exception as err:
            self.events.compile_finished(
                job, 0, kind, False, time.monotonic_ns(), {"error": str(err)}
            )
            raise
        end = time.monotonic_ns()
        self.events.compile_finished(job, 0, kind, True, end, {})
        return (end - start) / 1e9

    def compile(self, capacity: int, background: bool, length: int, chunk: int = 1) -> CompiledRung:
        """Compile the graph for (capacity, chunk); chunk 1 is the rung's decode graph."""
        job = next(self._jobs)
        spec = self.spec_for(capacity, chunk)
        with self._lock:
            self.in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self.in_flight)
        start = time.monotonic_ns()
        kind = self.label(spec)
        self.events.compile_started(job, capacity, kind, background, start)
        try:
            self.faults.before_compile(capacity, background)
            step = self.build(spec)
            if self.on_ready is not None:
                self.on_ready(step)
        except Exception as err:
            self.events.compile_finished(
                job, capacity, kind, False, time.monotonic_ns(), {"error": str(err)}
            )
            raise
        finally:
            with self._lock:
                self.in_flight -= 1
        end = time.monotonic_ns()
        rung = CompiledRung(capacity, step, job, background, start, end, length)
        with self._lock:
            self.resident[(capacity, chunk)] = rung
            self.resident_max = max(self.resident_max, len(self.resident))
        self.events.compile_finished(job, capacity, kind, True, end, {})
        return rung

    def get(self, capacity: int, chunk: int = 1) -> CompiledRung:
        with self._lock:
            return self.resident[(capacity, chunk)]

    def release(self, capacity: int, chunk: int = 1) -> None:
        """Drop a compiled graph so its memory (its own weight copy) returns."""
        with self._lock:
            self.resident.pop((capacity, chunk), None)


class OneAhead:
    """At most one successor compile in flight, on one background thread."""

    def __init__(self, compiler: RungCompiler):
        self.compiler = compiler
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compile-ahead")
        self._pending: dict[int, Future[CompiledRung]] = {}

    def start(self, capacity: int, length: int) -> None:
        if self._pending:
            raise RuntimeError("one-ahead: a successor compile is already in flight")
        self._pending[capacity] = self._pool.submit(self.compiler.compile, capacity, True, length)

    def ready(self, capacity: int) -> bool:
        future = self._pending.get(capacity)
        return future is not None and future.done()

    def take(self, capacity: int) -> CompiledRung:
        """The compiled successor, waiting if it is not ready; re-raises its failure."""
        future = self._pending.pop(capacity)
        return future.result()

    def shutdown(self) -> None:
        for future in self._pending.values():
            future.cancel()
        # A compile already running cannot be stopped; do not hold the report up for it.
        self._pool.shutdown(wait=False, cancel_futures=True)
