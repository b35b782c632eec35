"""Compile campaigns over releases: the compile wall of each arm with its interval (a history
plot per cell, i.e. per model and ladder), and the passes that moved most between consecutive
arms (the spec lists releases oldest first), each pair compared by `ab compile --pass-profile`'s
own per-pass analysis (pass_ab.py) on that cell's blocks."""

from __future__ import annotations

import re
from itertools import pairwise

from compile_ahead.profiling.campaigns.cells import CellRun
from compile_ahead.profiling.trials import pass_ab
from compile_ahead.profiling.trials.design import Plan
from compile_ahead.profiling.trials.report import fmt_effect, fmt_number, table_row
from compile_ahead.profiling.trials.stats import paired_t_ci

TOP_PASSES = 10


def is_compile_wall(key: str) -> bool:
    """The compile wall of one rung (compile_C) or of all (compile_total)."""
    return key == "compile_total" or re.fullmatch(r"compile_\d+", key) is not None


def mean_interval(values: list[float | None]) -> tuple[float, float | None, float | None] | None:
    """Mean and 95% t interval of the present values: the paired-t interval of the values
    against zero is the one-sample interval of their mean."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    ci = paired_t_ci([0.0] * len(present), present)
    mean = sum(present) / len(present)
    return (mean, None, None) if ci is None else (mean, ci[0], ci[1])


def history_panels(data: dict, labels: dict[str, str]) -> tuple[list[str], list[dict]]:
    """(arm labels, one panel per compile-wall endpoint) from a cell's `ab report` JSON."""
    arms = [a["name"] for a in data["arms"]]
    panels = [
        {
            "label": ep["label"],
            "unit": ep["unit"],
            "points": [mean_interval(ep["values"][arm]) for arm in arms],
        }
        for ep in data["endpoints"]
        if is_compile_wall(ep["key"])
    ]
    return [labels.get(a, a) for a in arms], panels


def _pair_plan(run: CellRun, before: str, after: str) -> Plan:
    pairs = int(run.experiment["pairs"]) if run.experiment else 0
    return Plan((before, after), tuple((0, 1) for _ in range(pairs)), 0)


def pass_moves(run: CellRun, labels: dict[str, str], top: int = TOP_PASSES) -> str:
    """Markdown: per consecutive pair of arms, the passes that moved most (pass_ab's ranking)."""
    arms = [a["name"] for a in (run.experiment or {}).get("arms", [])]
    lines = [f"#### Passes that moved most between consecutive arms: {run.label}", ""]
    for before, after in pairwise(arms):
        records = [r for r in run.records if r.arm in (before, after)]
        passes = pass_ab.analyse_passes(records, _pair_plan(run, before, after))
        ranked = passes.comparisons[0].ranked[:top] if passes.comparisons else []
        lines += [f"{labels.get(before, before)} → {labels.get(after, after)}:", ""]
        if not ranked:
            lines += ["no pass seen in both arms' profiles", ""]
            continue
        lines.append(table_row(["Pass [manager]", before, after, "Paired effect", "Verdict"]))
        lines.append(table_row(["---"] * 5))
        for r in ranked:
            cells = [
                f"{r.key.name} [{r.key.manager}]",
                f"{fmt_number(r.summary.control_mean)} ms",
                f"{fmt_number(r.summary.treatment_mean)} ms",
                fmt_effect(r.summary, "ms"),
                r.summary.verdict(),
            ]
            lines.append(table_row(cells))
        lines.append("")
    return "\n".join(lines)
