"""The compare page's per-pass section of an `ab compile` comparison: self time per pass in
both arms, judged, and the passes that ran in one arm only."""

from __future__ import annotations

from html import escape

from compile_ahead.profiling.compare import html as h
from compile_ahead.profiling.compare import model as m
from compile_ahead.profiling.compare.html import Cell, Column, Row
from compile_ahead.profiling.compare.judged_cells import judged_cells, judged_columns, strip_of
from compile_ahead.profiling.trials.report import fmt_number


def passes(page: m.ExperimentPage, c: m.Comparison, anchor: str) -> str:
    control, t = page.design.control, c.treatment
    rows = [_pass_row(p) for p in c.passes or []]
    cols = [
        Column("Pass"),
        Column("Manager"),
        Column(f"self {control} ms", True),
        Column(f"self {t} ms", True),
        *judged_columns(control, t, " ms"),
        Column(f"calls {control}", True),
        Column(f"calls {t}", True),
        Column("Δ calls", True),
        Column("Share", True, f"of {t}'s compile wall"),
        Column("Per pair", False, "self-time change per pair; bar: 95% CI; shaded: noise floor"),
    ]
    ident = f"{anchor}passes-{t}-table"
    flagged = sum(1 for p in c.passes or [] if p.judged.flagged)
    only = _one_arm_only(c, f"{anchor}passes-{t}-only")
    return (
        f'<h2 id="{anchor}passes-{escape(t)}">Passes: {escape(t)} vs {escape(control)}</h2>'
        f'<p class="note">Self time per pass (its duration minus the pass managers it ran, '
        f"summed over its runs and the rungs of a trial), mean per trial; {len(rows)} passes in "
        f"both arms, {flagged} flagged (Holm's correction over these {len(rows)} passes). Ranked "
        "as the markdown report ranks them; click a column to sort.</p>"
        + h.filters(ident, len(rows), flagged=True, what="passes")
        + h.table(cols, rows, ident)
        + only
    )


def _pass_row(p: m.PassRow) -> Row:
    share = None if p.share is None else p.share * 100
    cells = [
        h.text(p.name),
        h.text(p.manager),
        h.number(p.self_ms[0]),
        h.number(p.self_ms[1]),
        *judged_cells(p.judged, "ms"),
        h.number(p.calls[0], _count(p.calls[0])),
        h.number(p.calls[1], _count(p.calls[1])),
        h.number(p.calls_delta, _count(p.calls_delta, signed=True)),
        h.number(share, None if share is None else f"{fmt_number(share)}%"),
        Cell(strip_of(p.pairs, p.judged, "ms")),
    ]
    attrs = {
        "class": p.judged.css,
        "data-name": f"{p.name} {p.manager}".lower(),
        "data-flagged": "1" if p.judged.flagged else "0",
    }
    return Row(cells, attrs)


def _count(value: float | None, signed: bool = False) -> str | None:
    """A mean count per trial: whole numbers without decimals."""
    if value is None:
        return None
    text = f"{value:+.4g}" if signed and value != 0 else f"{value:.4g}"
    return text.replace("-", "\u2212")


def _one_arm_only(c: m.Comparison, ident: str) -> str:
    if not c.one_arm_only:
        return '<p class="note">No pass ran in one arm only.</p>'
    rows = [
        Row(
            [
                h.text(o.name),
                h.text(o.manager),
                h.text(o.arm),
                h.number(o.mean_ms),
                h.number(o.calls, _count(o.calls)),
            ],
            {"data-name": f"{o.name} {o.manager}".lower()},
        )
        for o in sorted(c.one_arm_only, key=lambda o: -(o.mean_ms or 0.0))
    ]
    cols = [
        Column("Pass"),
        Column("Manager"),
        Column("Only in"),
        Column("mean self ms", True),
        Column("calls", True),
    ]
    return (
        f"<h3>Passes that ran in one arm only ({len(rows)})</h3>"
        '<p class="note">No paired effect: mean self time and calls per trial in the arm that '
        "ran them.</p>" + h.table(cols, rows, ident)
    )
