"""A ladder run on a Perfetto trace: decode steps on the device track, every compile job on
its own "CPU compile" track with the OpenVINO phases the collector saw nested inside, boundary
switches with their wait and KV-migration slices, a flow from each compile's end to the switch
that consumes it, and the run's counters."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from compile_ahead import itt_collector
from compile_ahead.errors import CompileAheadError, OutputWriteError
from compile_ahead.interrupts import deferred
from compile_ahead.output.checks import destination
from compile_ahead.profiling.perfetto.validate import OPEN_TRACE_HINT, validate_trace
from compile_ahead.profiling.perfetto.writer import (
    GRAPHS_RESIDENT,
    KV_COMMITTED_BYTES,
    KV_RESERVED_BYTES,
    PROCESS_RSS_BYTES,
    TOKENS_PER_S,
    ArgValue,
    TraceWriteError,
    TraceWriter,
)
from compile_ahead.profiling.traces.compile_jobs import Span, emit_nested
from compile_ahead.profiling.traces.decode_steps import StepSlicer
from compile_ahead.profiling.traces.worker_phases import write_worker_phases
from compile_ahead.runtime.compile.worker.protocol import PhaseSpan
from compile_ahead.runtime.ladder.reporting.events import BoundaryTiming, RunEvents

_COUNTERS = {
    "kv_reserved_bytes": KV_RESERVED_BYTES,
    "kv_committed_bytes": KV_COMMITTED_BYTES,
    "rss_bytes": PROCESS_RSS_BYTES,
    "graphs_resident": GRAPHS_RESIDENT,
    "tokens_per_s": TOKENS_PER_S,
}
# Collector spans this deep or shallower go inside a compile slice (deeper ones are per-node
# noise on the trace and stay in the counters' aggregates).
PHASE_DEPTH = 2


class TraceRunEvents(RunEvents):
    def __init__(
        self,
        writer: TraceWriter,
        device: str,
        steps_per_slice: int = 1,
        compile_phases: bool = True,
        skip_counters: frozenset[str] = frozenset(),
    ):
        self.writer = writer
        self.failed = False  # set by the caller when the traced run failed
        # Set by traced(): the trace could not be written (disk full, ...), completed or
        # validated; the caller raises it after its other outputs.
        self.trace_error: CompileAheadError | None = None
        self.device = writer.device_track(device)
        self.slicer = StepSlicer(writer, self.device, steps_per_slice)
        self.compile_phases = compile_phases and itt_collector.collector_status().observing
        self.skip_counters = skip_counters  # e.g. RSS when a sampler already draws it
        self._unmuted: tuple[str, ...] = ()  # inference domains the user had unmuted
        if self.compile_phases:
            # Per-node inference spans would fill the collector's buffer within a few hundred
            # tokens and push later compiles' phases out; decode steps are traced here anyway.
            muted = set(itt_collector.muted_domains())
            self._unmuted = tuple(d for d in itt_collector.inference_domains() if d not in muted)
            itt_collector.set_domains_enabled(self._unmuted, False)
        self._lock = threading.Lock()
        self._jobs: dict[int, tuple[Any, int, int]] = {}  # job -> (track, begin, native tid)
        self._flows: dict[int, tuple[int, int]] = {}  # job -> (flow id, capacity)
        self._stepped: set[int] = set()  # rungs a decode step ran on
        # (track, begin, end, native tid, a compile worker's phases or None)
        self._finished: list[tuple[Any, int, int, int, list | None]] = []
        self._worker: dict[int, list[PhaseSpan]] = {}  # job -> phases a compile worker sent

    def compile_started(
        self, job: int, capacity: int, kind: str, background: bool, ts: int
    ) -> None:
        label = f"{kind} C={capacity}" if capacity else kind
        track = self.writer.compile_job_track(label + (" (background)" if background else ""))
        with self._lock:
            self._jobs[job] = (track, ts, threading.get_native_id())

    def compile_finished(
        self, job: int, capacity: int, kind: str, ok: bool, ts: int, info: dict[str, Any]
    ) -> None:
        with self._lock:
            track, begin, tid = self._jobs.pop(job)
            flow = self.writer.new_flow() if ok and kind in ("decode", "attention") else None
            if flow is not None:
                self._flows[job] = (flow, capacity)
        args: dict[str, Any] = {"rung": capacity, "kind": kind, "ok": ok}
        if "error" in info:
            args["error"] = str(info["error"])[:200]
        for key in ("cache", "import_s", "store_s"):  # the compile cache: hit means imported
            if key in info:
                args[key] = info[key]
        # Written now (a crash keeps it); the collector's phases are added at close, because
        # reading the collector's buffer here would delay the compile thread's completion.
        self.writer.slice(
            track,
            f"compile {kind} C={capacity}",
            begin,
            ts,
            args,
            flows_out=[flow] if flow is not None else [],
        )
        with self._lock:
            self._finished.append((track, begin, ts, tid, self._worker.pop(job, None)))

    def worker_phases(self, job: int, phases: Sequence[PhaseSpan]) -> None:
        with self._lock:
            self._worker.setdefault(job, []).extend(phases)

    def _write_phases(self) -> None:
        # A compile worker has its own collector: its phases are written even when this
        # process's collector is not observing.
        for track, begin, end, _, worker in self._finished:
            if worker:
                write_worker_phases(self.writer, track, worker, begin, end)
        if not self.compile_phases or not self._finished:
            return
        recorded = [e for e in itt_collector.events() if e.is_span and e.depth <= PHASE_DEPTH]
        for track, begin, end, tid, worker in self._finished:
            if worker:
                continue
            spans = [
                Span(max(e.begin_ns, begin), min(e.end_ns, end), e.name, {"domain": e.domain})
                for e in itt_collector.spans_within(recorded, begin, end)
                if e.tid == tid
            ]
            if spans:
                emit_nested(self.writer, self.writer.track("phases", parent=track), spans)

    def run_started(self, info: dict[str, Any]) -> None:
        """What runs: the model (and whether its weights are synthetic), schedule, ladder, the
        user's compile properties (``ov_config``, as JSON)."""
        args = {
            k: json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v
            for k, v in info.items()
        }
        self.writer.instant(self.device, f"run: {info.get('model_label', '?')}", None, args)

    def step(self, token_index: int, capacity: int, begin: int, end: int) -> None:
        self._stepped.add(capacity)
        self.slicer.step(token_index, begin, end, capacity)

    def prefill(self, capacity: int, tokens: int, begin: int, end: int) -> None:
        self.slicer.flush()
        self.writer.slice(
            self.device,
            f"prefill {tokens} tokens",
            begin,
            end,
            {"rung": capacity, "tokens": tokens},
        )

    def boundary(self, timing: BoundaryTiming, job: int | None) -> None:
        self.slicer.flush()
        with self._lock:
            flow = self._flows.pop(job, (None, 0))[0] if job is not None else None
        record = timing.record.to_json()
        args = {k: v for k, v in record.items() if isinstance(v, int | float | str | bool)}
        begin, end = timing.begin_ns, timing.end_ns
        w = self.writer
        with w.batch():
            w.slice_begin(self.device, f"switch {record['from']}->{record['to']}", begin, args)
            if timing.record.wait_s:
                wait_end = min(end, begin + int(timing.record.wait_s * 1e9))
                w.slice(self.device, f"wait for C={record['to']}", begin, wait_end)
            # The flow lands where the new rung is taken into use, after any wait, so its end
            # never precedes the compile it comes from.
            w.slice(
                self.device,
                "KV migration",
                timing.migration_begin_ns,
                timing.migration_end_ns,
                {"bytes": timing.record.bytes_copied or 0},
                flows_in=[flow] if flow is not None else [],
            )
            w.slice_end(self.device, end)

    def sequence_stopped(self, sequence: int, reason: str, tokens: int, ts: int) -> None:
        """An instant on the decode track: the batch's steps go on without this sequence."""
        self.slicer.flush()
        args: dict[str, ArgValue] = {"sequence": sequence, "reason": reason, "tokens": tokens}
        self.writer.instant(self.device, f"sequence {sequence} stopped: {reason}", ts, args)

    def counters(self, ts: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            name = _COUNTERS.get(key)
            if name is not None and key not in self.skip_counters:
                self.writer.counter(self.writer.counter_track(name), ts, value)

    def close(self) -> None:
        """Flush steps; a compile no switch consumed (the run ended first) still gets its
        flow's end, on a marker slice, so every flow has both ends."""
        try:
            self.slicer.flush()
            self._write_phases()
        finally:
            self.unmute()
        with self._lock:
            left = list(self._flows.values())
            self._flows.clear()
        for flow, capacity in left:
            ts = self.device.last_ts
            # No switch took it: the first rung (decoded on from the start) or one the run
            # ended before.
            what = "decoded from the start" if capacity in self._stepped else "never used"
            self.writer.slice(
                self.device, f"C={capacity} {what}", ts, ts, {"rung": capacity}, flows_in=[flow]
            )

    def unmute(self) -> None:
        """Give the collector back the inference domains muted while the run was traced."""
        if self._unmuted:
            itt_collector.set_domains_enabled(self._unmuted, True)
            self._unmuted = ()


@contextmanager
def traced(
    path: Path, device: str, steps_per_slice: int = 1, process_name: str = "compile-ahead"
) -> Iterator[TraceRunEvents]:
    """A trace of the run inside, closed and validated once the block ends. A run that failed
    or was interrupted (``events.failed``, set by the caller) keeps what it traced at
    ``<stem>.failed<suffix>`` and leaves a good trace at ``path`` alone. A block that raises
    has no run to show (an argument error, an interrupt before the run began): its trace is
    removed, nothing published. A trace that could not be written (disk full, read-only),
    completed or validated is left in ``events.trace_error`` for the caller to raise after its
    summary and report, which are written all the same."""
    writer: TraceWriter | None = None
    events: TraceRunEvents | None = None
    try:
        with deferred():  # made whole: a signal meanwhile acts once ``writer`` is in hand
            writer = TraceWriter(path, process_name)
            events = TraceRunEvents(writer, device, steps_per_slice)
        yield events
        _publish(events, path)
    except BaseException:
        if events is not None:
            events.unmute()
        if writer is not None:
            writer.discard()
        raise


def _publish(events: TraceRunEvents, path: Path) -> None:
    """Close the run's events and publish its trace (beside ``path`` unless it completed)."""
    try:
        events.close()
    except TraceWriteError as err:  # an event the writer refused: what came before is kept
        events.trace_error = CompileAheadError(f"the trace {path} is incomplete: {err}")
    complete = not events.failed and events.trace_error is None
    try:
        where = events.writer.close(destination(path, complete))
    except OutputWriteError as err:
        events.trace_error = events.trace_error or err
        return
    report = validate_trace(where)
    print(report.summary(), file=sys.stderr)
    print(f"trace: {where}; {OPEN_TRACE_HINT}", file=sys.stderr)
    if not report.ok and events.trace_error is None:
        events.trace_error = CompileAheadError(
            f"the trace {where} failed validation: {report.errors[0]}"
        )
