"""What a ladder run tells an observer (a trace writer, a progress bar) as it happens.

Timestamps are time.monotonic_ns(). Calls come from the decode thread and, for background
compiles, from the compile thread: an observer must be thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compile_ahead.interrupts import deferred
from compile_ahead.runtime.ladder.reporting.report import BoundaryRecord


class RunEvents:
    """No-op observer; subclasses override what they need."""

    def run_started(self, info: dict[str, Any]) -> None:
        """What is about to run: model label (synthetic or real weights), schedule, ladder."""

    def compile_started(
        self, job: int, capacity: int, kind: str, background: bool, ts: int
    ) -> None:
        pass

    def compile_finished(
        self, job: int, capacity: int, kind: str, ok: bool, ts: int, info: dict[str, Any]
    ) -> None:
        pass

    def worker_phases(self, job: int, phases: Sequence[Any]) -> None:
        """Phases a compile worker recorded for ``job`` (PhaseSpan, on CLOCK_MONOTONIC)."""

    def step(self, token_index: int, capacity: int, begin: int, end: int) -> None:
        pass

    def prefill(self, capacity: int, tokens: int, begin: int, end: int) -> None:
        pass

    def boundary(self, record: BoundaryTiming, job: int | None) -> None:
        """A switch to the next rung: wait, migration and rebinding, with their times."""

    def sequence_stopped(self, sequence: int, reason: str, tokens: int, ts: int) -> None:
        """A sequence of a batch stopped (EOS, its token limit, the top rung) after
        ``tokens`` generated tokens; the batch's steps go on without it."""

    def foreground(self, begin: int, end: int) -> None:
        """Compile time on the critical path: before decoding, or waiting at a boundary."""

    def memory(self, ts: int, reserved: int, committed: int) -> None:
        """The KV store's reserved and committed bytes from ts on."""

    def counters(self, ts: int, values: dict[str, float]) -> None:
        pass


@dataclass(frozen=True)
class BoundaryTiming:
    """A boundary's record with the monotonic times of its parts."""

    record: BoundaryRecord
    begin_ns: int
    end_ns: int
    migration_begin_ns: int
    migration_end_ns: int
    peak_reserved_bytes: int  # both buffers during a copy; too short to integrate


class FanOut(RunEvents):
    """Send every event to several observers, each event whole: a signal meanwhile takes
    effect after it (interrupts.deferred), so no observer is cut halfway (a trace writer
    between a slice's begin and end, the accounting between two of its lists)."""

    def __init__(self, *observers: RunEvents):
        self.observers = observers

    def _each(self, event: str, args: tuple[Any, ...]) -> None:
        with deferred():
            for o in self.observers:
                getattr(o, event)(*args)

    def run_started(self, *args: Any) -> None:
        self._each("run_started", args)

    def compile_started(self, *args: Any) -> None:
        self._each("compile_started", args)

    def compile_finished(self, *args: Any) -> None:
        self._each("compile_finished", args)

    def worker_phases(self, *args: Any) -> None:
        self._each("worker_phases", args)

    def step(self, *args: Any) -> None:
        self._each("step", args)

    def prefill(self, *args: Any) -> None:
        self._each("prefill", args)

    def boundary(self, *args: Any) -> None:
        self._each("boundary", args)

    def sequence_stopped(self, *args: Any) -> None:
        self._each("sequence_stopped", args)

    def foreground(self, *args: Any) -> None:
        self._each("foreground", args)

    def memory(self, *args: Any) -> None:
        self._each("memory", args)

    def counters(self, *args: Any) -> None:
        self._each("counters", args)
