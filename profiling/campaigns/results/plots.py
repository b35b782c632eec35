"""PNGs across cells: a forest plot per endpoint (each cell's paired effect with its 95% CI, in
percent of the control's mean so cells of different sizes share an axis, or in the endpoint's
unit when a control's mean is 0), and a history plot per compile cell (each arm's mean with its
95% t interval, arms in the spec's order: releases, oldest first)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from compile_ahead.output.atomic import writing
from compile_ahead.profiling.campaigns.results.history import WallPanel
from compile_ahead.profiling.trials.report import display_unit
from compile_ahead.profiling.trials.stats import PairedSummary


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    with writing(path):
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def forest(rows: list[tuple[str, PairedSummary]], title: str, unit: str, path: Path) -> Path | None:
    """``rows``: (label, paired summary) per comparison; None when nothing to draw."""
    if not rows:
        return None
    percent = all(s.percent is not None for _, s in rows)
    shown, div = display_unit(unit)
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.38 * len(rows)))
    for y, (_, s) in enumerate(reversed(rows)):
        scale = 100.0 / s.control_mean if percent else 1.0 / div
        mean = s.mean_diff * scale
        if s.ci_low is not None and s.ci_high is not None:
            low, high = s.ci_low * scale, s.ci_high * scale
            ax.errorbar(
                [mean], [y], xerr=[[mean - low], [high - mean]], fmt="o", color="C3", capsize=3
            )
        else:
            ax.plot([mean], [y], "o", color="0.4")
    ax.axvline(0.0, color="k", linewidth=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label for label, _ in reversed(rows)], fontsize=7)
    ax.set_xlabel("paired effect, % of control mean" if percent else f"paired effect ({shown})")
    ax.set_title(f"{title}\n(mean treatment − control with its paired-t 95% CI)", fontsize=9)
    return _save(fig, path)


def history(panels: list[WallPanel], arms: list[str], title: str, path: Path) -> Path:
    """One panel per compile-wall endpoint: each arm's mean with its interval."""
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.2 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        shown, div = display_unit(panel.unit)
        for x, point in enumerate(panel.points):
            if point is None:
                continue
            mean = point[0] / div
            low, high = (v / div if v is not None else None for v in point[1:])
            if low is not None and high is not None:
                ax.errorbar(
                    [x], [mean], yerr=[[mean - low], [high - mean]], fmt="o", color="C0", capsize=4
                )
            else:
                ax.plot([x], [mean], "o", color="C0")
        ax.set_xticks(range(len(arms)))
        ax.set_xticklabels(arms, rotation=30, ha="right", fontsize=7)
        ax.set_title(panel.label, fontsize=9)
        ax.set_ylabel(shown, fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(f"{title}\n(mean per arm with its 95% t interval over the blocks)", fontsize=9)
    return _save(fig, path)
