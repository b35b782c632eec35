"""The streamed trace writer, read back by Perfetto's own trace processor and by our validator."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from trace_processor import NodeTraceProcessor, unavailable_reason

from compile_ahead.profiling.perfetto.validate import validate_bytes, validate_trace
from compile_ahead.profiling.perfetto.writer import (
    GRAPHS_RESIDENT,
    KV_COMMITTED_BYTES,
    KV_RESERVED_BYTES,
    PROCESS_RSS_BYTES,
    TOKENS_PER_S,
    TraceWriteError,
    TraceWriter,
)

needs_tp = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


def write_ladder_trace(path: Path, base: int) -> dict:
    """A small decode/compile timeline, with two compile jobs emitted from their own threads."""
    w = TraceWriter(path)
    dec = w.device_track("NPU")
    counters = {
        name: w.counter_track(name)
        for name in (
            KV_RESERVED_BYTES,
            KV_COMMITTED_BYTES,
            PROCESS_RSS_BYTES,
            GRAPHS_RESIDENT,
            TOKENS_PER_S,
        )
    }
    flows = [w.new_flow(), w.new_flow()]

    def compile_job(i: int) -> None:
        job = w.compile_job_track(f"C={2048 << i}")
        begin = base + 1_000 + i * 10_000
        w.slice_begin(job, f"compile C={2048 << i}", begin, {"rung": 2048 << i})
        w.slice(job, "compile_model", begin + 100, begin + 8_000)
        w.slice_end(job, begin + 9_000, args={"deadline_margin_ms": 1.5}, flows_out=[flows[i]])

    jobs = [threading.Thread(target=compile_job, args=(i,)) for i in range(2)]
    for t in jobs:
        t.start()
    for step in range(30):
        ts = base + step * 1_000
        w.slice(dec, "decode", ts, ts + 900, {"token": step, "rung": 1024})
        w.counter(counters[KV_COMMITTED_BYTES], ts, step * 4096)
    for t in jobs:
        t.join()
    w.slice(dec, "switch 1024->2048", base + 30_000, base + 30_500, flows_in=[flows[0]])
    w.slice(dec, "KV migration", base + 30_500, base + 31_000, {"bytes": 1 << 20})
    w.slice(dec, "switch 2048->4096", base + 31_000, base + 31_100, flows_in=[flows[1]])
    for name, track in counters.items():
        if name != KV_COMMITTED_BYTES:
            w.counter(track, base + 31_100, 1.5)
    w.close()
    return {"slices": 30 + 2 * 2 + 3, "flows": 2, "counters": 30 + 4}


def test_written_trace_is_valid_and_published_on_close(tmp_path):
    path = tmp_path / "t.pftrace"
    expected = write_ladder_trace(path, time.monotonic_ns())
    report = validate_trace(path)
    assert report.ok, report.errors
    assert (report.slices, report.flows, report.counter_values) == (
        expected["slices"],
        expected["flows"],
        expected["counters"],
    )
    assert not path.with_name("t.pftrace.partial").exists()


@needs_tp
def test_trace_processor_reads_what_was_written(tmp_path):
    path = tmp_path / "t.pftrace"
    base = time.monotonic_ns()
    expected = write_ladder_trace(path, base)
    with NodeTraceProcessor.open(path) as tp:
        assert tp.error_stats() == []
        assert tp.scalar("select count(*) from slice") == expected["slices"]
        assert tp.scalar("select count(*) from flow") == expected["flows"]
        assert tp.scalar("select count(*) from counter") == expected["counters"]
        # Monotonic timestamps are the trace clock: no shift.
        assert tp.scalar("select min(ts) from slice where name = 'decode'") == base
        # Each flow goes from a compile job's slice to a switch on the decode track.
        rows = tp.rows(
            "select so.name as src, si.name as dst from flow f "
            "join slice so on f.slice_out = so.id join slice si on f.slice_in = si.id "
            "order by si.ts"
        )
        assert rows == [
            {"src": "compile C=2048", "dst": "switch 1024->2048"},
            {"src": "compile C=4096", "dst": "switch 2048->4096"},
        ]
        nested = tp.rows(
            "select p.name as parent from slice s join slice p on s.parent_id = p.id "
            "where s.name = 'compile_model'"
        )
        assert sorted(r["parent"] for r in nested) == ["compile C=2048", "compile C=4096"]
        names = {r["name"] for r in tp.rows("select name from track")}
        assert {
            "NPU decode",
            "CPU compile",
            "compile job 1: C=2048",
            KV_RESERVED_BYTES,
        } <= names or {
            "NPU decode",
            "CPU compile",
            "compile job 2: C=2048",
            KV_RESERVED_BYTES,
        } <= names
        args = tp.rows(
            "select key, int_value from args join slice on slice.arg_set_id = args.arg_set_id "
            "where slice.name = 'KV migration'"
        )
        assert {"key": "debug.bytes", "int_value": 1 << 20} in args


def test_invalid_calls_raise_and_write_nothing(tmp_path):
    path = tmp_path / "t.pftrace"
    w = TraceWriter(path)
    dec = w.device_track("CPU")
    rss = w.counter_track(PROCESS_RSS_BYTES)
    w.slice(dec, "decode", 1_000, 2_000)
    with pytest.raises(TraceWriteError, match="time goes back"):
        w.slice_begin(dec, "late", 1_500)
    with pytest.raises(TraceWriteError, match="no slice is open"):
        w.slice_end(dec, 3_000)
    with pytest.raises(TraceWriteError, match="counter track"):
        w.slice(rss, "not here", 3_000, 4_000)
    with pytest.raises(TraceWriteError, match="not a counter track"):
        w.counter(dec, 3_000, 1)
    with pytest.raises(TraceWriteError, match=r"ends .* before it begins"):
        w.slice(dec, "backwards", 5_000, 4_000)
    w.close()
    report = validate_trace(path)
    assert report.ok, report.errors
    assert report.slices == 1


def test_crash_leaves_a_readable_prefix_and_keeps_the_old_trace(tmp_path):
    path = tmp_path / "t.pftrace"
    write_ladder_trace(path, time.monotonic_ns())
    good = path.read_bytes()
    w = TraceWriter(path)  # a second run that "crashes" before close()
    dec = w.device_track("CPU")
    w.slice(dec, "decode", 10, 20)
    w.slice_begin(dec, "decode", 30)
    assert path.read_bytes() == good  # not replaced until close()
    prefix = w.partial_path.read_bytes()  # flushed as written
    report = validate_bytes(prefix)
    assert report.slices == 1
    assert report.errors == [f"track {dec.uuid:#x}: slice begun at 30 never ends"]
    truncated = validate_bytes(prefix[:-3])
    assert any("truncated" in e for e in truncated.errors)
    w.close()  # closing ends the open slice at its track's last time
    assert validate_trace(path).ok
