"""The cells and columns of a judged comparison (effect, interval, noise floor, MDE, flag) and
its per-pair strip, shared by the endpoint and pass tables of the compare page."""

from __future__ import annotations

from html import escape

from compile_ahead.profiling.compare import html as h
from compile_ahead.profiling.compare import model as m
from compile_ahead.profiling.compare import svg
from compile_ahead.profiling.compare.html import Cell, Column
from compile_ahead.profiling.trials.report import display_unit, fmt_number
from compile_ahead.profiling.trials.stats import PairedSummary


def strip_of(pairs: tuple[m.Pair, ...], judged: m.Judged, unit: str) -> str:
    """The per-pair changes in percent, the ratio's interval and the floor's band (what the
    rule reads); in the endpoint's unit, without a band, where a value is not positive."""
    s, j = judged.summary, judged.judgement
    lines = "; ".join(f"{fmt_number(a)} → {fmt_number(b)}" for a, b in pairs)
    if s is not None and all(a > 0 and b > 0 for a, b in pairs):
        ci = None
        if s.ratio_ci_low is not None and s.ratio_ci_high is not None:
            ci = ((s.ratio_ci_low - 1) * 100, (s.ratio_ci_high - 1) * 100)
        band = None
        if j is not None and j.floor_pct is not None:
            band = ((1 / (1 + j.floor_pct / 100) - 1) * 100, j.floor_pct)
        changes = [(b / a - 1) * 100 for a, b in pairs]
        title = f"per pair, change in % (control → treatment: {lines})"
        return svg.strip(changes, ci, band, judged.css, title)
    _, div = display_unit(unit)
    ci = None
    if s is not None and s.ci_low is not None and s.ci_high is not None:
        ci = (s.ci_low / div, s.ci_high / div)
    title = f"per pair, difference (control → treatment: {lines})"
    return svg.strip([(b - a) / div for a, b in pairs], ci, None, judged.css, title)


def pct_interval(s: PairedSummary | None) -> Cell:
    if s is None or s.ratio_ci_low is None or s.ratio_ci_high is None:
        return Cell(h.DASH, None, True, "n")
    low, high = (s.ratio_ci_low - 1) * 100, (s.ratio_ci_high - 1) * 100
    return Cell(escape(f"{h.percent(low)} to {h.percent(high)}"), low, True, "n")


def judged_cells(j: m.Judged, unit: str) -> list[Cell]:
    """Δ, effect %, interval, p, Holm p, floor, status: the columns every comparison row
    shares."""
    s, judgement = j.summary, j.judgement
    _, div = display_unit(unit)
    floor = None if judgement is None else judgement.floor_pct
    holm = None if judgement is None else judgement.holm_p
    return [
        h.number(
            None if s is None else s.mean_diff / div,
            None if s is None else h.signed(s.mean_diff, unit),
        ),
        h.number(None if s is None else s.effect_pct,
                 None if s is None else h.percent(s.effect_pct)),
        pct_interval(s),
        h.number(
            None if s is None else s.sign_flip_p, None if s is None else h.p_value(s.sign_flip_p)
        ),
        h.number(holm, h.p_value(holm)),
        h.number(floor, None if floor is None else f"{fmt_number(floor)}%"),
        Cell(escape(j.status), j.status, css="status unavailable" if j.unavailable else "status"),
    ]  # fmt: skip


def judged_columns(control: str, treatment: str, unit: str) -> list[Column]:
    """The columns of _judged_cells."""
    return [
        Column(f"Δ{unit}", True, f"{treatment} − {control}, mean of the paired differences"),
        Column("Effect %", True, "geometric mean of the per-pair ratios, as a change"),
        Column("95% CI %", True, "paired-t interval of the log-ratios, as a change"),
        Column("p", True, "exact two-sided sign-flip"),
        Column("Holm p", True, "paired-t p on the log-ratios, Holm-adjusted over the table"),
        Column("Noise floor %", True, "a change no larger than this is never flagged"),
        Column("Verdict"),
    ]


def mde_cell(s: PairedSummary | None) -> Cell:
    if s is None or s.mde_pct is None:
        return Cell(h.DASH, None, True, "n")
    text = escape(f"\u00b1{fmt_number(s.mde_pct)}%")
    return Cell(f'<span title="{escape(s.mde_text())}">{text}</span>', s.mde_pct, True, "n")
