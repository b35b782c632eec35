"""What a ladder run tells an observer (a trace writer, a progress bar) as it happens.

Timestamps are time.monotonic_ns(). Calls come from the decode thread and, for background
compiles, from the compile thread: an observer must be thread-safe.
"""

from __future__ import annotations

from typing import Any


class RunEvents:
    """No-op observer; subclasses override what they need."""

    def compile_started(
        self, job: int, capacity: int, kind: str, background: bool, ts: int
    ) -> None:
        pass

    def compile_finished(
        self, job: int, capacity: int, kind: str, ok: bool, ts: int, info: dict[str, Any]
    ) -> None:
        pass

    def step(self, token_index: int, capacity: int, begin: int, end: int) -> None:
        pass

    def prefill(self, capacity: int, tokens: int, begin: int, end: int) -> None:
        pass

    def boundary(self, record: dict[str, Any], job: int | None, begin: int, end: int) -> None:
        """A switch to the next rung: wait, migration and rebinding between begin and end."""

    def counters(self, ts: int, values: dict[str, float]) -> None:
        pass


class FanOut(RunEvents):
    """Send every event to several observers."""

    def __init__(self, *observers: RunEvents):
        self.observers = observers

    def compile_started(self, *args: Any) -> None:
        for o in self.observers:
            o.compile_started(*args)

    def compile_finished(self, *args: Any) -> None:
        for o in self.observers:
            o.compile_finished(*args)

    def step(self, *args: Any) -> None:
        for o in self.observers:
            o.step(*args)

    def prefill(self, *args: Any) -> None:
        for o in self.observers:
            o.prefill(*args)

    def boundary(self, *args: Any) -> None:
        for o in self.observers:
            o.boundary(*args)

    def counters(self, *args: Any) -> None:
        for o in self.observers:
            o.counters(*args)
