"""Decode steps on a device track, one slice per step or per N steps (keeps 8K-token traces
small), with a tokens/s counter updated at each slice."""

from __future__ import annotations

from compile_ahead.profiling.perfetto.writer import TOKENS_PER_S, Args, TraceWriter, Track


class StepSlicer:
    """Feed it every decode step; it writes a slice each ``steps_per_slice`` steps.

    ``step(token, begin_ns, end_ns, rung)`` records one step; a slice covers the first step's
    begin to the last step's end, named "decode" (or "decode xN") with args rung, token (first
    token index), steps. A rung change or ``flush()`` closes the current group early, so a
    slice never spans a boundary switch.
    """

    def __init__(
        self,
        writer: TraceWriter,
        track: Track,
        steps_per_slice: int = 1,
        tokens_track: Track | None = None,
    ) -> None:
        if steps_per_slice < 1:
            raise ValueError(f"steps_per_slice must be >= 1, got {steps_per_slice}")
        self.writer = writer
        self.track = track
        self.steps_per_slice = steps_per_slice
        self.tokens_track = tokens_track or writer.counter_track(TOKENS_PER_S)
        self._group: list[tuple[int, int, int]] = []  # (token, begin, end)
        self._rung: int | None = None
        self._extra: Args = None

    def step(self, token: int, begin_ns: int, end_ns: int, rung: int, args: Args = None) -> None:
        if self._rung is not None and rung != self._rung:
            self.flush()
        self._rung, self._extra = rung, args
        self._group.append((token, begin_ns, end_ns))
        if len(self._group) >= self.steps_per_slice:
            self.flush()

    def flush(self) -> None:
        if not self._group:
            return
        # Taken before it is written: a flush cut short (an exception, an interrupt) never
        # writes its steps a second time, back in time on the track.
        group, self._group = self._group, []
        first, begin, _ = group[0]
        end = group[-1][2]
        n = len(group)
        args = {"rung": self._rung or 0, "token": first, "steps": n, **(self._extra or {})}
        with self.writer.batch():
            self.writer.slice(self.track, "decode" if n == 1 else f"decode x{n}", begin, end, args)
            self.writer.counter(self.tokens_track, end, n / max(1e-9, (end - begin) / 1e9))
