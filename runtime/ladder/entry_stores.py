"""A run's compile cache entries: written off the decode's way, waited for at the run's end,
and reported as they are (stored, or not stored and why).

A graph compiled on the way to a token has its entry written after that token (``start``), a
graph compiled in the background as it finishes; several one after another on a helper thread.
A compile the run abandoned (still running when the run ended) writes none: its store is never
handed over (compile_jobs.CompileJobs). At the end (``finish``) the run writes what still
waits and waits for every entry being written. Interrupted, it starts none, says on one line
which it waits for, and a second signal gives them up (the cache removes their temporary
files, compile/cache/entry_writes.py); each job's record then says what is true: stored, given up
with nothing left in the cache, or never started.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead import interrupts
from compile_ahead.runtime.compile.cache.entry_writes import GIVEN_UP
from compile_ahead.runtime.compile.cache.outcome import CacheOutcome

if TYPE_CHECKING:
    from compile_ahead.runtime.compile.cache.store import CompileCache

NOT_STARTED = "not stored: interrupted before it was written"
# After a give-up, how long the entries written just before it may take to be reported (their
# threads only prune the cache and report).
REPORT_WAIT_S = 10.0


@dataclass(frozen=True)
class EntryStore:
    job: int
    what: str  # e.g. "the cache entry of decode C=2048", for an interrupted run's line
    write: Callable[[], CacheOutcome]  # writes the entry; what the cache did
    entry: Path | None  # where the entry goes


class EntryStores:
    def __init__(self, cache: CompileCache | None, report: Callable[[int, CacheOutcome], None]):
        self._cache = cache
        self._report = report  # a job's cache outcome, once it is known
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._queued: dict[int, EntryStore] = {}
        self._running: dict[int, EntryStore] = {}

    def add(self, store: EntryStore) -> None:
        with self._lock:
            self._queued[store.job] = store

    def start(self, jobs: list[int] | None = None) -> None:
        """Write the entries of ``jobs`` (default: all waiting), one after another on a
        helper thread."""
        with self._lock:
            chosen = list(self._queued) if jobs is None else jobs
        if chosen:
            interrupts.in_background(lambda: self._write_all(chosen), "store-entries")

    def finish(self) -> None:
        """The run's end (see the module docstring); a failed store never fails the run."""
        if not interrupts.interrupted():
            self.start()
        interrupts.wait_out(self._unfinished, self._wait, self._give_up)
        if self._cache is not None:
            self._cache.end_writes()

    def _write_all(self, jobs: list[int]) -> None:
        for job in jobs:
            with self._lock:
                store = None if interrupts.interrupted() else self._queued.pop(job, None)
                if store is not None:
                    self._running[job] = store
            if store is None:
                continue
            try:
                outcome = store.write()
            except Exception as err:
                outcome = CacheOutcome("miss", note=f"not stored: {err}")
            try:
                self._report(job, outcome)
            finally:
                with self._lock:
                    del self._running[job]
                    self._done.notify_all()

    def _unfinished(self) -> list[str]:
        if interrupts.interrupted():
            self._skip_queued()
            if self._cache is not None:
                self._cache.writes.close("interrupted")
        with self._lock:
            return [s.what for s in (*self._running.values(), *self._queued.values())]

    def _wait(self, timeout: float) -> None:
        with self._lock:
            self._done.wait(timeout)

    def _skip_queued(self) -> None:
        with self._lock:
            skipped, self._queued = list(self._queued.values()), {}
        for store in skipped:
            self._report(store.job, CacheOutcome("miss", note=NOT_STARTED))

    def _give_up(self) -> None:
        """A second signal: the entries being written are abandoned (nothing of them stays in
        the cache) and reported so; the ones that were complete just before are reported by
        their threads, waited for briefly."""
        given = self._cache.writes.give_up() if self._cache is not None else set()
        self._skip_queued()
        with self._lock:
            abandoned = [s for s in self._running.values() if s.entry in given]
        for store in abandoned:
            self._report(store.job, CacheOutcome("miss", note=GIVEN_UP))
        with self._lock:
            self._done.wait_for(
                lambda: all(s.entry in given for s in self._running.values()), REPORT_WAIT_S
            )
