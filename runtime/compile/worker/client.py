"""Compile placement in a worker process: the rung is compiled by another process at low
priority, and the decoding process only imports the exported result.

Why: a compile thread in the decoding process competes with decode for the same cores, and
lowering one thread's priority does not reach the CPU plugin's TBB workers, which do most of
the compiling. A worker lowers its whole process before OpenVINO starts any thread. What stays
in the decoding process is the import; the CPU plugin repacks the weights there again, so this
placement pays where an import is cheap next to a compile (a device blob), or for isolation
from a compiler that crashes or hangs.

The worker is persistent by default (started once, at low priority, kept between compiles with
the model it resolved), and replaced after any failure. A worker that raises gives a failed
compile with its error line; one that crashes, or is still busy at the deadline (then killed),
gives a failed compile too: WorkerCompileError, a CompileAheadError, so a caller's foreground
retry applies. No worker outlives its parent: it dies with it (PR_SET_PDEATHSIG), runs in its
own process group (killed as a group) and is killed on shutdown, on an interrupted compile and
at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Literal

import openvino as ov

from compile_ahead.errors import CompileAheadError
from compile_ahead.interrupts import block_interrupts, future_result
from compile_ahead.runtime.base.ov_core import core, openvino_error_summary
from compile_ahead.runtime.compile.settings.options import CompileOptions, device_config
from compile_ahead.runtime.compile.worker.protocol import (
    Closed,
    CompileReply,
    CompileRequest,
    Failure,
    Fault,
    PhaseSpan,
    Priority,
    Ready,
    Timeout,
    receive,
    send,
)
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.model.architecture import ModelConfig
from compile_ahead.runtime.sources.base import ReopenSpec

ENTRY = "compile_ahead.runtime.compile.worker.main"
# Not inherited: the worker would append to the parent's pass-profile file.
_PRIVATE_ENV = ("OV_ENABLE_PROFILE_PASS",)

FailureKind = Literal["error", "crashed", "timeout", "shutdown"]


class WorkerCompileError(CompileAheadError):
    """A compile the worker did not deliver: it raised, crashed, hung past its deadline, or the
    placement was shut down meanwhile."""

    def __init__(self, message: str, kind: FailureKind, phases: list[PhaseSpan] | None = None):
        super().__init__(message)
        self.kind = kind
        self.phases = phases or []  # what the worker saw before failing (kind "error")


@dataclass
class WorkerResult:
    compiled: ov.CompiledModel  # imported here; the model source makes its step
    model_config: ModelConfig  # as the worker resolved the model: compare with your own
    model_origin: str  # ModelSource.origin there (for messages)
    worker_pid: int
    spawn_s: float  # starting the worker, when this compile had to (0 if it was running)
    resolve_s: float  # the worker resolving the model, first time only
    build_s: float  # worker: graph construction
    compile_s: float  # worker: compile_model
    export_s: float  # worker: export_model + write
    import_s: float  # this process: read + import_model (what the caller's thread pays)
    blob_bytes: int
    begin_ns: int  # time.monotonic_ns() bounds of the whole call
    end_ns: int
    phases: list[PhaseSpan] = field(default_factory=list)  # worker spans, plus the import


def _signal_name(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _tail(fd: int, lines: int = 3) -> str:
    """The last lines of a file by descriptor (the worker's stderr)."""
    try:
        size = os.fstat(fd).st_size
        text = os.pread(fd, 4096, max(0, size - 4096)).decode(errors="replace")
    except OSError:
        return ""
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept)


def _read_all(fd: int, size: int) -> bytes:
    chunks, done = [], 0
    while done < size:
        chunk = os.pread(fd, min(size - done, 1 << 30), done)
        if not chunk:
            raise CompileAheadError(f"the compile worker's blob is short ({done} of {size} bytes)")
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


class _Process:
    """One live worker process and its pipes."""

    def __init__(self, proc: subprocess.Popen[bytes], blob: IO[bytes], log: IO[bytes]):
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.pid = proc.pid
        self.blob = blob  # unnamed files: gone with the last descriptor, whoever holds it
        self.log = log
        self.requests = proc.stdin.fileno()
        self.replies = proc.stdout.fileno()
        self.ready: Ready | None = None
        self._lock = threading.Lock()
        self._closed = False

    def kill(self) -> int | None:
        """SIGKILL the worker's process group and reap it (idempotent); its exit status."""
        with self._lock:
            if self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
            return self.proc.wait()

    def close(self) -> int | None:
        """kill(), then close the pipes. Only from the thread using them (or when none is)."""
        status = self.kill()
        with self._lock:
            if not self._closed:
                self._closed = True
                for stream in (self.proc.stdin, self.proc.stdout, self.blob, self.log):
                    if stream is not None:
                        with contextlib.suppress(OSError):
                            stream.close()
        return status


class CompileWorker:
    """Compiles rungs in a worker process and imports them here as CompiledSteps.

    One compile at a time (a second caller waits). ``persistent=False`` starts a fresh worker
    for each compile and ends it afterwards.
    """

    def __init__(
        self,
        *,
        priority: Priority = "idle",
        persistent: bool = True,
        python: str = sys.executable,
        tmp_dir: str | Path | None = None,
    ):
        """``tmp_dir``: the file system for the blob and the worker's stderr (unnamed files,
        never visible there); the default temporary directory by default."""
        self.priority = priority
        self.persistent = persistent
        self.python = python
        self.tmp_dir = tmp_dir
        self._lock = threading.Lock()  # one compile at a time
        self._state = threading.Lock()  # guards _worker and _closed
        self._worker: _Process | None = None
        self._closed = False
        self._count = 0
        self._owner = os.getpid()  # a forked child inherits this object, not the worker
        # PR_SET_PDEATHSIG fires when the thread that started the worker exits, not the
        # process: start workers from this one long-lived thread, never a caller's thread.
        self._spawner = ThreadPoolExecutor(
            1, thread_name_prefix="compile-worker-spawn", initializer=block_interrupts
        )
        _LIVE.add(self)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> int:
        """Start the worker now (off the critical path) and wait until it is ready; its pid."""
        with self._lock:
            worker, _ = self._ensure_worker(time.monotonic() + timeout_s)
            return worker.pid

    @property
    def pids(self) -> list[int]:
        """The live worker's pid, if any (for tests and reports)."""
        with self._state:
            return [self._worker.pid] if self._worker is not None else []

    def shutdown(self) -> None:
        """Kill the worker (a compile in flight then fails with kind "shutdown"), remove the
        temp files. Safe from any thread, more than once, and at interpreter exit."""
        if os.getpid() != self._owner:
            return
        with self._state:
            self._closed = True
            worker, self._worker = self._worker, None
        if worker is not None:
            # The compiling thread, if any, closes the pipes itself once it sees the worker go.
            if self._lock.acquire(blocking=False):
                try:
                    worker.close()
                finally:
                    self._lock.release()
            else:
                worker.kill()
        self._spawner.shutdown(wait=False)
        _LIVE.discard(self)

    def __enter__(self) -> CompileWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- compiling ----------------------------------------------------------------------
    def compile(
        self,
        source: ReopenSpec,
        spec: GraphSpec,
        options: CompileOptions,
        *,
        timeout_s: float,
        fault: Fault | None = None,
        blob_sink: Callable[[bytes], object] | None = None,
        weights: dict[str, Any] | None = None,
    ) -> WorkerResult:
        """Compile ``spec`` of the model ``source`` opens in the worker and import it here.
        ``timeout_s`` bounds the worker's part (its start when needed, the compile and the
        export); the import here is not interruptible.
        ``blob_sink`` gets the exported blob before it is imported (e.g. to store it in the
        compile cache). ``weights`` (the caller's ModelSource.weights_identity()) makes the
        worker refuse weights that are not those, e.g. a checkpoint replaced since the caller
        opened it. Raises WorkerCompileError when the worker does not deliver."""
        # The worker compiles afresh; a compile cache stays with the caller (see blob_sink).
        options = replace(options.resolved(), cache=None)
        begin_ns = time.monotonic_ns()
        deadline = time.monotonic() + timeout_s
        what = f"the C={spec.capacity} {spec.kind} graph"
        with self._lock:
            worker, spawn_s = self._ensure_worker(deadline)
            request = CompileRequest(source, spec, options, fault, weights)
            try:
                reply = self._exchange(worker, request, deadline, timeout_s, what)
                t0 = time.monotonic_ns()
                data = _read_all(worker.blob.fileno(), reply.blob_bytes)
            finally:
                with contextlib.suppress(OSError, ValueError):  # closed if the worker was retired
                    os.ftruncate(worker.blob.fileno(), 0)  # the disk space comes back now
            if not self.persistent or self._closed:
                self._retire(worker)
            if blob_sink is not None:
                blob_sink(data)
            compiled = _import(data, spec, options)
            del data
            t1 = time.monotonic_ns()
        phases = [*reply.phases, PhaseSpan(t0, t1, "import_model", "compile_ahead", 0, os.getpid())]
        return WorkerResult(
            compiled=compiled,
            model_config=reply.config,
            model_origin=reply.origin,
            worker_pid=worker.pid,
            spawn_s=spawn_s,
            resolve_s=reply.resolve_s,
            build_s=reply.build_s,
            compile_s=reply.compile_s,
            export_s=reply.export_s,
            import_s=(t1 - t0) / 1e9,
            blob_bytes=reply.blob_bytes,
            begin_ns=begin_ns,
            end_ns=time.monotonic_ns(),
            phases=phases,
        )

    def _exchange(
        self,
        worker: _Process,
        request: CompileRequest,
        deadline: float,
        timeout_s: float,
        what: str,
    ) -> CompileReply:
        try:
            send(worker.requests, request)
            reply = receive(worker.replies, deadline)
        except Timeout:
            self._retire(worker)
            raise WorkerCompileError(
                f"compile worker (pid {worker.pid}) hung compiling {what}: "
                f"killed after the {timeout_s:g} s deadline",
                "timeout",
            ) from None
        except (Closed, BrokenPipeError):
            tail = _tail(worker.log.fileno())
            status = self._retire(worker)
            if self._closed:
                raise WorkerCompileError(
                    f"compile of {what} abandoned: the compile worker was shut down", "shutdown"
                ) from None
            raise WorkerCompileError(
                f"compile worker (pid {worker.pid}) crashed compiling {what}: "
                f"{_signal_name(status)}" + (f"; its last output: {tail}" if tail else ""),
                "crashed",
            ) from None
        except BaseException:
            self._retire(worker)  # e.g. KeyboardInterrupt: leave no worker behind
            raise
        if isinstance(reply, Failure):
            raise WorkerCompileError(
                f"compile worker (pid {worker.pid}) failed compiling {what}: {reply.line}",
                "error",
                reply.phases,
            )
        assert isinstance(reply, CompileReply)
        return reply

    # -- workers ------------------------------------------------------------------------
    def _ensure_worker(self, deadline: float) -> tuple[_Process, float]:
        """The running worker, or a new one started and ready; (worker, seconds to start)."""
        with self._state:
            if self._closed:
                raise WorkerCompileError("the compile worker placement is shut down", "shutdown")
            if self._worker is not None and self._worker.proc.poll() is None:
                return self._worker, 0.0
            stale, self._worker = self._worker, None
        if stale is not None:
            stale.close()
        t0 = time.monotonic()
        worker = future_result(self._spawner.submit(self._spawn))
        try:
            if self._closed:
                raise Closed
            ready = receive(worker.replies, deadline)
        except Timeout:
            self._retire(worker)
            raise WorkerCompileError(
                f"compile worker (pid {worker.pid}) did not start before its deadline", "timeout"
            ) from None
        except Closed:
            tail = _tail(worker.log.fileno())
            status = self._retire(worker)
            raise WorkerCompileError(
                f"compile worker (pid {worker.pid}) failed to start: {_signal_name(status)}"
                + (f"; its last output: {tail}" if tail else ""),
                "shutdown" if self._closed else "crashed",
            ) from None
        except BaseException:
            self._retire(worker)
            raise
        assert isinstance(ready, Ready)
        worker.ready = ready
        return worker, time.monotonic() - t0

    def _spawn(self) -> _Process:
        env = {k: v for k, v in os.environ.items() if k not in _PRIVATE_ENV}
        with contextlib.ExitStack() as opened:  # closed again unless the worker starts
            # O_TMPFILE where the file system has it, else created and unlinked at once.
            blob = opened.enter_context(tempfile.TemporaryFile(dir=self.tmp_dir))
            log = opened.enter_context(tempfile.TemporaryFile(dir=self.tmp_dir))
            proc = subprocess.Popen(
                [self.python, "-m", ENTRY, str(os.getpid()), self.priority, str(blob.fileno())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                pass_fds=(blob.fileno(),),
                env=env,
                start_new_session=True,  # its own process group, out of the terminal's Ctrl-C
            )
            opened.pop_all()
        worker = _Process(proc, blob, log)
        with self._state:  # known at once, so shutdown reaches it even if the caller is gone
            if not self._closed:
                self._worker = worker
                return worker
        worker.close()  # shut down meanwhile: the caller sees _closed
        return worker

    def _retire(self, worker: _Process) -> int | None:
        """Kill and forget a worker (the next compile starts a fresh one)."""
        with self._state:
            if self._worker is worker:
                self._worker = None
        return worker.close()


def _import(data: bytes, spec: GraphSpec, options: CompileOptions) -> ov.CompiledModel:
    try:
        compiled = core().import_model(data, options.device, device_config(options))
    except RuntimeError as err:
        raise CompileAheadError(
            f"importing the worker-compiled C={spec.capacity} {spec.kind} graph failed: "
            f"{openvino_error_summary(err)}"
        ) from err
    return compiled


_LIVE: weakref.WeakSet[CompileWorker] = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for placement in list(_LIVE):
        placement.shutdown()
