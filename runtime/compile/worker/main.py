"""A compile worker process: builds and compiles rung graphs at low priority, exports each
compiled model to a file and reports its compile phases.

    python -m compile_ahead.runtime.compile.worker.main PARENT_PID PRIORITY BLOB_FD

Started by client.CompileWorker, never by hand. Order matters: it dies with its
parent and lowers its priority before openvino loads (so every thread OpenVINO and TBB create
inherits the priority), and ``-m`` imports compile_ahead first (so the ITT collector is announced
before libopenvino loads). Requests come on stdin, replies go on the original stdout; see
protocol.py.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING

from compile_ahead.interrupts import unblock_interrupts
from compile_ahead.runtime.compile.worker.protocol import (
    WORKER_DOMAIN,
    Closed,
    CompileReply,
    CompileRequest,
    Failure,
    PhaseSpan,
    Ready,
    receive,
    send,
)

if TYPE_CHECKING:  # imported when the first request comes (after the worker is set up)
    from compile_ahead.runtime.sources.base import ModelSource, ReopenSpec

PR_SET_PDEATHSIG = 1
PHASE_DEPTH = 2  # as the in-process trace: deeper spans are per-node noise


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the parent goes; exit now if it is already gone."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent_pid:
        os._exit(1)


def lower_priority(priority: str) -> None:
    """For the calling thread, hence every thread started after it (Linux threads inherit)."""
    if priority == "normal":
        return
    os.nice(19 - os.nice(0))
    if priority == "idle":
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _inject(fault: str | None) -> None:
    from compile_ahead.errors import CompileAheadError

    if fault == "raise":
        raise CompileAheadError("injected compile failure in the worker")
    if fault == "abort":
        os.abort()
    if fault == "segfault":
        ctypes.string_at(0)
    if fault == "hang":
        while True:
            time.sleep(3600)


class Worker:
    def __init__(self, observing: bool, blob_fd: int):
        self.observing = observing
        self.blob_fd = blob_fd  # unnamed file shared with the parent: each blob overwrites it
        self.sources: dict[ReopenSpec, ModelSource] = {}  # kept between compiles
        self.pid = os.getpid()

    def _phases(self, own: list[PhaseSpan], begin_ns: int, end_ns: int) -> list[PhaseSpan]:
        """Our own steps and the collector's spans of this thread inside [begin, end]."""
        if not self.observing:
            return own
        from compile_ahead import itt_collector

        tid = threading.get_native_id()
        seen = [
            PhaseSpan(e.begin_ns, e.end_ns, e.name, e.domain, e.depth, self.pid)
            for e in itt_collector.spans_within(itt_collector.events(), begin_ns, end_ns)
            if e.tid == tid and e.depth <= PHASE_DEPTH
        ]
        itt_collector.reset()  # one compile's events at a time
        return own + seen

    def compile(self, req: CompileRequest) -> CompileReply:
        from compile_ahead.runtime.compile.graph import step_compile
        from compile_ahead.runtime.sources.resolve import reopen

        own: list[PhaseSpan] = []

        def step(name: str, begin: int, end: int) -> None:
            own.append(PhaseSpan(begin, end, name, WORKER_DOMAIN, 0, self.pid))

        begin = time.monotonic_ns()
        resolve_s = 0.0
        source = self.sources.get(req.source)
        if source is None:
            source = reopen(req.source)
            self.sources[req.source] = source
            t = time.monotonic_ns()
            step("resolve model", begin, t)
            resolve_s = (t - begin) / 1e9
        if req.weights is not None and source.weights_identity() != req.weights:
            from compile_ahead.errors import CompileAheadError

            raise CompileAheadError(
                f"the compile worker found other weights for {req.source.target!r} than the run "
                "opened (changed on disk since); not compiled from them"
            )
        _inject(req.fault)
        t0 = time.monotonic_ns()
        try:
            done = step_compile.compile_graph(source, req.spec, req.options)
        except Exception as err:
            err.phases = self._phases(own, begin, time.monotonic_ns())  # type: ignore[attr-defined]
            raise
        t1 = time.monotonic_ns()
        step("build graph", t0, t0 + int(done.build_s * 1e9))
        step("compile_model", t1 - int(done.compile_s * 1e9), t1)
        # This binding exports to an io.BytesIO only (a file object is refused).
        blob = done.model.export_model().getbuffer()
        build_s, compile_s = done.build_s, done.compile_s
        del done
        size = _write_all(self.blob_fd, blob)
        del blob
        t2 = time.monotonic_ns()
        step("export", t1, t2)
        return CompileReply(
            origin=source.origin,
            config=source.config,
            blob_bytes=size,
            resolve_s=resolve_s,
            build_s=build_s,
            compile_s=compile_s,
            export_s=(t2 - t1) / 1e9,
            phases=self._phases(own, begin, t2),
        )


def _write_all(fd: int, data: memoryview) -> int:
    """Replace the file's contents with data; its size."""
    os.ftruncate(fd, 0)
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done : done + (1 << 30)], done)
    return done


def _error_line(err: BaseException) -> str:
    from compile_ahead.errors import CompileAheadError

    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    return first if isinstance(err, CompileAheadError) else f"{type(err).__name__}: {first}"


def main(argv: list[str]) -> int:
    parent_pid, priority, blob_fd = int(argv[0]), argv[1], int(argv[2])
    die_with_parent(parent_pid)
    unblock_interrupts()  # started from a parent's helper thread, which blocks them
    lower_priority(priority)
    requests, replies = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints go to the log, not the pipe
    from compile_ahead import itt_collector
    from compile_ahead.runtime.base.ov_core import core

    core()
    observing = itt_collector.collector_status().observing
    send(replies, Ready(os.getpid(), os.sched_getscheduler(0), os.nice(0), observing))
    worker = Worker(observing, blob_fd)
    while True:
        try:
            req = receive(requests)
        except Closed:
            return 0
        assert isinstance(req, CompileRequest)
        try:
            send(replies, worker.compile(req))
        except Exception as err:
            phases = getattr(err, "phases", [])
            send(replies, Failure(_error_line(err), traceback.format_exc(), phases))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
