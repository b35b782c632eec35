"""Compiling rungs: eagerly before decoding, or one ahead on a background thread.

A rung is its decode graph at one capacity. compile_model releases the GIL, so a background
compile runs on the CPU while the decode thread keeps inferring.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile.cache.outcome import OFF, CacheOutcome
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.graphs.step import CompiledStep
from compile_ahead.runtime.ladder.entry_stores import EntryStore, EntryStores
from compile_ahead.runtime.ladder.faults import FaultInjector
from compile_ahead.runtime.ladder.reporting.events import RunEvents

if TYPE_CHECKING:
    from compile_ahead.runtime.compile.cache.store import CompileCache
    from compile_ahead.runtime.compile.graph.result import CompileResult


@dataclass
class CompiledRung:
    capacity: int
    step: CompiledStep
    job: int
    background: bool
    started_ns: int
    finished_ns: int
    started_at_length: int  # context length when the compile started
    cache: CacheOutcome = OFF  # what the compile cache did for it (before its entry is written)

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
    # hit: imported from the compile cache (import and checksum seconds); miss: compiled, its
    # entry written or not (and why); off: no cache. Once its entry is written, that outcome.
    cache: CacheOutcome = OFF

    def to_json(self) -> dict:
        described = self.cache.describe()
        return {
            "job": self.job,
            "capacity": self.capacity,
            "chunk": self.chunk,
            "background": self.background,
            "seconds": self.seconds,
            "ok": self.ok,
            "cache": described["cache"],
            "import_s": described["import_s"],
            "cache_stored": described.get("cache_stored"),  # a miss: whether it was written
            "cache_note": described.get("cache_note"),  # why not stored or off, what was wrong
            "verify_s": described.get("verify_s", 0.0),  # a hit: the checksum, in import_s
        }


class CompileJobs:
    """Builds and compiles one rung graph, reporting to the observer; counts what is resident.

    Thread-safe: the one-ahead policy compiles on a background thread. After close(), a
    compile still running reports nothing more (its observer may be gone), its graph is
    dropped and its cache entry never written; close() itself reports it as abandoned. The
    cache entries of the graphs it kept are written by ``stores`` (entry_stores.py).
    """

    def __init__(
        self,
        spec_for: Callable[[int, int], GraphSpec],
        # compiles one graph (spec, background) where the compile layer places it
        build: Callable[[GraphSpec, bool], CompileResult],
        events: RunEvents,
        faults: FaultInjector,
        # starts background work on a thread of the run's placement: (work, name) -> future
        submit: Callable[[Callable[[], Any], str], Future],
        on_ready: Callable[[CompiledStep], None] | None = None,
        label: Callable[[GraphSpec], str] = lambda spec: spec.kind,
        cache: CompileCache | None = None,
    ):
        self.spec_for = spec_for
        self.build = build  # the whole step graph, or a split rung's core
        self.submit = submit
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

    def compile_shared(self, kind: str, work: Callable[[], CacheOutcome | None]) -> float:
        """A foreground compile that no rung owns (split mode's weight parts), as its own job;
        ``work`` returns what the compile cache did for it (None: nothing was compiled)."""
        job = next(self._jobs)
        start = time.monotonic_ns()
        with self._lock:
            self._running[job] = (0, kind, False)
            self.events.compile_started(job, 0, kind, False, start)
        try:
            outcome = work()
        except Exception as err:
            self._finish(job, 1, start, error=str(err))
            raise
        return self._finish(job, 1, start, outcome or OFF)

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
            self._finish(job, chunk, start, error=str(err))
            raise
        end = time.monotonic_ns()
        rung = CompiledRung(capacity, step, job, background, start, end, length, built.cache)
        with self._lock:
            if not self._closed:
                self.resident[(capacity, chunk)] = rung
                self.resident_max = max(self.resident_max, len(self.resident))
                self._resident_changed()
        self._finish(job, chunk, start, built.cache)
        self._hand_over_store(job, built, f"{kind} C={capacity}", chunk, background)
        return rung

    def _hand_over_store(
        self, job: int, built: CompileResult, what: str, chunk: int, background: bool
    ) -> None:
        """The graph's cache entry, if it has one to write, goes to ``stores``: written as it
        finishes (a background compile) or after the token (store_entries), unless the run
        ended first."""
        if built.pending_store is None:
            return
        what = f"the cache entry of {what}" + (f" L={chunk}" if chunk > 1 else "")
        with self._lock:
            ended = self._closed
            if not ended:
                self.stores.add(EntryStore(job, what, built.pending_store, built.cache.entry))
        if ended:
            self._report_store(job, CacheOutcome("miss", note="not stored: the run had ended"))
        elif background:
            self.stores.start([job])

    def _report_store(self, job: int, outcome: CacheOutcome) -> None:
        """A job's cache outcome once its entry is written (or not, and why)."""
        with self._lock:
            for i, record in enumerate(self.finished):
                if record.job == job:
                    self.finished[i] = replace(record, cache=outcome)

    def store_entries(self) -> None:
        """Write the cache entries of the compiles so far, one after the other on a helper
        thread (mostly file writing: it leaves the cores to decode)."""
        self.stores.start()

    def finish_stores(self) -> None:
        """The end of the run: write what is still waiting and wait for every entry, never
        leaving a half-written one (EntryStores.finish)."""
        self.stores.finish()

    def _finish(
        self, job: int, chunk: int, start: int, cache: CacheOutcome = OFF, error: str | None = None
    ) -> float:
        """Report a compile's end (failed: ``error``), unless the run is over; its seconds."""
        with self._lock:
            end = time.monotonic_ns()
            running = self._running.pop(job, None)
            if running is not None and not self._closed:
                capacity, kind, background = running
                seconds = (end - start) / 1e9
                ok = error is None
                record = CompileJob(job, capacity, chunk, background, seconds, ok, cache)
                self.finished.append(record)
                info = cache.describe() if ok else {"error": error}
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
