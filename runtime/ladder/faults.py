"""A run's injected faults carried out (what it is told is settings/faults.py's ``Faults``):
each failure fires as often as it was asked, then no more."""

from __future__ import annotations

import time

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.ladder.settings.faults import Faults


class FaultInjector:
    """One run's injections: each failure fires as often as it was asked, then no more."""

    def __init__(self, faults: Faults):
        self.faults = faults
        self._failures_left = dict(faults.fail_compiles)
        self._worker_faults = dict(faults.worker_faults)

    def take_worker_fault(self, capacity: int) -> str | None:
        """The worker fault to inject into this rung's compile (once)."""
        return self._worker_faults.pop(capacity, None)

    def after_step(self) -> None:
        if self.faults.step_delay_s > 0:
            time.sleep(self.faults.step_delay_s)

    def before_compile(self, capacity: int, background: bool) -> None:
        if background and self.faults.compile_delay_s > 0:
            time.sleep(self.faults.compile_delay_s)
        if self._failures_left.get(capacity, 0) > 0:
            self._failures_left[capacity] -= 1
            raise CompileAheadError(f"injected compile failure for capacity {capacity}")
