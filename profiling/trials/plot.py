"""PNG of the paired differences: one panel per endpoint, per treatment arm the per-block
differences as dots, the mean as a bar end and the paired-t CI as an error bar, zero marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from compile_ahead.output.atomic import write_figure_atomic
from compile_ahead.profiling.trials.analysis import Analysis
from compile_ahead.profiling.trials.report import display_unit


def plot_differences(analysis: Analysis, path: Path, title: str, max_cols: int = 3) -> Path:
    endpoints = [
        ep
        for ep in analysis.endpoints
        if any(s is not None for s in analysis.comparisons[ep.key].values())
    ]
    n = max(len(endpoints), 1)
    cols = min(max_cols, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    treatments = analysis.treatments
    for ax, ep in zip(axes.flat, endpoints, strict=False):
        shown, div = display_unit(ep.unit)
        for i, arm in enumerate(treatments):
            s = analysis.comparisons[ep.key][arm]
            if s is None:
                continue
            diffs = [d / div for d in s.diffs]
            offsets = [(j - (len(diffs) - 1) / 2) * 0.04 for j in range(len(diffs))]
            ax.scatter([i + o for o in offsets], diffs, s=14, color="0.35", zorder=3)
            if s.ci_low is not None and s.ci_high is not None:
                mean = s.mean_diff / div
                err = [[mean - s.ci_low / div], [s.ci_high / div - mean]]
                ax.errorbar([i + 0.25], [mean], yerr=err, fmt="o", color="C3", capsize=4)
            else:
                ax.plot([i + 0.25], [s.mean_diff / div], "o", color="C3")
        ax.axhline(0.0, color="k", linewidth=0.8)
        ax.set_xticks(range(len(treatments)))
        ax.set_xticklabels([f"{t} − {analysis.control}" for t in treatments])
        ax.set_xlim(-0.6, len(treatments) - 0.4)
        ax.set_title(ep.label, fontsize=9)
        ax.set_ylabel(f"difference ({shown})", fontsize=8)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(endpoints) :]:
        ax.axis("off")
    note = "dots: per-block differences; red: mean with paired-t 95% CI"
    fig.suptitle(f"{title}\n({note})", fontsize=9)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.5 / (3.2 * rows)))  # room for the title
    write_figure_atomic(fig, path)
    plt.close(fig)
    return path
