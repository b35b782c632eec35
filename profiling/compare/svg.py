"""Small inline SVG plots for the compare page, drawn by our own code (no library, nothing to
fetch): a strip of paired differences, a forest plot, lines across releases with intervals.

Colours come from the page's stylesheet through class names (status classes: regression,
improvement, changed), so a plot carries only its geometry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape


def num(x: float) -> str:
    """A coordinate: one decimal, no trailing zeros (keeps a page of many plots small)."""
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True)
class Scale:
    """Linear map from data [lo, hi] to pixels [start, end]."""

    lo: float
    hi: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = self.hi - self.lo or 1.0
        return self.start + (value - self.lo) / span * (self.end - self.start)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def tick_label(value: float) -> str:
    return f"{value:.6g}".replace("-", "\u2212")


def svg(width: float, height: float, body: Sequence[str], css: str, title: str = "") -> str:
    head = f"<title>{escape(title)}</title>" if title else ""
    return (
        f'<svg class="{css}" width="{num(width)}" height="{num(height)}" '
        f'viewBox="0 0 {num(width)} {num(height)}" role="img">{head}{"".join(body)}</svg>'
    )


def strip(
    diffs: Sequence[float],
    ci: tuple[float, float] | None,
    band: tuple[float, float] | None,
    status: str,
    title: str = "",
    width: float = 150,
    height: float = 20,
) -> str:
    """Per-pair differences as dots on a line through 0, the mean's interval as a bar, the
    band within the noise floor (its low and high ends around 0) shaded."""
    reach = [abs(d) for d in diffs] + [abs(v) for v in (*(ci or ()), *(band or ()))]
    span = max(reach, default=0.0) * 1.1 or 1.0
    x = Scale(-span, span, 3, width - 3)
    mid = height / 2
    body = []
    if band:
        body.append(
            f'<rect class="band" x="{num(x(band[0]))}" y="1" '
            f'width="{num(x(band[1]) - x(band[0]))}" height="{num(height - 2)}"/>'
        )
    body.append(
        f'<line class="zero" x1="{num(x(0))}" y1="1" x2="{num(x(0))}" y2="{num(height - 1)}"/>'
    )
    if ci is not None:
        body.append(
            f'<line class="ci" x1="{num(x(ci[0]))}" y1="{num(mid)}" x2="{num(x(ci[1]))}" '
            f'y2="{num(mid)}"/>'
        )
    body += [f'<circle class="dot" cx="{num(x(d))}" cy="{num(mid)}" r="2"/>' for d in diffs]
    return svg(width, height, body, f"strip {status}", title)


@dataclass(frozen=True)
class ForestRow:
    label: str
    effect: float
    low: float | None
    high: float | None
    status: str  # a status class: regression, improvement, changed or none
    href: str | None = None  # where clicking the row's label leads


def forest(rows: Sequence[ForestRow], unit: str, width: float = 560) -> str:
    """One row per comparison: its effect as a dot, its interval as a bar, 0 marked; the
    labels link to their sections (the label column widens to the longest label)."""
    longest = max((len(r.label) for r in rows), default=0)
    label_w, row_h, top, bottom = min(max(200.0, 6.2 * longest), 480.0), 18.0, 6.0, 24.0
    width = max(width, label_w + 360.0)
    values = [0.0] + [v for r in rows for v in (r.effect, r.low, r.high) if v is not None]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or 1.0
    x = Scale(lo - pad, hi + pad, label_w + 8, width - 8)
    height = top + row_h * len(rows) + bottom
    body = [
        f'<line class="zero" x1="{num(x(0))}" y1="{num(top)}" x2="{num(x(0))}" '
        f'y2="{num(height - bottom)}"/>'
    ]
    for i, r in enumerate(rows):
        y = top + row_h * (i + 0.5)
        label = (
            f'<text x="{num(label_w)}" y="{num(y + 4)}" text-anchor="end">{escape(r.label)}</text>'
        )
        if r.href:
            label = f'<a href="{escape(r.href)}">{label}</a>'
        body.append(label)
        if r.low is not None and r.high is not None:
            body.append(
                f'<line class="ci {r.status}" x1="{num(x(r.low))}" y1="{num(y)}" '
                f'x2="{num(x(r.high))}" y2="{num(y)}"/>'
            )
        body.append(
            f'<circle class="dot {r.status}" cx="{num(x(r.effect))}" cy="{num(y)}" r="3.5"/>'
        )
    body += _x_axis(x, lo - pad, hi + pad, height - bottom, unit)
    return svg(width, height, body, "forest")


def _x_axis(x: Scale, lo: float, hi: float, y: float, unit: str) -> list[str]:
    parts = [
        f'<line class="axis" x1="{num(x.start)}" y1="{num(y)}" x2="{num(x.end)}" y2="{num(y)}"/>'
    ]
    for t in nice_ticks(lo, hi):
        parts.append(
            f'<text class="tick" x="{num(x(t))}" y="{num(y + 12)}" '
            f'text-anchor="middle">{tick_label(t)}</text>'
        )
    parts.append(
        f'<text class="tick" x="{num(x.end)}" y="{num(y + 22)}" '
        f'text-anchor="end">{escape(unit)}</text>'
    )
    return parts


@dataclass(frozen=True)
class HistoryPoint:
    release: str
    value: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class HistorySeries:
    label: str  # e.g. the model and rung
    points: tuple[HistoryPoint, ...]
    href: str | None = None


def history(
    series: Sequence[HistorySeries], releases: Sequence[str], unit: str, width: float = 620
) -> str:
    """A line per series across ``releases`` (in that order), each point with its interval;
    the series' labels in a legend under the plot (lines close together keep apart)."""
    left, right, top, bottom, plot_h, line_h = 56.0, 40.0, 8.0, 34.0, 240.0, 16.0
    height = plot_h + line_h * len(series) + 4
    values = [
        v for s in series for p in s.points for v in (p.value, p.low, p.high) if v is not None
    ]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.1 or 1.0
    y = Scale(lo - pad, hi + pad, plot_h - bottom, top)
    step = (width - left - right) / max(len(releases) - 1, 1)
    xs = {r: left + i * step for i, r in enumerate(releases)}
    body = _y_axis(y, lo - pad, hi + pad, left, width - right, unit)
    for r in releases:
        body.append(
            f'<text class="tick" x="{num(xs[r])}" y="{num(plot_h - bottom + 14)}" '
            f'text-anchor="middle">{escape(r)}</text>'
        )
    for k, s in enumerate(series):
        points = [p for p in s.points if p.release in xs]
        cls = f"series s{k % 8}"
        path = " ".join(
            f"{'M' if i == 0 else 'L'}{num(xs[p.release])},{num(y(p.value))}"
            for i, p in enumerate(points)
        )
        group = [f'<path class="{cls}" d="{path}"/>'] if points else []
        for p in points:
            if p.low is not None and p.high is not None:
                group.append(
                    f'<line class="{cls} whisker" x1="{num(xs[p.release])}" '
                    f'y1="{num(y(p.low))}" x2="{num(xs[p.release])}" '
                    f'y2="{num(y(p.high))}"/>'
                )
            group.append(
                f'<circle class="{cls}" cx="{num(xs[p.release])}" cy="{num(y(p.value))}" r="3">'
                f"<title>{escape(point_title(s.label, p, unit))}</title></circle>"
            )
        legend = plot_h + line_h * (k + 0.5)
        group.append(
            f'<line class="{cls}" x1="{num(left)}" y1="{num(legend)}" x2="{num(left + 24)}" '
            f'y2="{num(legend)}"/><text x="{num(left + 30)}" y="{num(legend + 4)}">'
            f"{escape(s.label)}</text>"
        )
        joined = "".join(group)
        body.append(f'<a href="{escape(s.href)}">{joined}</a>' if s.href else f"<g>{joined}</g>")
    return svg(width, height, body, "history")


def point_title(label: str, p: HistoryPoint, unit: str) -> str:
    """What hovering a point says: the series, the release, the value and its interval."""
    interval = ""
    if p.low is not None and p.high is not None:
        interval = f" (95% CI {tick_label(p.low)} to {tick_label(p.high)})"
    return f"{label}, {p.release}: {tick_label(p.value)}{interval} {unit}".rstrip()


def _y_axis(y: Scale, lo: float, hi: float, left: float, right: float, unit: str) -> list[str]:
    parts = [
        f'<line class="axis" x1="{num(left)}" y1="{num(y.end)}" x2="{num(left)}" '
        f'y2="{num(y.start)}"/>'
    ]
    for t in nice_ticks(lo, hi):
        parts.append(
            f'<line class="grid" x1="{num(left)}" y1="{num(y(t))}" x2="{num(right)}" '
            f'y2="{num(y(t))}"/>'
        )
        parts.append(
            f'<text class="tick" x="{num(left - 4)}" y="{num(y(t) + 4)}" '
            f'text-anchor="end">{tick_label(t)}</text>'
        )
    parts.append(
        f'<text class="tick" x="{num(left - 4)}" y="{num(y.end - 0)}" '
        f'text-anchor="end">{escape(unit)}</text>'
    )
    return parts
