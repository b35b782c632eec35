"""py-spy samples on the trace clock.

``profile-compile --py-spy`` re-runs itself under ``py-spy record --format chrometrace``. The
child spins in :func:`clock_marker` for a known monotonic interval at start; py-spy's
chrometrace times are microseconds from its own start, so the marker's sampled span fixes the
offset to the monotonic clock: each of its edges gives an offset, biased by how late the first
sample inside (and the first sample after) the marker came, and the two are averaged.

Accuracy: a sample-derived slice edge is late by up to one sample period (more when the
machine is loaded and sampling slips), and the offset is uncertain by about one period plus
half the disagreement of the two edge offsets (``spread_ns``, recorded in the report). Expect
10-20 ms at the default 100 Hz on an idle machine.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from compile_ahead.profiling.perfetto.writer import TraceWriter
from compile_ahead.profiling.traces.compile_jobs import Span, emit_nested

MARKER_FUNCTION = "clock_marker"
MARKER_SECONDS = 0.15
PYSPY_ENV = "COMPILE_AHEAD_PYSPY_CHILD"


def find_pyspy() -> str | None:
    """py-spy where pip installs it for this interpreter (beside it, in its scripts
    directory, or beside the base interpreter of a venv sharing its site-packages), found also
    when the venv is not activated; else on PATH."""
    dirs = (
        os.path.dirname(sys.executable),
        sysconfig.get_path("scripts"),
        os.path.dirname(os.path.realpath(sys.executable)),
        os.path.dirname(getattr(sys, "_base_executable", sys.executable)),
    )
    for directory in dict.fromkeys(dirs):
        candidate = os.path.join(directory, "py-spy")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("py-spy")


def clock_marker(seconds: float = MARKER_SECONDS) -> tuple[int, int]:
    """Busy for ``seconds`` so py-spy sees this function; returns its monotonic bounds."""
    begin = time.monotonic_ns()
    deadline = begin + int(seconds * 1e9)
    while time.monotonic_ns() < deadline:
        pass
    return begin, time.monotonic_ns()


@dataclass
class PySpySamples:
    spans_by_thread: dict[int, list[Span]]
    offset_ns: int  # add to py-spy time (ns) to get monotonic ns
    spread_ns: int  # begin-edge offset minus end-edge offset: how well the two edges agree


def _spans(events: list[dict]) -> dict[int, list[Span]]:
    """Pair chrometrace B/E events per thread into spans (times in py-spy ns)."""
    out: dict[int, list[Span]] = {}
    stacks: dict[int, list[dict]] = {}
    for ev in sorted((e for e in events if e.get("ph") in ("B", "E")), key=lambda e: e["ts"]):
        tid = int(ev.get("tid", 0))
        stack = stacks.setdefault(tid, [])
        if ev["ph"] == "B":
            stack.append(ev)
        elif stack:
            begin = stack.pop()
            args = begin.get("args") or {}
            where = f"{args.get('filename', '?')}:{args.get('line', '?')}"
            out.setdefault(tid, []).append(
                Span(int(begin["ts"] * 1000), int(ev["ts"] * 1000), begin["name"], {"at": where})
            )
    return out


def load_samples(path: Path, marker: tuple[int, int]) -> PySpySamples:
    data = json.loads(path.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    spans = _spans(events)
    marks = [s for spans_ in spans.values() for s in spans_ if s.name == MARKER_FUNCTION]
    if not marks:
        raise ValueError(
            f"{path}: no sample inside {MARKER_FUNCTION}(); cannot align py-spy to the trace"
        )
    first = min(s.begin_ns for s in marks)
    last = max(s.end_ns for s in marks)
    from_begin, from_end = marker[0] - first, marker[1] - last
    return PySpySamples(spans, (from_begin + from_end) // 2, from_begin - from_end)


def emit_samples(writer: TraceWriter, samples: PySpySamples) -> int:
    """One track per sampled thread under "py-spy samples"; returns the number of spans."""
    group = writer.track("py-spy samples")
    count = 0
    for tid, spans in sorted(samples.spans_by_thread.items()):
        moved = [
            Span(s.begin_ns + samples.offset_ns, s.end_ns + samples.offset_ns, s.name, s.args)
            for s in spans
        ]
        emit_nested(writer, writer.track(f"py-spy thread {tid:#x}", parent=group), moved)
        count += len(moved)
    return count
