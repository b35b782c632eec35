"""Types of the perf_event_open counters module built from ext/perfcounters (module.cpp)."""

from collections.abc import Sequence
from typing import TypedDict

class Reading(TypedDict):
    """One event's count over a window (value None: unavailable, and why)."""

    value: float | None
    running_fraction: float
    unavailable: str | None

def known_events() -> list[str]: ...

class CounterWindow:
    """One counting window: open (on every current thread), start(), stop()."""

    def __init__(self, events: Sequence[str]) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> dict[str, Reading]: ...
    @property
    def unavailable(self) -> dict[str, str]: ...
