"""HTML building blocks of the compare page: the document (stylesheet and script inlined),
sortable tables whose cells carry their sort value, the name and "flagged only" filters,
and number formatting shared with the markdown report."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

from compile_ahead.profiling.compare.assets import CSS, JS
from compile_ahead.profiling.trials.report import MINUS, display_unit, fmt_number

DASH = "\u2014"


def document(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n"
        f"<body>\n{body}\n<script>{JS}</script>\n</body></html>\n"
    )


@dataclass(frozen=True)
class Cell:
    html: str
    sort: float | str | None = None  # the value sorting uses (None: sorts last)
    numeric: bool = False
    css: str = ""


def text(value: object, css: str = "") -> Cell:
    return Cell(escape(str(value)), str(value), css=css)


def number(value: float | None, shown: str | None = None, css: str = "") -> Cell:
    """A numeric cell: ``shown`` (or the value formatted) and the raw value to sort by."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Cell(DASH, None, True, f"n {css}".strip())
    return Cell(
        escape(shown if shown is not None else fmt_number(value)), value, True, f"n {css}".strip()
    )


@dataclass(frozen=True)
class Column:
    label: str
    numeric: bool = False
    title: str = ""  # a tooltip saying what the column is


@dataclass
class Row:
    cells: list[Cell]
    attrs: dict[str, str] = field(default_factory=dict)


def table(
    columns: Sequence[Column], rows: Sequence[Row], table_id: str = "", sortable: bool = True
) -> str:
    head = "".join(
        f"<th{_attr('data-type', 'num' if c.numeric else 'text')}{_attr('title', c.title)}>"
        f"{escape(c.label)}</th>"
        for c in columns
    )
    body = []
    for row in rows:
        attrs = "".join(_attr(k, v) for k, v in row.attrs.items())
        cells = "".join(
            f"<td{_attr('class', c.css)}{_sort_attr(c)}>{c.html}</td>" for c in row.cells
        )
        body.append(f"<tr{attrs}>{cells}</tr>")
    ident = _attr("id", table_id)
    css = _attr("class", "sortable" if sortable else "")
    return (
        f"<table{ident}{css}><thead><tr>{head}</tr></thead><tbody>\n"
        + "\n".join(body)
        + "\n</tbody></table>"
    )


def _attr(name: str, value: str) -> str:
    return f' {name}="{escape(value)}"' if value else ""


def _sort_attr(cell: Cell) -> str:
    if cell.sort is None:
        return ' data-v=""'
    if isinstance(cell.sort, float | int):
        return f' data-v="{cell.sort:.9g}"'
    return ""  # text sorts by what it shows


def filters(table_id: str, total: int, flagged: bool, what: str = "rows") -> str:
    """A name filter (and a "flagged only" box) for the table ``table_id``."""
    box = (
        '<label><input type="checkbox" class="flagged-only"> flagged only (interval excludes 0, '
        "significant after Holm's correction, larger than the noise floor)</label>"
        if flagged
        else ""
    )
    return (
        f'<div class="filters" data-for="{escape(table_id)}">'
        f'<input type="search" placeholder="filter by name" aria-label="filter by name">{box}'
        f'<span class="muted"><span class="shown">{total}</span> of {total} {escape(what)} '
        "shown</span></div>"
    )


def facts(items: Mapping[str, str], raw: frozenset[str] = frozenset()) -> str:
    """A definition list; values named in ``raw`` are HTML already."""
    body = "".join(
        f"<dt>{escape(k)}</dt><dd>{v if k in raw else escape(v)}</dd>" for k, v in items.items()
    )
    return f'<dl class="facts">{body}</dl>'


def banners(lines: Sequence[str], css: str = "") -> str:
    return "".join(f'<p class="banner {css}">{escape(line)}</p>' for line in lines)


def signed(value: float | None, unit: str = "", digits: int = 2) -> str:
    """``+1.23 unit`` / ``−1.23 unit`` in the unit's display scale."""
    if value is None:
        return DASH
    shown, div = display_unit(unit) if unit else ("", 1.0)
    v = value / div
    text = ("+" if v > 0 else "") + fmt_number(v, digits)
    return f"{text} {shown}".rstrip()


def percent(value: float | None) -> str:
    if value is None:
        return DASH
    return ("+" if value > 0 else "") + fmt_number(value) + "%"


def interval(low: float | None, high: float | None, unit: str = "") -> str:
    if low is None or high is None:
        return DASH
    shown, div = display_unit(unit) if unit else ("", 1.0)
    return f"{fmt_number(low / div)} to {fmt_number(high / div)} {shown}".rstrip()


def p_value(p: float | None) -> str:
    return DASH if p is None else f"{p:.4g}".replace("-", MINUS)
