"""Decode steps timed on a freshly compiled rung, drawn on the session's trace: the switch to
the rung (flowing from its compile), then the steps in slices."""

from __future__ import annotations

import time
from typing import Any

from compile_ahead.profiling.session.profile_trace import ProfileTrace


def decode_on_rung(
    trace: ProfileTrace, step: Any, capacity: int, tokens: int, flow: int, ready_ns: int
) -> dict:
    """Time decode steps of a freshly compiled rung (KV inputs left at their defaults)."""
    import numpy as np

    count = min(tokens, capacity)
    ids = np.ones(step.spec.batch, dtype=np.int64)  # a token per sequence
    first = time.monotonic_ns()
    trace.writer.slice(
        trace.device_track,
        f"switch to C={capacity}",
        ready_ns,
        max(first, ready_ns),
        args={"rung": capacity},
        flows_in=[flow],
    )
    total_ns = 0
    for i in range(count):
        t0 = time.monotonic_ns()
        step.run(ids, past_length=i)
        t1 = time.monotonic_ns()
        total_ns += t1 - t0
        trace.slicer.step(i, t0, t1, capacity)
    trace.slicer.flush()
    return {"steps": count, "mean_step_ms": (total_ns / count / 1e6) if count else None}
