"""Campaign views from plain data: the cross-cell table, a forest plot per endpoint, release
histories (a line per model and rung across releases, with intervals) and one section per
cell that a click on the cell opens.

A campaign store feeds these with its cells' effects (each cell is an `ab` experiment:
``cell_from_experiment`` turns one's page data into a cell, its section included).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from compile_ahead.profiling.compare import experiment_page, svg
from compile_ahead.profiling.compare import html as h
from compile_ahead.profiling.compare.html import Cell as TableCell
from compile_ahead.profiling.compare.html import Column, Row
from compile_ahead.profiling.compare.model import ExperimentPage, status_css
from compile_ahead.profiling.compare.svg import ForestRow, HistorySeries
from compile_ahead.profiling.trials.report import display_unit


@dataclass(frozen=True)
class CellEffect:
    endpoint: str  # the endpoint's label
    unit: str
    effect: float  # mean paired difference (treatment - control), in ``unit``
    percent: float | None  # of the control's mean
    ci_low: float | None
    ci_high: float | None
    pairs: int
    status: str  # the trials' judgement (power.Judgement.status): "regression", ...
    flagged: bool

    @property
    def css(self) -> str:
        return status_css(self.status) if self.flagged else ""


@dataclass(frozen=True)
class CampaignCell:
    cell_id: str  # unique within the campaign
    label: str  # what the cell is, e.g. "qwen2.5-0.5b bf16, ladder 1024,2048"
    effects: tuple[CellEffect, ...]
    section: str = ""  # the cell's own section (HTML), opened by a click on the cell

    @property
    def anchor(self) -> str:
        return "cell-" + re.sub(r"[^A-Za-z0-9_-]", "-", self.cell_id)


@dataclass(frozen=True)
class ReleaseHistory:
    title: str  # e.g. "compile wall, C=1024"
    unit: str
    releases: tuple[str, ...]  # in release order
    series: tuple[HistorySeries, ...]  # a line per model and rung


def cell_from_experiment(
    cell_id: str, label: str, page: ExperimentPage, treatment: str | None = None
) -> CampaignCell:
    """A campaign cell from an `ab` experiment's page data: the effects of ``treatment`` (the
    first treatment by default) against the control, and the experiment's page as its
    section (its ids under the cell's anchor)."""
    comparison = next((c for c in page.comparisons if treatment in (None, c.treatment)), None)
    effects = tuple(
        CellEffect(e.label, e.unit, s.mean_diff, s.percent, s.ci_low, s.ci_high, s.n,
                   e.judged.status, e.judged.flagged)
        for e in (comparison.endpoints if comparison else [])
        if (s := e.judged.summary) is not None
    )  # fmt: skip
    cell = CampaignCell(cell_id, label, effects)
    section = experiment_page.body(page, anchor=f"{cell.anchor}-")
    return CampaignCell(cell_id, label, effects, section)


def cross_cell_table(cells: Sequence[CampaignCell], table_id: str = "cells-table") -> str:
    """Cell, endpoint, effect, interval, pairs, verdict: one row per cell and endpoint."""
    rows = []
    for cell in cells:
        for e in cell.effects:
            _, div = display_unit(e.unit)
            link = f'<a href="#{cell.anchor}">{escape(cell.label)}</a>'
            rows.append(
                Row(
                    [
                        TableCell(link, cell.label),
                        h.text(e.endpoint),
                        h.number(e.effect / div, h.signed(e.effect, e.unit)),
                        h.number(e.percent, h.percent(e.percent)),
                        TableCell(
                            escape(h.interval(e.ci_low, e.ci_high, e.unit)),
                            None if e.ci_low is None else e.ci_low / div,
                            True,
                            "n",
                        ),
                        h.number(e.pairs, str(e.pairs)),
                        TableCell(escape(e.status), e.status, css="status"),
                    ],
                    {
                        "class": e.css,
                        "data-name": f"{cell.label} {e.endpoint}".lower(),
                        "data-flagged": "1" if e.flagged else "0",
                        "data-cell": cell.anchor,
                    },
                )
            )
    cols = [Column("Cell"), Column("Endpoint"), Column("Effect", True), Column("Δ %", True),
            Column("95% CI", True), Column("Pairs", True), Column("Verdict")]  # fmt: skip
    return h.filters(table_id, len(rows), flagged=True, what="rows") + h.table(cols, rows, table_id)


def forest_plots(cells: Sequence[CampaignCell]) -> str:
    """Per endpoint (in the order they first appear), every cell's effect and interval."""
    endpoints: dict[str, str] = {}
    for cell in cells:
        for e in cell.effects:
            endpoints.setdefault(e.endpoint, e.unit)
    parts = []
    for endpoint, unit in endpoints.items():
        shown, div = display_unit(unit)
        rows = [
            ForestRow(
                cell.label,
                e.effect / div,
                None if e.ci_low is None else e.ci_low / div,
                None if e.ci_high is None else e.ci_high / div,
                e.css,
                f"#{cell.anchor}",
            )
            for cell in cells
            for e in cell.effects
            if e.endpoint == endpoint
        ]
        parts.append(f"<h3>{escape(endpoint)}</h3>" + svg.forest(rows, f"effect ({shown})"))
    return "\n".join(parts)


def release_history(history: ReleaseHistory) -> str:
    shown, div = display_unit(history.unit)
    series = [
        HistorySeries(
            s.label,
            tuple(
                svg.HistoryPoint(
                    p.release,
                    p.value / div,
                    None if p.low is None else p.low / div,
                    None if p.high is None else p.high / div,
                )
                for p in s.points
            ),
            s.href,
        )
        for s in history.series
    ]
    return f"<h3>{escape(history.title)}</h3>" + svg.history(series, history.releases, shown)


def cell_sections(cells: Sequence[CampaignCell]) -> str:
    return "\n".join(
        f'<details id="{cell.anchor}" class="cell"><summary>{escape(cell.label)}</summary>'
        f"{cell.section}</details>"
        for cell in cells
    )


def campaign_page(
    title: str, cells: Sequence[CampaignCell], histories: Sequence[ReleaseHistory] = ()
) -> str:
    parts = [f"<h1>{escape(title)}</h1>", "<h2>Cells</h2>", cross_cell_table(cells)]
    if cells:
        parts += ["<h2>Forest plots</h2>", forest_plots(cells)]
    if histories:
        parts += ["<h2>Release history</h2>", *(release_history(x) for x in histories)]
    parts += ["<h2>Each cell</h2>", cell_sections(cells)]
    return h.document(title, "\n".join(parts))
