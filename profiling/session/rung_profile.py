"""Compile one ladder rung with the counters on and break its time into phases.

Phases of a rung's compile (all on the monotonic clock):

- ``build``: constructing the step graph on the host (compile-ahead's own code);
- ``compile_model``: OpenVINO's compile, from the ITT region "Compile model" (domain
  ``ov::phases``) when the collector observed it, else the call's wall time;
- ``transformations``: time inside outermost pass managers (``OV_ENABLE_PROFILE_PASS``);
- ``primitive_create``: oneDNN primitive creation (ITT ``dnnl::primitive::create``), summed over
  the threads that ran it, so it can exceed its wall-clock share when threads overlap;
- ``other``: compile_model minus the two above (graph lowering, weight repacking, memory
  planning), floored at zero.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from compile_ahead import itt_collector
from compile_ahead.itt_collector import IttEvent, PhaseAggregate
from compile_ahead.profiling.session.passprofile import ClockPair, PassProfile, parse_file
from compile_ahead.profiling.session.rss import RssSampler

PHASES_DOMAIN = "ov::phases"
COMPILE_REGION = "Compile model"
PRIMITIVE_CREATE_DOMAIN = "dnnl::primitive::create"


@dataclass
class RungProfile:
    capacity: int
    begin_ns: int
    end_ns: int
    build: tuple[int, int]
    compile: tuple[int, int]
    compile_from_itt: bool
    events: list[IttEvent] = field(default_factory=list)
    passes: PassProfile | None = None
    rss_before: int = 0
    rss_after: int = 0
    rss_peak: int | None = None

    @property
    def spans(self) -> list[IttEvent]:
        return [e for e in self.events if e.is_span]

    def aggregates(self) -> list[PhaseAggregate]:
        rows = list(itt_collector.totals_by_name(self.spans).values())
        rows.sort(key=lambda a: -a.total_ns)
        return rows

    def breakdown_ns(self) -> dict[str, int | None]:
        compile_ns = self.compile[1] - self.compile[0]
        transforms = self.passes.total_ns() if self.passes is not None else None
        create = sum(e.dur_ns for e in self.spans if e.domain == PRIMITIVE_CREATE_DOMAIN)
        other = compile_ns - (transforms or 0) - create
        return {
            "total": self.end_ns - self.begin_ns,
            "build": self.build[1] - self.build[0],
            "compile_model": compile_ns,
            "transformations": transforms,
            "primitive_create": create if self.events else None,
            "other": max(0, other) if self.events or transforms is not None else None,
        }

    def to_json(self) -> dict:
        aggs = self.aggregates()[:25]
        return {
            "capacity": self.capacity,
            "begin_ns": self.begin_ns,
            "end_ns": self.end_ns,
            "compile_window_from_itt": self.compile_from_itt,
            "phases_ns": self.breakdown_ns(),
            "rss_before_bytes": self.rss_before,
            "rss_after_bytes": self.rss_after,
            "rss_peak_bytes": self.rss_peak,
            "itt_spans": len(self.spans),
            "itt_top_phases": [
                {
                    "domain": a.domain,
                    "name": a.name,
                    "count": a.count,
                    "total_ns": a.total_ns,
                    "max_ns": a.max_ns,
                }
                for a in aggs
            ],
            "pass_managers": len(self.passes.managers) if self.passes else None,
            "pass_profile_problems": self.passes.problems if self.passes else None,
        }


def _file_size(path: Path | None) -> int:
    if path is None:
        return 0
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _compile_region(events: list[IttEvent]) -> IttEvent | None:
    regions = [e for e in events if e.domain == PHASES_DOMAIN and e.name == COMPILE_REGION]
    return max(regions, key=lambda e: e.dur_ns) if regions else None


class TimedCompile(Protocol):
    """What a profiled compile returns: the runtime's CompileResult, a foreign model's compile."""

    @property
    def build_s(self) -> float: ...

    @property
    def compile_s(self) -> float: ...


Compiled = TypeVar("Compiled", bound=TimedCompile)


def profile_rung(
    compile_fn: Callable[[], Compiled],
    capacity: int,
    pass_file: Path | None,
    sampler: RssSampler | None,
    observe: bool = True,
    reset_after: bool = True,
    exclude_tids: frozenset[int] = frozenset(),
) -> tuple[RungProfile, Compiled]:
    """Run ``compile_fn()`` (returning a runtime CompileResult) under the counters.

    Returns (RungProfile, CompileResult). ITT events inside the compile's time window are kept,
    except those of ``exclude_tids`` (e.g. a decode thread running concurrently: its inference
    tasks fall in the same window). With ``reset_after`` the collector forgets everything
    afterwards, so a long ladder keeps only one rung's events in memory; a caller that records
    other work concurrently passes False.
    """
    offset0 = _file_size(pass_file)
    clock = ClockPair.sample()
    rss_before = sampler.sample() if sampler else 0
    t0 = time.monotonic_ns()
    result = compile_fn()
    t1 = time.monotonic_ns()
    rss_after = sampler.sample() if sampler else 0
    build = (t0, t0 + int(result.build_s * 1e9))
    compile_window = (max(build[1], t1 - int(result.compile_s * 1e9)), t1)
    events: list[IttEvent] = []
    if observe:
        events = [
            e
            for e in itt_collector.events()
            if e.begin_ns >= t0 and e.end_ns <= t1 and e.tid not in exclude_tids
        ]
        if reset_after:
            itt_collector.reset()
    region = _compile_region(events)
    if region is not None:
        compile_window = (region.begin_ns, region.end_ns)
    passes = None
    if pass_file is not None and pass_file.exists():
        passes = parse_file(pass_file, offset0, _file_size(pass_file)).shifted(clock.offset_ns)
    return (
        RungProfile(
            capacity=capacity,
            begin_ns=t0,
            end_ns=t1,
            build=build,
            compile=compile_window,
            compile_from_itt=region is not None,
            events=events,
            passes=passes,
            rss_before=rss_before,
            rss_after=rss_after,
            rss_peak=max(sampler.peak_between(t0, t1) or 0, rss_before, rss_after)
            if sampler
            else None,
        ),
        result,
    )
