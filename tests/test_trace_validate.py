"""The structural validator on traces built packet by packet (independently of the writer)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from compile_ahead.profiling.perfetto.validate import validate_bytes

SLICE, COUNTER = 1, 2
BEGIN, END, INSTANT, VALUE = (
    pb.TrackEvent.TYPE_SLICE_BEGIN,
    pb.TrackEvent.TYPE_SLICE_END,
    pb.TrackEvent.TYPE_INSTANT,
    pb.TrackEvent.TYPE_COUNTER,
)


def descriptor(uuid: int, counter: bool = False) -> pb.TracePacket:
    packet = pb.TracePacket(trusted_packet_sequence_id=1)
    packet.track_descriptor.uuid = uuid
    packet.track_descriptor.name = f"track {uuid}"
    if counter:
        packet.track_descriptor.counter.unit = pb.CounterDescriptor.UNIT_COUNT
    return packet


def event(uuid: int, ts: int, kind: int, flows=(), ends=()) -> pb.TracePacket:
    packet = pb.TracePacket(timestamp=ts, trusted_packet_sequence_id=1)
    packet.track_event.track_uuid = uuid
    packet.track_event.type = kind
    if kind == VALUE:
        packet.track_event.counter_value = 7
    elif kind != END:
        packet.track_event.name = "x"
    packet.track_event.flow_ids.extend(flows)
    packet.track_event.terminating_flow_ids.extend(ends)
    return packet


def trace(*packets: pb.TracePacket) -> bytes:
    t = pb.Trace()
    t.packet.extend(packets)
    return t.SerializeToString()


GOOD = (
    descriptor(SLICE),
    descriptor(COUNTER, counter=True),
    event(SLICE, 10, BEGIN),
    event(SLICE, 11, BEGIN),
    event(SLICE, 12, END, flows=[5]),
    event(SLICE, 13, END),
    event(SLICE, 14, INSTANT, ends=[5]),
    event(COUNTER, 10, VALUE),
)


def test_good_trace_passes_with_counts():
    report = validate_bytes(trace(*GOOD))
    assert report.ok, report.errors
    assert (report.tracks, report.counter_tracks, report.slices, report.instants) == (2, 1, 2, 1)
    assert (report.counter_values, report.flows) == (1, 1)


@pytest.mark.parametrize(
    ("packets", "problem"),
    [
        ((descriptor(SLICE), event(SLICE, 5, END)), "slice end without a begin"),
        ((descriptor(SLICE), event(SLICE, 5, BEGIN)), "never ends"),
        (
            (descriptor(SLICE), event(SLICE, 5, BEGIN), event(SLICE, 4, END)),
            "time goes back",
        ),
        ((event(SLICE, 5, INSTANT),), "not described"),
        ((descriptor(SLICE), event(SLICE, 5, INSTANT, flows=[9])), "flow 9: 1 start(s), 0 end"),
        (
            (
                descriptor(SLICE),
                event(SLICE, 5, INSTANT, flows=[9]),
                event(SLICE, 6, INSTANT, flows=[9]),
                event(SLICE, 7, INSTANT, ends=[9]),
            ),
            "flow 9: 2 start(s), 1 end",
        ),
        ((descriptor(SLICE), event(SLICE, 5, VALUE)), "counter value on a slice track"),
        ((descriptor(COUNTER, counter=True), event(COUNTER, 5, BEGIN)), "on a counter track"),
    ],
)
def test_each_structural_error_is_reported(packets, problem):
    report = validate_bytes(trace(*packets))
    assert not report.ok
    assert any(problem in e for e in report.errors), report.errors


def test_truncated_and_foreign_bytes_are_reported():
    data = trace(*GOOD)
    assert any("truncated" in e for e in validate_bytes(data[:-2]).errors)
    assert any("not a Trace.packet" in e for e in validate_bytes(data + b"\x12\x00").errors)
    assert validate_bytes(b"").errors == ["no packets"]


def test_command_line_exit_status(tmp_path):
    good, bad = tmp_path / "good.pftrace", tmp_path / "bad.pftrace"
    good.write_bytes(trace(*GOOD))
    bad.write_bytes(trace(descriptor(SLICE), event(SLICE, 5, END)))
    cmd = [sys.executable, "-m", "compile_ahead.commands", "trace", "validate"]
    ok = subprocess.run([*cmd, str(good)], capture_output=True, text=True)
    assert ok.returncode == 0 and ": valid" in ok.stdout
    invalid = subprocess.run([*cmd, str(bad)], capture_output=True, text=True)
    assert invalid.returncode == 1 and "INVALID" in invalid.stdout
    missing = subprocess.run([*cmd, str(tmp_path / "none")], capture_output=True, text=True)
    assert missing.returncode == 2 and "cannot read" in missing.stderr
