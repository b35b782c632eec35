"""Streamed Perfetto traces of device decode against CPU compile.

API (thread-safe: a decode thread and background compile threads may emit concurrently)::

    w = TraceWriter(path)                      # streams to a .partial file, renamed on close()
    dec = w.device_track("NPU")                # slice track "NPU decode"
    job = w.compile_job_track("C=2048")        # a new child track of "CPU compile" per job
    kv = w.counter_track(KV_RESERVED_BYTES)    # counter tracks, idempotent by name
    w.slice_begin(dec, "decode", ts_ns, args={"token": 17, "rung": 1024})
    w.slice_end(dec, ts_ns)
    w.slice(job, "compile C=2048", begin_ns, end_ns, args=..., flows_out=[flow])
    flow = w.new_flow()                        # compile end -> the switch that consumes it
    w.slice(dec, "switch 1024->2048", t0, t1, flows_in=[flow])
    w.counter(kv, ts_ns, value)
    w.instant(dec, "deadline missed", ts_ns)
    w.close()

Timestamps are ``time.monotonic_ns()`` values (None means now). The first packet is a clock
snapshot (monotonic, boottime, realtime) that makes the monotonic clock the trace clock. Every
packet is flushed as it is written, so a crash leaves a loadable prefix in the ``.partial``
file (``NAME.RANDOM.partial``, a staged file: atomic.py) and never replaces an earlier good
trace. Per track, time must not go back and ends must
match begins; violations raise TraceWriteError without writing anything. A write the system
refuses (disk full, read-only) does not stop the traced work: the writer stops writing,
removes its ``.partial`` file, and close() raises OutputWriteError naming the trace.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from compile_ahead.errors import OutputWriteError, write_error
from compile_ahead.output.atomic import StagedFile
from compile_ahead.profiling.perfetto.varint import encode_varint

COMPILE_GROUP = "CPU compile"
KV_RESERVED_BYTES = "KV reserved bytes"
KV_COMMITTED_BYTES = "KV committed bytes"
PROCESS_RSS_BYTES = "Process RSS"
GRAPHS_RESIDENT = "Compiled graphs resident"
TOKENS_PER_S = "Tokens/s"
STANDARD_COUNTERS = {
    KV_RESERVED_BYTES: "bytes",
    KV_COMMITTED_BYTES: "bytes",
    PROCESS_RSS_BYTES: "bytes",
    GRAPHS_RESIDENT: "count",
    TOKENS_PER_S: "count",
}

_UNITS = {
    "bytes": pb.CounterDescriptor.UNIT_SIZE_BYTES,
    "count": pb.CounterDescriptor.UNIT_COUNT,
    "ns": pb.CounterDescriptor.UNIT_TIME_NS,
    "": pb.CounterDescriptor.UNIT_UNSPECIFIED,
}
_SEQUENCE_ID = 1
_MONOTONIC = pb.BUILTIN_CLOCK_MONOTONIC
ArgValue = int | float | str | bool
Args = Mapping[str, ArgValue] | None


class TraceWriteError(ValueError):
    """A call that would make the trace structurally invalid; nothing was written for it."""


@dataclass(eq=False)
class Track:
    uuid: int
    name: str
    is_counter: bool = False
    parent: Track | None = None
    last_ts: int = 0
    open_names: list[str] = field(default_factory=list)


def _frame(packet: pb.TracePacket) -> bytes:
    """One packet as a `Trace.packet` field (tag 1, length-delimited): appendable on disk."""
    body = packet.SerializeToString()
    return b"\x0a" + encode_varint(len(body)) + body


def _annotate(event: pb.TrackEvent, args: Args) -> None:
    for key, value in (args or {}).items():
        ann = event.debug_annotations.add()
        ann.name = str(key)
        if isinstance(value, bool):
            ann.bool_value = value
        elif isinstance(value, int):
            ann.int_value = value
        elif isinstance(value, float):
            ann.double_value = value
        else:
            ann.string_value = str(value)


class TraceWriter:
    def __init__(
        self,
        path: str | os.PathLike[str],
        process_name: str = "compile-ahead",
        append: bool = False,
        pid: int | None = None,
    ) -> None:
        """``append=True`` continues a finished trace (e.g. adding py-spy samples after the
        traced process exited) on a second packet sequence with its own track ids."""
        self.path = Path(path)
        try:
            # A name of its own, so two writers aimed at one path never interleave.
            self._staged = StagedFile(self.path, suffix=".partial")
        except OSError as err:
            raise write_error(self.path, err) from None
        self.partial_path = self._staged.path
        self._file = self._staged.file  # closed when published or discarded
        try:
            self._start(process_name, append, pid)
        except BaseException:  # e.g. an interrupt: no .partial file is left behind
            self._staged.discard()
            raise

    def _start(self, process_name: str, append: bool, pid: int | None) -> None:
        # The first write the system refused; from then on nothing is written.
        self.error: OutputWriteError | None = None
        self._batch_depth = 0
        if append:
            self._write_raw(self.path.read_bytes())
        self._sequence_id = _SEQUENCE_ID + (1 if append else 0)
        self._lock = threading.RLock()
        self._uuids = itertools.count(0x10000000 if append else 0x1000)
        self._flows = itertools.count(1 << 40 if append else 1)  # ids are trace-global
        self._tracks_by_key: dict[tuple[int, str], Track] = {}
        self._jobs = itertools.count(1)
        self._slice_tracks: list[Track] = []
        self._closed = False
        self.counts = {"slices": 0, "counters": 0, "flows": 0, "instants": 0}
        self._write_clock_snapshot()
        self.process = Track(next(self._uuids), process_name)
        desc = pb.TrackDescriptor(uuid=self.process.uuid)
        desc.process.pid = pid if pid is not None else os.getpid()
        desc.process.process_name = process_name
        self._emit_descriptor(desc)
        self._compile_group: Track | None = None

    # ---- tracks ---------------------------------------------------------------------------

    def track(self, name: str, parent: Track | None = None) -> Track:
        """A slice track by name under parent (the process by default); same name, same track."""
        return self._track(name, parent, counter_unit=None)

    def device_track(self, device: str) -> Track:
        return self.track(f"{device} decode")

    def counter_track(self, name: str, unit: str | None = None) -> Track:
        """A counter track; unit is "bytes", "count", "ns" or "" (default from the name)."""
        chosen = unit if unit is not None else STANDARD_COUNTERS.get(name, "")
        if chosen not in _UNITS:
            raise TraceWriteError(f"counter unit {chosen!r}: expected one of {sorted(_UNITS)}")
        return self._track(name, None, counter_unit=chosen)

    def compile_job_track(self, label: str) -> Track:
        """A fresh track for one compile job under "CPU compile": concurrent jobs never share."""
        with self._lock:
            if self._compile_group is None:
                self._compile_group = self.track(COMPILE_GROUP)
            number = next(self._jobs)
            return self._new_track(f"compile job {number}: {label}", self._compile_group, None)

    def _track(self, name: str, parent: Track | None, counter_unit: str | None) -> Track:
        parent = parent or self.process
        with self._lock:
            key = (parent.uuid, name)
            existing = self._tracks_by_key.get(key)
            if existing is not None:
                if existing.is_counter != (counter_unit is not None):
                    kind = "counter" if existing.is_counter else "slice"
                    raise TraceWriteError(f"track {name!r} already exists as a {kind} track")
                return existing
            made = self._new_track(name, parent, counter_unit)
            self._tracks_by_key[key] = made
            return made

    def _new_track(self, name: str, parent: Track, counter_unit: str | None) -> Track:
        made = Track(next(self._uuids), name, counter_unit is not None, parent)
        desc = pb.TrackDescriptor(uuid=made.uuid, parent_uuid=parent.uuid, name=name)
        if counter_unit is not None:
            desc.counter.unit = _UNITS[counter_unit]
        else:
            desc.child_ordering = pb.TrackDescriptor.CHRONOLOGICAL
            self._slice_tracks.append(made)
        self._emit_descriptor(desc)
        return made

    # ---- events ---------------------------------------------------------------------------

    def new_flow(self) -> int:
        """An id to pass as flows_out on the producer and flows_in on the consumer."""
        return next(self._flows)

    def slice_begin(
        self,
        track: Track,
        name: str,
        ts_ns: int | None = None,
        args: Args = None,
        flows_in: Iterable[int] = (),
        flows_out: Iterable[int] = (),
    ) -> None:
        with self._lock:
            ts = self._check_time(track, ts_ns, slice_event=True)
            event = pb.TrackEvent(type=pb.TrackEvent.TYPE_SLICE_BEGIN, name=name)
            _annotate(event, args)
            self._attach_flows(event, flows_in, flows_out)
            track.open_names.append(name)
            self._emit_event(track, ts, event)

    def slice_end(
        self,
        track: Track,
        ts_ns: int | None = None,
        args: Args = None,
        flows_out: Iterable[int] = (),
    ) -> None:
        with self._lock:
            if not track.open_names:
                raise TraceWriteError(f"slice_end on {track.name!r}: no slice is open there")
            ts = self._check_time(track, ts_ns, slice_event=True)
            event = pb.TrackEvent(type=pb.TrackEvent.TYPE_SLICE_END)
            _annotate(event, args)
            self._attach_flows(event, (), flows_out)
            track.open_names.pop()
            self.counts["slices"] += 1
            self._emit_event(track, ts, event)

    def slice(
        self,
        track: Track,
        name: str,
        begin_ns: int,
        end_ns: int,
        args: Args = None,
        flows_in: Iterable[int] = (),
        flows_out: Iterable[int] = (),
    ) -> None:
        """A complete slice (begin and end known); flows_out leave from its end."""
        if end_ns < begin_ns:
            raise TraceWriteError(f"slice {name!r} ends ({end_ns}) before it begins ({begin_ns})")
        with self._lock, self.batch():
            self.slice_begin(track, name, begin_ns, args, flows_in=flows_in)
            self.slice_end(track, end_ns, flows_out=flows_out)

    def instant(self, track: Track, name: str, ts_ns: int | None = None, args: Args = None) -> None:
        with self._lock:
            ts = self._check_time(track, ts_ns, slice_event=True)
            event = pb.TrackEvent(type=pb.TrackEvent.TYPE_INSTANT, name=name)
            _annotate(event, args)
            self.counts["instants"] += 1
            self._emit_event(track, ts, event)

    def counter(self, track: Track, ts_ns: int | None, value: float) -> None:
        with self._lock:
            ts = self._check_time(track, ts_ns, slice_event=False)
            event = pb.TrackEvent(type=pb.TrackEvent.TYPE_COUNTER)
            if isinstance(value, int):
                event.counter_value = value
            else:
                event.double_counter_value = float(value)
            self.counts["counters"] += 1
            self._emit_event(track, ts, event)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Write several events with one flush (bulk emission of recorded phases)."""
        with self._lock:
            self._batch_depth += 1
            try:
                yield
            finally:
                self._batch_depth -= 1
                if self._batch_depth == 0 and not self._closed and self.error is None:
                    try:
                        self._file.flush()
                    except OSError as err:
                        self._give_up(err)

    def close(self, to: Path | None = None) -> Path:
        """End open slices at the last time on their track, flush, and publish the file at
        ``to`` (default the writer's path; another name in its directory, e.g. a failed run's
        sibling); returns where it is. Raises OutputWriteError (the .partial file removed)
        when the trace could not be written, or (the .partial file kept and named) when ``to``
        is no longer a regular file or absent."""
        with self._lock:
            if self._closed:
                if self.error is not None:
                    raise self.error
                return self.path
            self._end_open_slices()
            self._closed = True
            if self.error is None:
                try:
                    return self._staged.publish(to)
                except OSError as err:
                    self._give_up(err, to)
            assert self.error is not None
            raise self.error

    def discard(self) -> None:
        """End the trace and remove it: nothing is published."""
        with self._lock:
            self._closed = True
            self._staged.discard()

    def _end_open_slices(self) -> None:
        for track in self._slice_tracks:
            while track.open_names:
                self.slice_end(track, track.last_ts, args={"closed_by": "writer close"})

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ------------------------------------------------------------------------

    def _check_time(self, track: Track, ts_ns: int | None, slice_event: bool) -> int:
        if self._closed:
            raise TraceWriteError("the trace is closed")
        if slice_event and track.is_counter:
            raise TraceWriteError(f"{track.name!r} is a counter track: slices go elsewhere")
        if not slice_event and not track.is_counter:
            raise TraceWriteError(f"{track.name!r} is not a counter track")
        ts = time.monotonic_ns() if ts_ns is None else int(ts_ns)
        if ts < track.last_ts:
            raise TraceWriteError(
                f"time goes back on {track.name!r}: {ts} < {track.last_ts} (ns, monotonic)"
            )
        track.last_ts = ts
        return ts

    def _attach_flows(
        self, event: pb.TrackEvent, flows_in: Iterable[int], flows_out: Iterable[int]
    ) -> None:
        for flow in flows_out:
            event.flow_ids.append(flow)
            self.counts["flows"] += 1
        for flow in flows_in:
            event.terminating_flow_ids.append(flow)

    def _write_clock_snapshot(self) -> None:
        packet = pb.TracePacket(trusted_packet_sequence_id=self._sequence_id)
        packet.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        snap = packet.clock_snapshot
        for clock_id, clock in (
            (pb.BUILTIN_CLOCK_MONOTONIC, time.CLOCK_MONOTONIC),
            (pb.BUILTIN_CLOCK_BOOTTIME, time.CLOCK_BOOTTIME),
            (pb.BUILTIN_CLOCK_REALTIME, time.CLOCK_REALTIME),
        ):
            snap.clocks.add(clock_id=clock_id, timestamp=time.clock_gettime_ns(clock))
        snap.primary_trace_clock = _MONOTONIC
        self._write(packet)

    def _emit_descriptor(self, desc: pb.TrackDescriptor) -> None:
        packet = pb.TracePacket(trusted_packet_sequence_id=self._sequence_id)
        packet.track_descriptor.CopyFrom(desc)
        self._write(packet)

    def _emit_event(self, track: Track, ts: int, event: pb.TrackEvent) -> None:
        event.track_uuid = track.uuid
        packet = pb.TracePacket(
            timestamp=ts,
            timestamp_clock_id=_MONOTONIC,
            trusted_packet_sequence_id=self._sequence_id,
        )
        packet.sequence_flags = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        packet.track_event.CopyFrom(event)
        self._write(packet)

    def _write(self, packet: pb.TracePacket) -> None:
        self._write_raw(_frame(packet))

    def _write_raw(self, data: bytes) -> None:
        if self.error is not None:
            return
        try:
            self._file.write(data)
            if self._batch_depth == 0:
                self._file.flush()
        except OSError as err:
            self._give_up(err)

    def _give_up(self, err: OSError, to: Path | None = None) -> None:
        """The system refused a write: keep no partial trace, write nothing more."""
        self.error = write_error(to or self.path, err)
        self._staged.discard()
