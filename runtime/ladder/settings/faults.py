"""Test and benchmark hooks: slow or failing compiles and steps, injected on purpose.

``Faults`` is what a run is told (part of its RunConfig, frozen, checked once); a run injects
them through its own ``FaultInjector`` (ladder/faults.py), which counts what has fired.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile.worker.protocol import FAULTS

if TYPE_CHECKING:
    from compile_ahead.runtime.ladder.settings.capacities import Ladder


@dataclass(frozen=True)
class Faults:
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

    @classmethod
    def from_flags(
        cls,
        compile_delay_s: float = 0.0,
        fail_compiles: list[str] | tuple[str, ...] = (),
        step_delay_s: float = 0.0,
        worker_faults: list[str] | tuple[str, ...] = (),
        store_delay_s: float = 0.0,
    ) -> Faults:
        """From the command line's spellings: CAPACITY[:COUNT] failures, CAPACITY:KIND worker
        faults."""
        fail: dict[int, int] = {}
        for item in fail_compiles:
            cap, _, count = item.partition(":")
            try:
                fail[int(cap)] = int(count or 1)
            except ValueError:
                raise CompileAheadError(
                    f"--inject-compile-failure takes CAPACITY[:COUNT], got {item!r}"
                ) from None
        worker: dict[int, str] = {}
        for item in worker_faults:
            cap, _, kind = item.partition(":")
            if not cap.isdigit() or kind not in FAULTS:
                raise CompileAheadError(
                    f"--inject-worker-fault takes CAPACITY:KIND with KIND one of "
                    f"{', '.join(FAULTS)}, got {item!r}"
                )
            worker[int(cap)] = kind
        return cls(compile_delay_s, fail, step_delay_s, worker, store_delay_s)

    def check(self) -> None:
        """The values themselves: finite delays, positive capacities and counts."""
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

    def check_rungs(self, ladder: Ladder) -> None:
        """Every injected failure names a rung of ``ladder`` (else it could never fire)."""
        for flag, capacities in (
            ("--inject-compile-failure", self.fail_compiles),
            ("--inject-worker-fault", self.worker_faults),
        ):
            for capacity in capacities:
                if capacity not in ladder.rungs:
                    raise CompileAheadError(f"{flag} {capacity}: not a rung of the ladder {ladder}")
