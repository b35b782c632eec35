"""Compile-phase counters from the in-process ITT collector (``compile_ahead._itt``).

OpenVINO, its CPU/NPU plugins, oneDNN and TBB report tasks, regions, counters, metadata and
thread names to the collector once ``INTEL_LIBITTNOTIFY64`` names it before libopenvino loads;
``import compile_ahead`` arranges that. Times are ``time.monotonic_ns()`` values.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

import compile_ahead
from compile_ahead.errors import CompileAheadError

SPAN_KINDS = ("task", "region", "frame")


@dataclass(frozen=True)
class IttEvent:
    kind: str  # task | region | frame | marker | counter | metadata
    begin_ns: int
    end_ns: int
    tid: int
    depth: int  # spans open on the same thread when this one began
    domain: str
    name: str
    value: float  # counter value or numeric metadata
    id: int
    text: str  # string metadata

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.begin_ns

    @property
    def is_span(self) -> bool:
        return self.kind in SPAN_KINDS


@dataclass(frozen=True)
class PhaseAggregate:
    domain: str
    name: str
    count: int
    total_ns: int
    max_ns: int


@dataclass(frozen=True)
class CollectorStatus:
    path: str | None  # the collector library, None when the module was not built
    env_value: str | None  # what INTEL_LIBITTNOTIFY64 holds
    openvino_loaded_first: bool  # libopenvino was mapped before compile_ahead set the variable
    bound_libraries: tuple[str, ...]  # ITT copies that have bound to the collector so far

    @property
    def observing(self) -> bool:
        return bool(self.bound_libraries)

    def problem(self) -> str | None:
        """Why compile phases will not be observed, or None when they will be."""
        if self.path is None:
            return (
                "the ITT collector module compile_ahead._itt is not built (reinstall the package)"
            )
        if self.env_value != self.path:
            return (
                f"INTEL_LIBITTNOTIFY64 is set to {self.env_value!r}, another collector; unset it "
                "to observe compile phases here"
            )
        if self.openvino_loaded_first and not self.bound_libraries:
            return (
                "openvino was loaded before compile_ahead was imported, so it cannot be observed: "
                "import compile_ahead first (or export INTEL_LIBITTNOTIFY64="
                f"{self.path} before starting Python)"
            )
        return None


def _module() -> ModuleType | None:
    try:
        from compile_ahead import _itt
    except ImportError:
        return None
    return _itt


def collector_status() -> CollectorStatus:
    itt = _module()
    bound = tuple(itt.bound_libraries()) if itt is not None else ()
    own = itt is not None and compile_ahead._ITT_COLLECTOR_PATH is not None
    return CollectorStatus(
        path=itt.__file__ if itt is not None and own else None,
        env_value=os.environ.get(compile_ahead.ITT_ENV),
        openvino_loaded_first=compile_ahead._OPENVINO_LOADED_BEFORE_ITT,
        bound_libraries=bound,
    )


def require_collector() -> ModuleType:
    """The collector module, or a CompileAheadError saying why OpenVINO cannot be observed."""
    status = collector_status()
    problem = status.problem()
    if problem is not None:
        raise CompileAheadError(problem)
    itt = _module()
    assert itt is not None
    return itt


def events() -> list[IttEvent]:
    """Everything recorded since the last reset, spans ordered by begin time."""
    itt = require_collector()
    out = [IttEvent(*row) for row in itt.events()]
    out.sort(key=lambda e: (e.begin_ns, -e.end_ns))
    return out


def open_spans() -> list[IttEvent]:
    """Spans begun and not yet ended (end_ns == -1), e.g. work still running on a worker."""
    return [IttEvent(*row) for row in require_collector().open_spans()]


def aggregates() -> list[PhaseAggregate]:
    """Per (domain, name) span count, total and max duration since the last reset."""
    itt = require_collector()
    rows = [PhaseAggregate(*row) for row in itt.aggregates()]
    rows.sort(key=lambda a: -a.total_ns)
    return rows


def reset() -> None:
    require_collector().reset()


def stats() -> dict[str, int]:
    return dict(require_collector().stats())


def now_ns() -> int:
    """The collector's clock (CLOCK_MONOTONIC), identical to time.monotonic_ns()."""
    return require_collector().now_ns()


def thread_names(tids: Iterable[int] = ()) -> dict[int, str]:
    """ITT thread names, completed from the kernel's names for the other tids asked about."""
    itt = _module()
    names: dict[int, str] = dict(itt.thread_names()) if itt is not None else {}
    for tid in tids:
        if tid in names:
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                names[tid] = comm.read().strip()
        except OSError:
            names[tid] = f"thread {tid}"  # the thread has exited
    return names


def spans_within(evs: Iterable[IttEvent], begin_ns: int, end_ns: int) -> list[IttEvent]:
    """Spans that lie entirely inside [begin_ns, end_ns], on any thread."""
    return [e for e in evs if e.is_span and e.begin_ns >= begin_ns and e.end_ns <= end_ns]


def totals_by_name(evs: Iterable[IttEvent]) -> dict[tuple[str, str], PhaseAggregate]:
    """Aggregate (count, total, max) per (domain, name) over a chosen set of spans."""
    acc: dict[tuple[str, str], list[int]] = {}
    for e in evs:
        if not e.is_span:
            continue
        a = acc.setdefault((e.domain, e.name), [0, 0, 0])
        a[0] += 1
        a[1] += e.dur_ns
        a[2] = max(a[2], e.dur_ns)
    return {k: PhaseAggregate(k[0], k[1], *v) for k, v in acc.items()}


def inference_domains() -> tuple[str, ...]:
    """The per-node inference domains (CPU plugin nodes, oneDNN primitives): about 3,000 spans
    per decode step of Qwen2.5-0.5B. The collector mutes them from the start, since recording
    them slows every step by a few percent and fills the event store; unmute them with
    :func:`set_domains_enabled` to see a step node by node."""
    return tuple(require_collector().inference_domains())


def set_domains_enabled(domains: Iterable[str], enabled: bool) -> None:
    """Mute (or unmute) ITT domains: instrumented libraries then skip their calls entirely.

    Change it between phases (a span begun before muting is not ended while muted)."""
    itt = require_collector()
    for name in domains:
        itt.set_domain_enabled(name, enabled)


def muted_domains() -> list[str]:
    return sorted(require_collector().muted_domains())
