"""Structural checks of a Perfetto protobuf trace, stricter than the trace processor (which
silently drops unmatched ends, invents tracks and loads truncated files).

Checks: the file is a whole sequence of packets; every track an event uses is described before
use; on each track time never goes back and every slice begin is ended on the same track;
counter values only on counter tracks and slices only elsewhere; every flow has exactly one
start and one end.

Usable as ``validate_trace(path)`` or ``compile-ahead trace validate FILE``
(exit status 0 when valid, 1 when not, 2 when the file cannot be read).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from compile_ahead.profiling.perfetto.varint import decode_varint

_MAX_ERRORS = 50


@dataclass
class TraceReport:
    path: str
    packets: int = 0
    tracks: int = 0
    counter_tracks: int = 0
    slices: int = 0
    instants: int = 0
    counter_values: int = 0
    flows: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def error(self, message: str) -> None:
        if len(self.errors) < _MAX_ERRORS:
            self.errors.append(message)
        elif len(self.errors) == _MAX_ERRORS:
            self.errors.append("... further errors not listed")

    def summary(self) -> str:
        head = (
            f"{self.path}: {self.packets} packets, {self.tracks} tracks "
            f"({self.counter_tracks} counter), {self.slices} slices, {self.instants} instants, "
            f"{self.counter_values} counter values, {self.flows} flows"
        )
        if self.ok:
            return head + ": valid"
        return head + f": INVALID ({len(self.errors)} problems)\n  " + "\n  ".join(self.errors)


def iter_packets(data: bytes, report: TraceReport) -> Iterator[pb.TracePacket]:
    """Packets of a `Trace` message; a cut-off or foreign tail is reported, not raised."""
    pos = 0
    while pos < len(data):
        start = pos
        if data[pos] != 0x0A:
            report.error(f"byte {start}: not a Trace.packet field (tag {data[pos]:#x})")
            return
        try:
            size, pos = decode_varint(data, pos + 1)
        except EOFError:
            report.error(f"byte {start}: file ends inside a packet header (truncated)")
            return
        if pos + size > len(data):
            report.error(f"byte {start}: file ends inside a packet (truncated)")
            return
        packet = pb.TracePacket()
        try:
            packet.ParseFromString(data[pos : pos + size])
        except Exception as err:  # protobuf's DecodeError has no stable import path
            report.error(f"byte {start}: packet does not parse ({err})")
            return
        pos += size
        yield packet


@dataclass
class _Tracks:
    """What the validator has seen so far, track by track."""

    described: dict[int, bool] = field(default_factory=dict)  # uuid -> is a counter track
    last_ts: dict[int, int] = field(default_factory=dict)
    open_slices: dict[int, list[int]] = field(default_factory=dict)
    flow_starts: Counter[int] = field(default_factory=Counter)
    flow_ends: Counter[int] = field(default_factory=Counter)


def validate_bytes(data: bytes, name: str = "<trace>") -> TraceReport:
    report = TraceReport(name)
    seen = _Tracks()
    for packet in iter_packets(data, report):
        report.packets += 1
        if packet.HasField("track_descriptor"):
            _descriptor(packet.track_descriptor, seen, report)
        if packet.HasField("track_event"):
            _event(packet, seen, report)
    for uuid, stack in seen.open_slices.items():
        for begin in stack:
            report.error(f"track {uuid:#x}: slice begun at {begin} never ends")
    starts, ends = seen.flow_starts, seen.flow_ends
    for flow in sorted(set(starts) | set(ends)):
        if starts[flow] != 1 or ends[flow] != 1:
            report.error(
                f"flow {flow}: {starts[flow]} start(s), {ends[flow]} end(s); expected one of each"
            )
    report.flows = sum(1 for f in starts if starts[f] == 1 and ends[f] == 1)
    if report.packets == 0:
        report.error("no packets")
    return report


def _descriptor(desc: pb.TrackDescriptor, seen: _Tracks, report: TraceReport) -> None:
    is_counter = desc.HasField("counter")
    described = seen.described
    if desc.uuid in described and described[desc.uuid] != is_counter:
        report.error(f"track {desc.uuid:#x} described twice with different kinds")
    if desc.uuid not in described:
        report.tracks += 1
        report.counter_tracks += is_counter
    if desc.parent_uuid and desc.parent_uuid not in described:
        report.error(f"track {desc.uuid:#x}: parent {desc.parent_uuid:#x} not described")
    described[desc.uuid] = is_counter


def _event(packet: pb.TracePacket, seen: _Tracks, report: TraceReport) -> None:
    event = packet.track_event
    uuid = event.track_uuid
    where = f"track {uuid:#x} at {packet.timestamp}"
    if uuid not in seen.described:
        report.error(f"{where}: event on a track that is not described")
        return
    if packet.timestamp < seen.last_ts.get(uuid, 0):
        report.error(f"{where}: time goes back (previous {seen.last_ts[uuid]})")
    seen.last_ts[uuid] = packet.timestamp
    is_counter_track = seen.described[uuid]
    kind = event.type
    if (kind == pb.TrackEvent.TYPE_COUNTER) != is_counter_track:
        what = "counter value on a slice track" if not is_counter_track else "slice event"
        report.error(f"{where}: {what}" + (" on a counter track" if is_counter_track else ""))
        return
    if kind == pb.TrackEvent.TYPE_SLICE_BEGIN:
        seen.open_slices.setdefault(uuid, []).append(packet.timestamp)
    elif kind == pb.TrackEvent.TYPE_SLICE_END:
        if not seen.open_slices.get(uuid):
            report.error(f"{where}: slice end without a begin on this track")
        else:
            seen.open_slices[uuid].pop()
            report.slices += 1
    elif kind == pb.TrackEvent.TYPE_INSTANT:
        report.instants += 1
    elif kind == pb.TrackEvent.TYPE_COUNTER:
        report.counter_values += 1
    seen.flow_starts.update(event.flow_ids)
    seen.flow_ends.update(event.terminating_flow_ids)


def validate_trace(path: str | Path) -> TraceReport:
    """Validate a trace file; raises OSError only when it cannot be read."""
    return validate_bytes(Path(path).read_bytes(), str(path))


# How to look at a trace (profiling/perfetto/ui.py; docs/usage/profiling.md, "Traces").
OPEN_TRACE_HINT = "open it in the Perfetto UI: compile-ahead trace open FILE [--offline]"
