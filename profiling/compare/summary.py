"""The page's summary: per comparison, the flagged regressions and improvements of its
endpoints and of its passes, with their count, mean and largest change; and the range of
changes its endpoints could have seen (their minimal detectable effects)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compile_ahead.profiling.compare.model import Comparison, Judged


@dataclass(frozen=True)
class FlagTally:
    """Flagged changes of one direction: how many, their mean and their largest change."""

    count: int
    mean_percent: float | None  # mean of the changes in percent of the control (where known)
    largest: str | None  # what moved most (by percent where known, else by amount)
    largest_percent: float | None
    largest_diff: float | None
    unit: str  # of largest_diff


@dataclass(frozen=True)
class SummaryRow:
    treatment: str
    scope: str  # "endpoints" or "passes"
    regressions: FlagTally
    improvements: FlagTally


def tally(items: Sequence[tuple[str, Judged, str]], status: str) -> FlagTally:
    """The flagged changes of ``items`` whose status is ``status`` (regression, improvement)."""
    chosen = [
        (what, j.summary, unit)
        for what, j, unit in items
        if j.flagged and j.status == status and j.summary is not None
    ]
    if not chosen:
        return FlagTally(0, None, None, None, None, "")
    percents = [s.percent for _, s, _ in chosen if s.percent is not None]
    what, s, unit = max(
        chosen, key=lambda c: (c[1].percent is not None, abs(c[1].percent or c[1].mean_diff))
    )
    mean = sum(percents) / len(percents) if percents else None
    return FlagTally(len(chosen), mean, what, s.percent, s.mean_diff, unit)


def summarise(comparisons: Sequence[Comparison]) -> list[SummaryRow]:
    """Per treatment, the flagged regressions and improvements of its endpoints and of its
    passes."""
    rows = []
    for c in comparisons:
        scopes = [("endpoints", [(e.label, e.judged, e.unit) for e in c.endpoints])]
        if c.passes is not None:
            scopes.append(
                ("passes", [(f"{p.name} [{p.manager}]", p.judged, "ms") for p in c.passes])
            )
        for scope, items in scopes:
            rows.append(
                SummaryRow(
                    c.treatment,
                    scope,
                    tally(items, "regression"),
                    tally(items, "improvement"),
                )
            )
    return rows


@dataclass(frozen=True)
class SeenRange:
    """The smallest and largest minimal detectable effect over a comparison's endpoints."""

    smallest: tuple[str, float]  # (endpoint label, MDE in percent)
    largest: tuple[str, float]
    pairs: int


def mde_range(c: Comparison) -> SeenRange | None:
    """None when no endpoint of the comparison has an MDE (under 2 pairs)."""
    known = [
        (e.label, e.judged.summary.mde_pct, e.judged.summary.n)
        for e in c.endpoints
        if e.judged.summary is not None and e.judged.summary.mde_pct is not None
    ]
    if not known:
        return None
    low = min(known, key=lambda k: k[1])
    high = max(known, key=lambda k: k[1])
    return SeenRange((low[0], low[1]), (high[0], high[1]), max(k[2] for k in known))
