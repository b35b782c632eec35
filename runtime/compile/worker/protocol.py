"""What the decoding process and a compile worker say to each other, and how it is framed.

Messages are pickled tuples, each preceded by its length (8 bytes, little endian), on the
worker's stdin (requests) and on a copy of its original stdout (replies; the worker points fd 1
at its stderr so nothing a library prints can corrupt the stream). The compiled blob itself goes
through an unnamed file the parent opens and the worker inherits (its descriptor number is an
argument), rewritten by every compile: nothing is left on disk once both processes are gone,
however they end. Standard library only: the worker reads this before it may load
openvino (compile_ahead.interrupts is standard library only too).
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from compile_ahead.interrupts import WAIT_SLICE_S

if TYPE_CHECKING:
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.sources.base import ReopenSpec

# Injected on purpose by tests and benchmarks: the worker raises, aborts (SIGABRT), segfaults
# or sleeps forever instead of compiling.
Fault = Literal["raise", "abort", "segfault", "hang"]
FAULTS: tuple[str, ...] = ("raise", "abort", "segfault", "hang")

# How the worker lowers itself before openvino starts any thread (threads inherit both).
Priority = Literal["idle", "nice", "normal"]
PRIORITIES: tuple[str, ...] = ("idle", "nice", "normal")

_HEADER = struct.Struct("<Q")


@dataclass(frozen=True)
class PhaseSpan:
    """One compile phase seen in the worker: an ITT span of its compiling thread (domain as
    OpenVINO named it) or the worker's own steps (domain WORKER_DOMAIN). Times are
    CLOCK_MONOTONIC (time.monotonic_ns()), the same clock in every process of the machine."""

    begin_ns: int
    end_ns: int
    name: str
    domain: str
    depth: int  # spans open on the same thread when this one began
    pid: int


WORKER_DOMAIN = "compile_ahead.worker"


@dataclass(frozen=True)
class CompileRequest:
    source: ReopenSpec  # how the worker opens the run's model
    spec: GraphSpec  # pickled; unpickling it in the worker loads openvino
    options: CompileOptions  # resolved by the parent
    fault: Fault | None = None
    # The parent's ModelSource.weights_identity(): the worker refuses to compile other weights.
    weights: dict[str, Any] | None = None


@dataclass
class CompileReply:
    origin: str  # ModelSource.origin: which checkpoint (or synthetic weights) was compiled
    config: Any  # its config.ModelConfig
    blob_bytes: int
    resolve_s: float  # 0 when the worker had the model already
    build_s: float
    compile_s: float
    export_s: float
    phases: list[PhaseSpan] = field(default_factory=list)


@dataclass(frozen=True)
class Ready:
    pid: int
    policy: int  # os.sched_getscheduler of the worker's main thread
    nice: int
    observing: bool  # the worker's ITT collector is bound to OpenVINO


@dataclass(frozen=True)
class Failure:
    line: str  # the error line to report
    detail: str  # the worker's traceback
    phases: list[PhaseSpan] = field(default_factory=list)


def send(fd: int, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


class Closed(Exception):
    """The other end closed the pipe (the worker exited, or the parent did)."""


class Timeout(Exception):
    """No complete message before the deadline."""


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        # In slices, never one select() to the deadline: a Ctrl-C the kernel handed to another
        # thread does not wake select(), and is acted on when the slice ends.
        while True:
            left = WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise Timeout
            if select.select([fd], [], [], min(left, WAIT_SLICE_S))[0]:
                break
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise Closed
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, deadline: float | None = None) -> object:
    """The next message; deadline is a time.monotonic() value (None: wait as long as it takes)."""
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    return pickle.loads(_read_exact(fd, size, deadline))
