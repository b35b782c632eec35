"""Time and memory accounting of a run, as an observer of its events (like the trace)."""

from __future__ import annotations

from compile_ahead.runtime.base.measure import TimeWeighted
from compile_ahead.runtime.ladder.reporting.events import BoundaryTiming, RunEvents
from compile_ahead.runtime.ladder.reporting.report import RungStats


class RunAccounting(RunEvents):
    """Decode and prefill time, per-rung rates, foreground compile, time-weighted KV bytes.

    Step, prefill, memory and boundary events come from the decode thread only.
    """

    def __init__(self, start_ns: int = 0, reserved_bytes: int = 0):
        self.restart(start_ns, reserved_bytes)

    def restart(self, start_ns: int, reserved_bytes: int = 0) -> None:
        """Account from start_ns on, forgetting anything before."""
        self.reserved = TimeWeighted(start_ns, reserved_bytes)
        self.committed = TimeWeighted(start_ns, 0)
        self.rungs: dict[int, RungStats] = {}
        self.decode_ns = 0
        self.prefill_ns = 0
        self.foreground_ns = 0
        self.prompt_len = 0
        self.step_ns: list[int] = []  # wall time of decode step i
        self.step_context: list[int] = []  # KV slots filled before step i

    def prefill(self, capacity: int, tokens: int, begin: int, end: int) -> None:
        self.prefill_ns += end - begin
        self.prompt_len = tokens

    def step(self, token_index: int, capacity: int, begin: int, end: int) -> None:
        ns = end - begin
        self.decode_ns += ns
        self.step_ns.append(ns)
        # One token per step: step i runs with the prompt and i decoded tokens in the KV.
        self.step_context.append(self.prompt_len + token_index)
        stats = self.rungs.setdefault(capacity, RungStats(capacity, 0, 0.0))
        stats.tokens += 1
        stats.decode_s += ns / 1e9

    def foreground(self, begin: int, end: int) -> None:
        self.foreground_ns += end - begin

    def memory(self, ts: int, reserved: int, committed: int) -> None:
        self.reserved.set(ts, reserved)
        self.committed.set(ts, committed)

    def boundary(self, timing: BoundaryTiming, job: int | None) -> None:
        self.reserved.bump_peak(timing.peak_reserved_bytes)

    def rate(self, capacity: int) -> float:
        stats = self.rungs.get(capacity)
        return (stats.tok_s or 0.0) if stats else 0.0
