"""A compile worker's phases on a compile job's track.

The worker records its ITT spans and its own steps on CLOCK_MONOTONIC, the clock of every
process on the machine and of this trace, so they are placed as they come: clamped to the job's
slice (the call that started the worker compile and imported its result) and nested on the
job's "phases" child track, as the in-process collector's phases are.
"""

from __future__ import annotations

from collections.abc import Iterable

from compile_ahead.profiling.perfetto.writer import TraceWriter, Track
from compile_ahead.profiling.traces.compile_jobs import Span, emit_nested
from compile_ahead.runtime.compile.worker.protocol import PhaseSpan

PHASES_TRACK = "phases"  # the child track name the in-process phases use too


def worker_spans(phases: Iterable[PhaseSpan], begin_ns: int, end_ns: int) -> list[Span]:
    """Trace spans for the phases that overlap [begin_ns, end_ns], clamped to it."""
    spans = []
    for p in phases:
        b, e = max(p.begin_ns, begin_ns), min(p.end_ns, end_ns)
        if b < e:
            spans.append(Span(b, e, p.name, {"domain": p.domain, "pid": p.pid}))
    return spans


def write_worker_phases(
    writer: TraceWriter,
    job_track: Track,
    phases: Iterable[PhaseSpan],
    begin_ns: int,
    end_ns: int,
) -> int:
    """Nest the phases under a compile job's track; returns how many spans were written."""
    spans = worker_spans(phases, begin_ns, end_ns)
    if spans:
        emit_nested(writer, writer.track(PHASES_TRACK, parent=job_track), spans)
    return len(spans)
