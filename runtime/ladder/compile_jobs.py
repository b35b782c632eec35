"""Compiling rungs: eagerly before decoding, or one ahead on a background thread.

A rung is its decode graph at one capacity. compile_model releases the GIL, so a background
compile runs on the CPU while the decode thread keeps inferring.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile.cache import CacheOutcome
from compile_ahead.runtime.graphs import decoder as graphs
from compile_ahead.runtime.graphs.step import CompiledStep
from compile_ahead.runtime.ladder.capacities import Ladder
from compile_ahead.runtime.ladder.entry_stores import EntryStore, EntryStores
from compile_ahead.runtime.ladder.events import RunEvents

if TYPE_CHECKING:
    from compile_ahead.runtime.compile.cache import CompileCache
    from compile_ahead.runtime.compile.compiler import CompileResult


@dataclass
class Faults:
    """Test and benchmark hooks: slow or failing compiles, injected on purpose."""

    compile_delay_s: float = 0.0  # added to every background compile
    fail_compiles: dict[int, int] = field(default_factory=dict)  # capacity -> failures to inject
    # Emulates a device whose decode step is slower than this CPU's (added to every step), so
    # a tiny test model can have the decode runway a real model has.
    step_delay_s: float = 0.0
    # capacity -> what a compile worker does instead of compiling that rung once (raise,
    # abort, segfault, hang): the worker placement's failure paths, on purpose.
    worker_faults: dict[int, str] = field(default_factory=dict)
    # Every compile cache entry write pauses this long with its temporary file open, as
    # writing a large model's entry (about 1 GB for qwen2.5-0.5b) takes.
    store_delay_s: float = 0.0

    def __post_init__(self) -> None:
        delays = {
            "--inject-compile-delay": self.compile_delay_s,
            "--step-delay": self.step_delay_s,
            "--inject-store-delay": self.store_delay_s,
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
        for flag, capacities in (
            ("--inject-compile-failure", self.fail_compiles),
            ("--inject-worker-fault", self.worker_faults),
        ):
            for capacity in capacities:
                if capacity not in ladder.rungs:
                    raise CompileAheadError(f"{flag} {capacity}: not a rung of the ladder {ladder}")
        return self

    def take_worker_fault(self, capacity: int) -> str | None:
        """The worker fault to inject into this rung's compile (once)."""
        return self.worker_faults.pop(capacity, None)

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


@dataclass(frozen=True)
class CompileJob:
    """A compile that finished (ok or not) while the run was on."""

    job: int
    capacity: int  # 0: shared work no rung owns (split weight parts)
    chunk: int
    background: bool
    seconds: float
    ok: bool
    cache: str = "off"  # hit: imported from the compile cache; miss: compiled; off: no cache
    import_s: float = 0.0
    cache_stored: bool | None = None  # a miss: whether its entry was written
    cache_note: str | None = None  # why not stored, why off, or what was wrong with an entry
    verify_s: float = 0.0  # a hit: the entry's checksum, part of import_s

    def to_json(self) -> dict:
        return asdict(self)


class RungCompiler:
    """Builds and compiles one rung graph, reporting to the observer; counts what is resident.

    Thread-safe: the one-ahead policy compiles on a background thread. After close(), a
    compile still running reports nothing more (its observer may be gone), its graph is
    dropped and its cache entry never written; close() itself reports it as abandoned. The
    cache entries of the graphs it kept are written by ``stores`` (entry_stores.py).
    """

    def __init__(
        self,
        spec_for: Callable[[int, int], graphs.GraphSpec],
        # compiles one graph (spec, background) where the compile layer places it
        build: Callable[[graphs.GraphSpec, bool], CompileResult],
        events: RunEvents,
        faults: Faults,
        on_ready: Callable[[CompiledStep], None] | None = None,
        label: Callable[[graphs.GraphSpec], str] = lambda spec: spec.kind,
        cache: CompileCache | None = None,
    ):
        self.spec_for = spec_for
        self.build = build  # the whole step graph, or a split rung's core
        self.events = events
        self.faults = faults
        self.on_ready = on_ready  # e.g. bind a shared KV buffer while still off the critical path
        self.label = label  # what a compile is called in events (decode, prefill, attention)
        self._jobs = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False
        self._running: dict[int, tuple[int, str, bool]] = {}  # job -> (capacity, kind, background)
        self.resident: dict[tuple[int, int], CompiledRung] = {}  # (capacity, chunk) -> graph
        self.resident_max = 0
        self.in_flight_max = 0
        self.finished: list[CompileJob] = []
        self.stores = EntryStores(cache, self._report_store)

    def compile_shared(self, kind: str, work: Callable[[], dict | None]) -> float:
        """A foreground compile that no rung owns (split mode's weight parts), as its own job;
        ``work`` may return what to report of it (e.g. its compile cache outcome)."""
        job = next(self._jobs)
        start = time.monotonic_ns()
        with self._lock:
            self._running[job] = (0, kind, False)
            self.events.compile_started(job, 0, kind, False, start)
        try:
            info = work() or {}
        except Exception as err:
            self._finish(job, 1, start, False, {"error": str(err)})
            raise
        return self._finish(job, 1, start, True, info)

    def compile(self, capacity: int, background: bool, length: int, chunk: int = 1) -> CompiledRung:
        """Compile the graph for (capacity, chunk); chunk 1 is the rung's decode graph."""
        job = next(self._jobs)
        spec = self.spec_for(capacity, chunk)
        kind = self.label(spec)
        start = time.monotonic_ns()
        with self._lock:
            if self._closed:
                raise CompileAheadError("the run has ended")
            self._running[job] = (capacity, kind, background)
            self.in_flight_max = max(self.in_flight_max, len(self._running))
            self.events.compile_started(job, capacity, kind, background, start)
        try:
            self.faults.before_compile(capacity, background)
            built = self.build(spec, background)
            if built.phases:  # a compile worker's, on the job's track
                self.events.worker_phases(job, built.phases)
            step = built.step
            if self.on_ready is not None:
                self.on_ready(step)
        except Exception as err:
            worker_phases = getattr(err, "phases", None)
            if worker_phases:
                self.events.worker_phases(job, worker_phases)
            self._finish(job, chunk, start, False, {"error": str(err)})
            raise
        rung = CompiledRung(capacity, step, job, background, start, time.monotonic_ns(), length)
        with self._lock:
            if not self._closed:
                self.resident[(capacity, chunk)] = rung
                self.resident_max = max(self.resident_max, len(self.resident))
                self._resident_changed()
        self._finish(job, chunk, start, True, _cache_info(built))
        self._hand_over_store(job, step, f"{kind} C={capacity}", chunk, background)
        return rung

    def _hand_over_store(
        self, job: int, step: CompiledStep, what: str, chunk: int, background: bool
    ) -> None:
        """The graph's cache entry, if it has one to write, goes to ``stores``: written as it
        finishes (a background compile) or after the token (store_entries), unless the run
        ended first."""
        store = getattr(step, "store_pending", None)
        if store is None:
            return
        step.store_pending = None  # type: ignore[attr-defined]
        miss = getattr(step, "compile_cache", None)
        what = f"the cache entry of {what}" + (f" L={chunk}" if chunk > 1 else "")
        with self._lock:
            ended = self._closed
            if not ended:
                self.stores.add(EntryStore(job, what, store, miss.entry if miss else None))
        if ended:
            self._report_store(job, CacheOutcome("miss", note="not stored: the run had ended"))
        elif background:
            self.stores.start([job])

    def _report_store(self, job: int, outcome: CacheOutcome) -> None:
        """A job's cache outcome once its entry is written (or not, and why)."""
        fields = _cache_fields(outcome.describe())
        with self._lock:
            for i, record in enumerate(self.finished):
                if record.job == job:
                    self.finished[i] = replace(record, **fields)

    def store_entries(self) -> None:
        """Write the cache entries of the compiles so far, one after the other on a helper
        thread (mostly file writing: it leaves the cores to decode)."""
        self.stores.start()

    def finish_stores(self) -> None:
        """The end of the run: write what is still waiting and wait for every entry, never
        leaving a half-written one (EntryStores.finish)."""
        self.stores.finish()

    def _finish(self, job: int, chunk: int, start: int, ok: bool, info: dict) -> float:
        """Report a compile's end, unless the run is over; returns its seconds."""
        with self._lock:
            end = time.monotonic_ns()
            running = self._running.pop(job, None)
            if running is not None and not self._closed:
                capacity, kind, background = running
                seconds = (end - start) / 1e9
                record = CompileJob(
                    job, capacity, chunk, background, seconds, ok, **_cache_fields(info)
                )
                self.finished.append(record)
                self.events.compile_finished(job, capacity, kind, ok, end, info)
        return (end - start) / 1e9

    def _resident_changed(self) -> None:
        # Called under the lock with the time read under it, so the counter's samples stay
        # in time order whichever thread changes the count.
        self.events.counters(time.monotonic_ns(), {"graphs_resident": len(self.resident)})

    def get(self, capacity: int, chunk: int = 1) -> CompiledRung:
        with self._lock:
            return self.resident[(capacity, chunk)]

    def release(self, capacity: int, chunk: int = 1) -> None:
        """Drop a compiled graph so its memory (its own weight copy) returns."""
        with self._lock:
            if self.resident.pop((capacity, chunk), None) is not None:
                self._resident_changed()

    def close(self) -> None:
        """End of the run: report compiles still running as abandoned, then stay silent."""
        with self._lock:
            self._closed = True
            ts = time.monotonic_ns()
            for job, (capacity, kind, _) in sorted(self._running.items()):
                info = {"error": "abandoned: the run ended before this compile finished"}
                self.events.compile_finished(job, capacity, kind, False, ts, info)
            self._running.clear()


def _cache_fields(info: dict) -> dict:
    """A CompileJob's cache fields from what the cache said of its graph."""
    return {
        "cache": info.get("cache", "off"),
        "import_s": info.get("import_s", 0.0),
        "cache_stored": info.get("cache_stored"),
        "cache_note": info.get("cache_note"),
        "verify_s": info.get("verify_s", 0.0),
    }


def _cache_info(built: CompileResult) -> dict:
    """What the compile cache said of this graph: its outcome when the step carries one
    (stored, or why not), else the result's hit/miss/off and import time."""
    outcome = getattr(built.step, "compile_cache", None)
    if outcome is not None:
        return outcome.describe()
    return {"cache": built.cache, "import_s": round(built.import_s, 3)}
