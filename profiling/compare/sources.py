"""Which results the compare page reads, and the page of each.

A kind of results is one entry: what marks a path as its kind and the function that builds
its page. `ab` and `profile-compile` directories and a benchmark's result file are entries
here; campaigns (a store, or a `campaign report` directory) add theirs
(profiling/campaigns/results/page.py), given to ``build_page`` by the command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.results_format.experiment import EXPERIMENT
from compile_ahead.profiling.results_format.profile import REPORT_NAME

PAGE_NAME = "compare.html"  # the page's name in a results directory


@dataclass(frozen=True)
class Page:
    title: str
    html: str
    traces: dict[str, Path]  # the page's trace link ids -> trace files


@dataclass(frozen=True)
class Source:
    kind: str  # what the user calls it
    marker: str  # the file that makes a directory this kind (or what makes a path this kind)
    build: Callable[[Path], Page]
    matches: Callable[[Path], bool] | None = None  # default: a directory holding ``marker``

    def holds(self, path: Path) -> bool:
        if self.matches is not None:
            return self.matches(path)
        return path.is_dir() and (path / self.marker).is_file()


def _experiment(directory: Path) -> Page:
    from compile_ahead.profiling.compare import experiment_page, model

    data = model.load(directory)
    return Page(data.title, experiment_page.render(data), data.traces)


def _profile(directory: Path) -> Page:
    from compile_ahead.profiling.compare import profile_page

    data = profile_page.load(directory)
    return Page(data.title, profile_page.render(data), data.traces)


def _benchmark(path: Path) -> Page:
    from compile_ahead.profiling.compare import benchmark_page

    return Page(
        f"benchmark: {path.stem}", benchmark_page.render(path, benchmark_page.load(path)), {}
    )


def _is_benchmark(path: Path) -> bool:
    from compile_ahead.profiling.compare.benchmark_page import is_benchmark_result

    return is_benchmark_result(path)


SOURCES: tuple[Source, ...] = (
    Source("`ab` results (or `ab report` pooled output)", EXPERIMENT, _experiment),
    Source("`profile-compile` output", REPORT_NAME, _profile),
    Source("a benchmark's --json result", "RESULT.json", _benchmark, _is_benchmark),
)


def build_page(path: Path, more: Sequence[Source] = ()) -> Page:
    """The page of ``path`` (a results directory, or what ``more`` reads), or one line saying
    why there is none."""
    if not path.exists():
        raise CompileAheadError(f"{path}: no such file or directory")
    sources = (*SOURCES, *more)
    for source in sources:
        if source.holds(path):
            return source.build(path)
    if not path.is_dir():
        raise CompileAheadError(f"{path}: not a directory")
    known = "; ".join(f"{s.marker} of {s.kind}" for s in sources)
    raise CompileAheadError(f"{path}: no results to compare (found none of: {known})")
