"""Which results directories the compare page reads, and the page of each.

A kind of results is one entry: the file that marks a directory as its kind and the function
that builds its page (a campaign store adds one more entry).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.compile_profiler import REPORT_NAME
from compile_ahead.profiling.trials.experiment import EXPERIMENT


@dataclass(frozen=True)
class Page:
    title: str
    html: str
    traces: dict[str, Path]  # the page's trace link ids -> trace files


@dataclass(frozen=True)
class Source:
    kind: str  # what the user calls it
    marker: str  # the file that makes a directory this kind
    build: Callable[[Path], Page]


def _experiment(directory: Path) -> Page:
    from compile_ahead.profiling.compare import experiment_page, model

    data = model.load(directory)
    return Page(data.title, experiment_page.render(data), data.traces)


def _profile(directory: Path) -> Page:
    from compile_ahead.profiling.compare import profile_page

    data = profile_page.load(directory)
    return Page(data.title, profile_page.render(data), data.traces)


SOURCES: tuple[Source, ...] = (
    Source("`ab` results (or `ab report` pooled output)", EXPERIMENT, _experiment),
    Source("`profile-compile` output", REPORT_NAME, _profile),
)


def build_page(directory: Path) -> Page:
    """The page of ``directory``, or one line saying why there is none."""
    if not directory.exists():
        raise CompileAheadError(f"{directory}: no such directory")
    if not directory.is_dir():
        raise CompileAheadError(f"{directory}: not a directory")
    for source in SOURCES:
        if (directory / source.marker).is_file():
            return source.build(directory)
    known = "; ".join(f"{s.marker} of {s.kind}" for s in SOURCES)
    raise CompileAheadError(f"{directory}: no results to compare (found none of: {known})")
