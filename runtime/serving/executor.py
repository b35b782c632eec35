"""What the engine drives: an executor runs buckets (compiles them, moves the KV between them,
prefills a request into a row, steps the rows), on a clock. Two implement it: the device
(``device_executor``: compiled [B, C] graphs of the runtime) and the simulator
(``simulator``: a cost model on a virtual clock), so one engine and one scheduler serve both.

Time is the clock's: an executor call takes as long as it takes on a wall clock, and advances a
virtual clock by its modelled cost; the engine reads ``clock.now()`` around each call either way.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from compile_ahead.runtime.serving.buckets import Bucket

# What the device does beside a background compile, as its records and the cost model name it:
# a decode step of a bucket of B rows (``activity_key``), a prefill, a switch between buckets,
# a compile in the foreground.
PREFILL, SWITCH, COMPILE = "prefill", "switch", "compile"


def activity_key(batch: int) -> str:
    """A decode step's activity: ``step:B``."""
    return f"step:{batch}"


class Clock(Protocol):
    kind: str  # "wall" or "virtual"

    def now(self) -> float:
        """Seconds since the engine started."""
        ...


class WallClock:
    kind = "wall"

    def __init__(self) -> None:
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0


class VirtualClock:
    kind = "virtual"

    def __init__(self) -> None:
        self._t = 0.0

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        self._t += max(seconds, 0.0)

    def jump_to(self, t: float) -> None:
        self._t = max(self._t, t)


def padded(tokens: int, chunk: int) -> int:
    """``tokens`` rounded up to whole calls of ``chunk`` tokens."""
    return -(-tokens // chunk) * chunk


def is_chunk(value: object) -> bool:
    """Whether ``value`` can be a prefill chunk: a whole number (not a bool) of at least 1."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


class Executor(Protocol):
    """Runs buckets. Rows are indices of the active bucket; a row's filled length is the
    engine's (it passes them in)."""

    @property
    def clock(self) -> Clock: ...

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """The ids that end a request (empty: none does)."""
        ...

    def bucket_bytes(self, bucket: Bucket) -> int:
        """Memory a compiled bucket holds (its graphs), for the memory budget."""
        ...

    def compile(self, bucket: Bucket) -> float:
        """Compile ``bucket`` now (the caller waits); its compile seconds."""
        ...

    def start_compile(self, bucket: Bucket) -> None:
        """Start compiling ``bucket`` in the background (one at a time)."""
        ...

    def finished_compile(self) -> tuple[Bucket, float] | None:
        """The background compile, with its seconds, once it has finished (then it is
        compiled); None while it runs or when none was started. Raises its error."""
        ...

    def wait(self, until_s: float | None) -> None:
        """Idle until ``until_s`` (None: no limit) or until the background compile ends,
        whichever comes first; returns at once when neither is pending."""
        ...

    def release(self, bucket: Bucket) -> None:
        """Free a compiled bucket's graphs (never the live KV)."""
        ...

    def activate(self, bucket: Bucket, moves: Mapping[int, int], lengths: Mapping[int, int]) -> int:
        """Serve from ``bucket`` (compiled): the live rows' KV moves from the active bucket's
        memory (old row -> new row, ``lengths[old]`` slots each); the bytes copied."""
        ...

    def prefill_tokens(self, prompt_len: int) -> int:
        """The tokens a prompt of ``prompt_len`` costs to prefill on the active bucket: whole
        calls of the prefill graph (``padded``), the measure of a prefill's cost."""
        ...

    def prefill(self, row: int, prompt: Sequence[int]) -> int:
        """Write ``prompt``'s KV into ``row`` (empty) of the active bucket; its first token."""
        ...

    def step(self, feeds: Mapping[int, tuple[int, int]]) -> dict[int, int]:
        """One decode step of the active bucket: each fed row's (token, filled length) in, its
        next token out (rows not fed are idle)."""
        ...

    def peak_rss_bytes(self) -> int:
        """Peak resident memory: measured, or modelled by the simulator."""
        ...

    def close(self) -> None: ...
