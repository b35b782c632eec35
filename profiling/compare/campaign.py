"""Campaign views from plain data: the design header, the cross-cell table, a forest plot per
endpoint, release histories (a line per model and rung across releases, with intervals), the
passes that moved most between consecutive releases, and one section per cell that a click on
the cell opens.

The data comes from the campaign's analysis (profiling/campaigns/results/page.py maps it here):
every verdict is the trials' judgement of that comparison (trials.power), shown as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from compile_ahead.profiling.compare import html as h
from compile_ahead.profiling.compare import svg
from compile_ahead.profiling.compare.html import Cell as TableCell
from compile_ahead.profiling.compare.html import Column, Row
from compile_ahead.profiling.compare.model import status_css
from compile_ahead.profiling.compare.svg import ForestRow, HistorySeries
from compile_ahead.profiling.trials.report import display_unit, fmt_number


@dataclass(frozen=True)
class CellEffect:
    """One comparison of one endpoint in a cell: a row of the cross-cell table."""

    key: str  # the endpoint's key (a forest plot per key)
    endpoint: str  # its label
    versus: str  # "TREATMENT vs CONTROL"
    unit: str
    effect: float | None  # mean paired difference (treatment - control), in ``unit``
    percent: float | None  # of the control's mean
    ci_low: float | None
    ci_high: float | None
    pairs: int
    status: str  # the verdict: the trials' judgement (power.Judgement.status), or why none
    flagged: bool
    mde_pct: float | None = None
    control_mean: float | None = None
    count: str | None = None  # a count row's text (no test), shown as its effect

    @property
    def css(self) -> str:
        return status_css(self.status) if self.flagged else ""


@dataclass(frozen=True)
class CampaignCell:
    cell_id: str  # unique within the campaign (a cell, or a cell's blocks on one machine)
    label: str  # what the cell is, e.g. "model=qwen2.5-0.5b, ladder=1024,2048"
    effects: tuple[CellEffect, ...]
    section: str = ""  # the cell's own section (HTML), opened by a click on the cell
    machine: str = ""  # the fingerprint its blocks ran on (short digest)
    state: str = ""  # blocks done, partial, or why it is not analysed

    @property
    def anchor(self) -> str:
        return anchor_of(self.cell_id)


def anchor_of(cell_id: str) -> str:
    return "cell-" + re.sub(r"[^A-Za-z0-9_-]", "-", cell_id)


@dataclass(frozen=True)
class Machine:
    digest: str
    description: str
    cells: tuple[str, ...]  # labels of the cells whose blocks ran on it


@dataclass(frozen=True)
class CampaignHeader:
    title: str
    source: str  # the store or report directory the page was read from
    facts: dict[str, str]  # spec, kind, pairs, warm-up, arms (with their builds), axes
    spec_text: str
    machines: tuple[Machine, ...] = ()
    notices: tuple[str, ...] = ()  # failed blocks, cells not analysed: said before any number


@dataclass(frozen=True)
class ReleaseHistory:
    title: str  # e.g. "Compile wall C=1024"
    unit: str
    releases: tuple[str, ...]  # in release order
    series: tuple[HistorySeries, ...]  # a line per model and rung


@dataclass(frozen=True)
class MovedPass:
    name: str
    manager: str
    before_ms: float | None
    after_ms: float | None
    effect_ms: float
    ci_low: float | None
    ci_high: float | None
    percent: float | None
    status: str  # the pass's judgement (Holm over the passes of the pair, noise floor)
    flagged: bool


@dataclass(frozen=True)
class PassMoves:
    """The passes that moved most between two consecutive arms of one cell."""

    cell_id: str
    cell: str
    before: str
    after: str
    passes: tuple[MovedPass, ...] = field(default_factory=tuple)


def header(head: CampaignHeader, cells: Sequence[CampaignCell]) -> str:
    """Title, what went wrong, the design, each cell's machine and state, the machines."""
    rows = [
        Row([TableCell(f'<a href="#{c.anchor}">{escape(c.label)}</a>', c.label),
             h.text(c.machine or h.DASH), h.text(c.state)],
            {"data-cell": c.anchor})
        for c in cells
    ]  # fmt: skip
    machines = [
        Row([h.text(m.digest[:8]), h.text(m.description), h.text("; ".join(m.cells) or h.DASH)])
        for m in head.machines
    ]
    return (
        f"<h1>{escape(head.title)}</h1>"
        f'<p class="muted">{escape(head.source)}</p>'
        + h.banners(head.notices, "error")
        + '<h2 id="design">Design</h2>'
        + h.facts(head.facts)
        + "<details><summary>The campaign file</summary>"
        f"<pre><code>{escape(head.spec_text)}</code></pre></details>"
        + "<h3>Cells and their machines</h3>"
        + h.table([Column("Cell"), Column("Machine"), Column("Blocks")], rows, "cells-list")
        + "<h3>Machines</h3>"
        + (h.table([Column("Fingerprint"), Column("Machine"), Column("Cells")], machines,
                   sortable=False)
           if machines else '<p class="note">No block has run yet: no machine recorded.</p>')
    )  # fmt: skip


def _effect_cells(e: CellEffect) -> list[TableCell]:
    _, div = display_unit(e.unit)
    if e.count is not None:
        return [h.text(e.count), h.number(None), TableCell(h.DASH, None, True, "n")]
    return [
        h.number(None if e.effect is None else e.effect / div, h.signed(e.effect, e.unit)),
        h.number(e.percent, h.percent(e.percent)),
        TableCell(
            escape(h.interval(e.ci_low, e.ci_high, e.unit)),
            None if e.ci_low is None else e.ci_low / div,
            True,
            "n",
        ),
    ]


def _effect_row(cell: CampaignCell, e: CellEffect) -> Row:
    mde = None if e.mde_pct is None else f"\u00b1{fmt_number(e.mde_pct)}%"
    cells = [
        TableCell(f'<a href="#{cell.anchor}">{escape(cell.label)}</a>', cell.label),
        h.text(cell.machine or h.DASH),
        h.text(e.endpoint),
        h.text(e.versus),
        *_effect_cells(e),
        h.number(e.pairs, str(e.pairs)),
        h.number(e.mde_pct, mde),
        TableCell(escape(e.status), e.status, css="status"),
    ]
    attrs = {
        "class": e.css,
        "data-name": f"{cell.label} {e.endpoint} {e.versus}".lower(),
        "data-flagged": "1" if e.flagged else "0",
        "data-cell": cell.anchor,
        "data-key": e.key,
    }
    return Row(cells, attrs)


def cross_cell_table(cells: Sequence[CampaignCell], table_id: str = "cells-table") -> str:
    """Cell, machine, endpoint, comparison, effect, interval, pairs, MDE, verdict: one row per
    cell, endpoint and comparison; a click on the cell opens its section."""
    rows = [_effect_row(cell, e) for cell in cells for e in cell.effects]
    if not rows:
        return '<p class="note">No cell has a comparison yet: nothing to tabulate.</p>'
    flagged = [e.status for c in cells for e in c.effects if e.flagged]
    counts = ", ".join(f"{flagged.count(s)} {s}" for s in dict.fromkeys(flagged))
    summary = (
        f'<p class="note" id="flagged-count">{len(flagged)} of {len(rows)} comparisons flagged'
        f"{': ' + escape(counts) if counts else ''}.</p>"
    )
    cols = [Column("Cell"), Column("Machine"), Column("Endpoint"), Column("Comparison"),
            Column("Effect", True, "mean of the paired differences, treatment − control"),
            Column("Δ %", True, "of the control's mean"),
            Column("95% CI", True, "paired-t interval of the differences"),
            Column("Pairs", True),
            Column("MDE", True, "the smallest change these pairs detect with 80% power"),
            Column("Verdict", False, "the trials' judgement: interval, Holm, floor")]  # fmt: skip
    return (
        summary
        + h.filters(table_id, len(rows), flagged=True, what="rows")
        + h.table(cols, rows, table_id)
    )


def _forest_row(cell: CampaignCell, e: CellEffect, percent: bool, div: float) -> ForestRow:
    """In percent of the control's mean (so cells of different sizes share an axis), else in
    the endpoint's unit."""
    scale = 100.0 / e.control_mean if percent and e.control_mean else 1.0 / div
    return ForestRow(
        f"{cell.label} · {e.versus}",
        (e.effect or 0.0) * scale,
        None if e.ci_low is None else e.ci_low * scale,
        None if e.ci_high is None else e.ci_high * scale,
        e.css,
        f"#{cell.anchor}",
    )


def forest_plots(cells: Sequence[CampaignCell]) -> str:
    """Per endpoint (in the order they first appear), every cell's effect and interval."""
    endpoints: dict[str, list[tuple[CampaignCell, CellEffect]]] = {}
    for cell in cells:
        for e in cell.effects:
            if e.effect is not None and e.count is None:
                endpoints.setdefault(e.key, []).append((cell, e))
    parts = []
    for found in endpoints.values():
        first = found[0][1]
        shown, div = display_unit(first.unit)
        percent = all(e.control_mean for _, e in found)
        rows = [_forest_row(cell, e, percent, div) for cell, e in found]
        axis = "effect, % of the control's mean" if percent else f"effect ({shown})"
        parts.append(
            f'<h3 data-key="{escape(first.key)}">{escape(first.endpoint)}</h3>'
            + svg.forest(rows, axis)
        )
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


def _moved_row(p: MovedPass) -> Row:
    cells = [
        h.text(p.name),
        h.text(p.manager),
        h.number(p.before_ms),
        h.number(p.after_ms),
        h.number(p.effect_ms, h.signed(p.effect_ms, "ms")),
        h.number(p.percent, h.percent(p.percent)),
        TableCell(escape(h.interval(p.ci_low, p.ci_high, "ms")), p.ci_low, True, "n"),
        TableCell(escape(p.status), p.status, css="status"),
    ]
    return Row(cells, {"class": status_css(p.status) if p.flagged else ""})


def pass_moves(moves: PassMoves) -> str:
    """The pair's passes that moved most, ranked as `ab compile --pass-profile` ranks them."""
    title = f"{moves.cell}: {moves.before} → {moves.after}"
    if not moves.passes:
        return f'<h4>{escape(title)}</h4><p class="note">No pass seen in both arms\' profiles.</p>'
    rows = [_moved_row(p) for p in moves.passes]
    cols = [Column("Pass"), Column("Manager"), Column(f"{moves.before} ms", True),
            Column(f"{moves.after} ms", True), Column("Effect", True), Column("Δ %", True),
            Column("95% CI", True), Column("Verdict")]  # fmt: skip
    return f'<h4><a href="#{anchor_of(moves.cell_id)}">{escape(title)}</a></h4>' + h.table(
        cols, rows
    )


def cell_sections(cells: Sequence[CampaignCell]) -> str:
    return "\n".join(
        f'<details id="{cell.anchor}" class="cell"><summary>{escape(cell.label)}'
        f"{' · ' + escape(cell.machine) if cell.machine else ''} · {escape(cell.state)}"
        f"</summary>{cell.section}</details>"
        for cell in cells
    )


def campaign_page(
    head: CampaignHeader,
    cells: Sequence[CampaignCell],
    histories: Sequence[ReleaseHistory] = (),
    moves: Sequence[PassMoves] = (),
    history_title: str = "Release history",
) -> str:
    """The whole page: header, cross-cell table, forest plots, history, moves, the cells."""
    parts = [header(head, cells), '<h2 id="cells">Across cells</h2>', cross_cell_table(cells)]
    if any(e.effect is not None for c in cells for e in c.effects):
        parts += ['<h2 id="forest">Forest plots</h2>', forest_plots(cells)]
    if histories:
        parts += [f'<h2 id="history">{escape(history_title)}</h2>',
                  '<p class="note">Each arm\'s mean with its 95% t interval over the blocks; '
                  "a line per cell (model, format, ladder).</p>",
                  *(release_history(x) for x in histories)]  # fmt: skip
    if moves:
        parts += ['<h3 id="moves">Passes that moved most between consecutive arms</h3>',
                  *(pass_moves(m) for m in moves)]  # fmt: skip
    parts += ['<h2 id="each-cell">Each cell</h2>', '<p class="note">Click a cell to open it.</p>',
              cell_sections(cells)]  # fmt: skip
    return h.document(head.title, "\n".join(parts))
