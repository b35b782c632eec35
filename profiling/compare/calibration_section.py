"""The compare page's `ab calibrate` section: per endpoint the noise, the A/A outcome and the
spin's effect against the expected one."""

from __future__ import annotations

from html import escape

from compile_ahead.profiling.compare import html as h
from compile_ahead.profiling.compare import model as m
from compile_ahead.profiling.compare.html import Column, Row
from compile_ahead.profiling.trials.report import fmt_number


def calibration(cal: m.CalibrationView, anchor: str) -> str:
    """`ab calibrate`: per endpoint, the noise, the A/A outcome, and the spin's effect against
    the expected one (calibration.summary's rows)."""
    rows = [_calibration_row(r) for r in cal.rows]
    delta = f"+{cal.delta_pct:g}%"
    cols = [Column("Endpoint"), Column("Pairs", True), Column("Noise (SD log-ratio)", True),
            Column("MDE", True), Column("A/A effect"), Column(f"{delta}: expected", True),
            Column(f"{delta}: effect", True), Column("95% CI"), Column("Detected")]  # fmt: skip
    return (
        f'<h2 id="{anchor}calibration">CALIBRATION: A/A and A/A{escape(delta)} (arm '
        f"{escape(cal.arm)})</h2>"
        "<p class=\"note\">Expected: the spin's seconds over the control's value (CPU time: "
        "the effect the spin makes; wall: at least this much). Detected: the 95% interval of "
        "the log-ratio excludes 0.</p>" + h.table(cols, rows, f"{anchor}calibration-table")
    )


def _calibration_row(r: dict) -> Row:
    d = r["delta"]
    low, high = d["ratio_ci"]
    aa = "; ".join(
        h.percent(a["effect_pct"]) + (" FLAGGED" if a["flagged"] else "") for a in r["aa"]
    )
    noise, mde = r["noise_log_sd"], r["mde_pct"]
    ci = h.DASH if low is None else f"{h.percent((low - 1) * 100)} to {h.percent((high - 1) * 100)}"
    cells = [
        h.text(r["label"]),
        h.number(r["n"], str(r["n"])),
        h.number(noise, None if noise is None else f"{noise:.4f}"),
        h.number(mde, None if mde is None else f"\u00b1{fmt_number(mde)}%"),
        h.text(aa or "no A/A arm (--aa)"),
        h.number(d["expected_pct"], h.percent(d["expected_pct"])),
        h.number(d["effect_pct"], h.percent(d["effect_pct"])),
        h.text(ci),
        h.text("yes" if d["detected"] else "no"),
    ]
    return Row(cells, {"data-key": r["key"]})
