"""Put a profiled compile on the trace: one job track under "CPU compile" with the build and
compile_model phases nested in the job slice, the ITT spans of each thread that worked for it on
child tracks, and the pass managers (with their passes) on a "transformations" child track."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compile_ahead.profiling.perfetto.writer import Args, ArgValue, TraceWriter, Track

if TYPE_CHECKING:
    from compile_ahead.profiling.session.rung_profile import RungProfile


@dataclass
class Span:
    begin_ns: int
    end_ns: int
    name: str
    args: Args = None


def emit_nested(writer: TraceWriter, track: Track, spans: Iterable[Span]) -> int:
    """Write spans on one track as properly nested slices.

    A span that would cross out of its enclosing one (approximate placements) is clamped to the
    enclosing end and marked with the arg ``clamped``. Returns how many were clamped.
    """
    ordered = sorted(spans, key=lambda s: (s.begin_ns, -s.end_ns))
    stack: list[int] = []
    clamped = 0
    with writer.batch():
        for span in ordered:
            while stack and stack[-1] <= span.begin_ns:
                writer.slice_end(track, stack.pop())
            begin = max(span.begin_ns, track.last_ts)
            end, args = max(span.end_ns, begin), span.args
            if stack and end > stack[-1]:
                end, clamped = stack[-1], clamped + 1
                args = {**(args or {}), "clamped": True}
            writer.slice_begin(track, span.name, begin, args)
            stack.append(end)
        while stack:
            writer.slice_end(track, stack.pop())
    return clamped


def _pass_spans(profile: RungProfile) -> list[Span]:
    spans: list[Span] = []
    if profile.passes is None:
        return spans
    for m in profile.passes.managers:
        if m.start_ns is None or m.end_ns is None:
            continue
        spans.append(
            Span(
                m.start_ns,
                m.end_ns,
                f"manager {m.name}",
                {"applied": m.applied, "passes": len(m.passes), "depth": m.depth},
            )
        )
        for p in m.passes:
            if p.start_ns is not None:
                spans.append(
                    Span(
                        p.start_ns,
                        p.start_ns + p.duration_ns,
                        p.name,
                        {"applied": p.applied, "placement": "approximate"},
                    )
                )
    return spans


def begin_job(
    writer: TraceWriter,
    capacity: int,
    begin_ns: int,
    label: str = "",
    chunk: int = 1,
    shape: str | None = None,
) -> Track:
    """Open a compile job's track and slice when the compile starts (so a crash shows it); a
    ``shape`` (modes.PrefillShape) is the rung's prefill graph of ``chunk`` tokens
    per call, else (``chunk`` 1) its decode graph."""
    what = f"C={capacity}" if shape is None else f"prefill C={capacity} L={chunk} {shape}"
    job = writer.compile_job_track(label or what)
    args: dict[str, int | str] = {"rung": capacity}
    if not label:  # a labelled job is a model compiled as it is: neither kind
        args |= {"kind": "decode" if shape is None else "prefill", "chunk": chunk}
        if shape is not None:
            args["prefill_shape"] = shape
    writer.slice_begin(job, f"compile {what}", begin_ns, args)
    return job


def end_job(
    writer: TraceWriter,
    job: Track,
    profile: RungProfile,
    thread_names: dict[int, str],
    flows_out: Iterable[int] = (),
    extra_args: Args = None,
) -> None:
    """Nest the profiled phases in the open job slice, then end it at the compile's end."""
    phases = profile.breakdown_ns()
    with writer.batch():
        emit_nested(
            writer,
            job,
            [
                Span(*profile.build, "build graph"),
                Span(
                    *profile.compile,
                    "compile_model",
                    {"from": "ITT Compile model" if profile.compile_from_itt else "wall time"},
                ),
            ],
        )
        by_thread: dict[int, list[Span]] = {}
        for e in profile.spans:
            by_thread.setdefault(e.tid, []).append(
                Span(e.begin_ns, e.end_ns, e.name, {"domain": e.domain})
            )
        for tid in sorted(by_thread, key=lambda t: min(s.begin_ns for s in by_thread[t])):
            name = f"{thread_names.get(tid, 'thread')} [{tid}]"
            emit_nested(writer, writer.track(name, parent=job), by_thread[tid])
        passes = _pass_spans(profile)
        if passes:
            emit_nested(writer, writer.track("transformations", parent=job), passes)
        args: dict[str, ArgValue] = {
            k + "_ms": round(v / 1e6, 3) for k, v in phases.items() if v is not None
        }
        if profile.rss_peak is not None:
            args["rss_peak_bytes"] = profile.rss_peak
        args.update(extra_args or {})
        writer.slice_end(job, max(profile.end_ns, job.last_ts), args=args, flows_out=flows_out)
