"""Helpers that lay recorded spans and decode steps onto tracks, read back by the validator and
the trace processor."""

from __future__ import annotations

import pytest
from trace_processor import NodeTraceProcessor, unavailable_reason

from compile_ahead.profiling.perfetto.validate import validate_trace
from compile_ahead.profiling.perfetto.writer import TraceWriter
from compile_ahead.profiling.traces.compile_jobs import Span, emit_nested
from compile_ahead.profiling.traces.decode_steps import StepSlicer

needs_tp = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@needs_tp
def test_emit_nested_keeps_nesting_and_clamps_crossers(tmp_path):
    path = tmp_path / "t.pftrace"
    w = TraceWriter(path)
    track = w.track("phases")
    clamped = emit_nested(
        w,
        track,
        [
            Span(100, 200, "inner", {"k": 1}),
            Span(0, 1000, "outer"),
            Span(900, 1100, "crosser"),  # starts inside outer, ends after it
            Span(1200, 1300, "later"),
        ],
    )
    w.close()
    assert clamped == 1
    assert validate_trace(path).ok
    with NodeTraceProcessor.open(path) as tp:
        rows = tp.rows(
            "select s.name, s.ts, s.dur, s.depth, p.name as parent from slice s "
            "left join slice p on s.parent_id = p.id order by s.ts, s.depth"
        )
    assert rows == [
        {"name": "outer", "ts": 0, "dur": 1000, "depth": 0, "parent": None},
        {"name": "inner", "ts": 100, "dur": 100, "depth": 1, "parent": "outer"},
        {"name": "crosser", "ts": 900, "dur": 100, "depth": 1, "parent": "outer"},
        {"name": "later", "ts": 1200, "dur": 100, "depth": 0, "parent": None},
    ]


@needs_tp
def test_step_slicer_groups_steps_and_splits_at_rung_changes(tmp_path):
    path = tmp_path / "t.pftrace"
    w = TraceWriter(path)
    slicer = StepSlicer(w, w.device_track("NPU"), steps_per_slice=4)
    for token in range(10):  # rung 1024 for tokens 0..5, then 2048
        slicer.step(token, token * 100, token * 100 + 90, 1024 if token < 6 else 2048)
    slicer.flush()
    w.close()
    assert validate_trace(path).ok
    with NodeTraceProcessor.open(path) as tp:
        slices = tp.rows(
            "select s.name, s.ts, s.dur, "
            "extract_arg(s.arg_set_id, 'debug.token') as token, "
            "extract_arg(s.arg_set_id, 'debug.rung') as rung "
            "from slice s order by s.ts"
        )
        rates = tp.rows("select ts, value from counter order by ts")
    assert slices == [
        {"name": "decode x4", "ts": 0, "dur": 390, "token": 0, "rung": 1024},
        {"name": "decode x2", "ts": 400, "dur": 190, "token": 4, "rung": 1024},
        {"name": "decode x4", "ts": 600, "dur": 390, "token": 6, "rung": 2048},
    ]
    assert [r["ts"] for r in rates] == [390, 590, 990]
    assert rates[0]["value"] == pytest.approx(4 / 390e-9)


def test_step_slicer_rejects_zero_steps(tmp_path):
    w = TraceWriter(tmp_path / "t.pftrace")
    with pytest.raises(ValueError, match="steps_per_slice"):
        StepSlicer(w, w.device_track("CPU"), steps_per_slice=0)
    w.close()
