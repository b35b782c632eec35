"""When rungs are compiled: all before decoding (eager), or one successor ahead in the background.

A policy decides; CompileJobs (compile_jobs.py) compiles and counts; the runner asks the
policy for the rung a boundary needs and never looks at how it got there.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from compile_ahead.errors import CompileAheadError
from compile_ahead.interrupts import future_result
from compile_ahead.runtime.ladder.compile_jobs import CompiledRung, CompileJobs
from compile_ahead.runtime.ladder.settings.schedules import CompileTiming, Schedule


@dataclass
class Taken:
    """The rung a boundary asked for, and how it was obtained."""

    rung: CompiledRung
    ready: bool  # compiled before the boundary asked for it (no wait)
    compile_error: str | None = None  # the background compile's failure, when retried
    retried: bool = False  # compiled again in the foreground after a failure


class RungUnavailable(CompileAheadError):
    """A successor failed in the background and again on its foreground retry."""

    def __init__(self, capacity: int, compile_error: str, retry_error: str):
        super().__init__(
            f"compiling rung {capacity} failed in the background ({compile_error}) and on the "
            f"foreground retry ({retry_error})"
        )
        self.compile_error = compile_error
        self.retry_error = retry_error


class RungPolicy:
    """Eager: every rung compiled before decoding; a boundary takes what is there."""

    def __init__(self, jobs: CompileJobs, rungs: tuple[int, ...]):
        self.jobs = jobs
        self.rungs = rungs

    def before_decoding(self, first: int, background: bool = False) -> None:
        """Compile what the schedule needs before decoding (``background``: while the
        prompt is prefilled on a prefill graph); the first rung comes first."""
        order = sorted(self.rungs, key=lambda c: c != first) if background else self.rungs
        for capacity in order:
            self.jobs.compile(capacity, background=background, length=0)

    def rung_taken(self, capacity: int, length: int) -> None:
        """``capacity`` became the active rung at context ``length``."""

    def take(self, capacity: int, length: int) -> Taken:
        return Taken(self.jobs.get(capacity), ready=True)

    def shutdown(self) -> None:
        """The run is over: stop reporting compiles, never wait for one."""
        self.jobs.close()

    def successor(self, capacity: int) -> int | None:
        i = self.rungs.index(capacity)
        return self.rungs[i + 1] if i + 1 < len(self.rungs) else None


class OneAheadPolicy(RungPolicy):
    """The first rung before decoding; then exactly one successor compiling in the background,
    started when a rung is taken. A failed successor is retried once in the foreground."""

    def __init__(self, jobs: CompileJobs, rungs: tuple[int, ...]):
        super().__init__(jobs, rungs)
        self._pending: dict[int, Future[CompiledRung]] = {}

    def before_decoding(self, first: int, background: bool = False) -> None:
        self.jobs.compile(first, background=background, length=0)

    def rung_taken(self, capacity: int, length: int) -> None:
        following = self.successor(capacity)
        if following is None:
            return
        if self._pending:
            raise RuntimeError("one-ahead: a successor compile is already in flight")
        # On a thread of the run's placement; an error is handed to take(), which decides
        # about a retry.
        self._pending[following] = self.jobs.submit(
            lambda: self.jobs.compile(following, True, length), f"rung-{following}"
        )

    def ready(self, capacity: int) -> bool:
        future = self._pending.get(capacity)
        return future is not None and future.done() and future.exception() is None

    def take(self, capacity: int, length: int) -> Taken:
        ready = self.ready(capacity)
        future = self._pending.pop(capacity)
        try:
            return Taken(future_result(future), ready)
        except Exception as err:
            compile_error = str(err)
        try:
            rung = self.jobs.compile(capacity, background=False, length=length)
        except Exception as err:
            raise RungUnavailable(capacity, compile_error, str(err)) from err
        return Taken(rung, ready=False, compile_error=compile_error, retried=True)

    def shutdown(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        super().shutdown()


def make_policy(schedule: Schedule, jobs: CompileJobs, rungs: tuple[int, ...]) -> RungPolicy:
    if schedule.compile is CompileTiming.ONE_AHEAD:
        return OneAheadPolicy(jobs, rungs)
    return RungPolicy(jobs, rungs)
