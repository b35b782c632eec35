"""Compile campaigns over releases: the compile wall of each arm with its interval (per cell,
i.e. per model and ladder, one panel per rung and one for all), and the passes that moved most
between consecutive arms (the spec lists releases oldest first), each pair compared by `ab
compile --pass-profile`'s own per-pass analysis (compile_kind/passes.py) on that cell's blocks
and judged by its rule (Holm over the passes of the pair, noise floor)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

from compile_ahead.profiling.campaigns.persistence.cells import CellRun
from compile_ahead.profiling.trials.compile_kind import passes as pass_ab
from compile_ahead.profiling.trials.compile_kind.exported_rungs import MeasureOptions
from compile_ahead.profiling.trials.compile_kind.passes import PassAnalysis, RankedPass
from compile_ahead.profiling.trials.design import Plan
from compile_ahead.profiling.trials.experiment import ExperimentAnalysis
from compile_ahead.profiling.trials.power import NOT_TESTED
from compile_ahead.profiling.trials.report import fmt_effect, fmt_number, table_row
from compile_ahead.profiling.trials.stats import paired_t_ci

TOP_PASSES = 10

# mean, and its 95% t interval (None where fewer than two values)
MeanInterval = tuple[float, float | None, float | None]


def is_compile_wall(key: str) -> bool:
    """The compile wall of one rung (compile_C) or of all (compile_total)."""
    return key == "compile_total" or re.fullmatch(r"compile_\d+", key) is not None


def mean_interval(values: list[float | None]) -> MeanInterval | None:
    """Mean and 95% t interval of the present values: the paired-t interval of the values
    against zero is the one-sample interval of their mean."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    ci = paired_t_ci([0.0] * len(present), present)
    mean = sum(present) / len(present)
    return (mean, None, None) if ci is None else (mean, ci[0], ci[1])


@dataclass(frozen=True)
class WallPanel:
    """One compile-wall endpoint of a cell: each arm's mean with its interval."""

    key: str
    label: str
    unit: str
    points: tuple[MeanInterval | None, ...]  # per arm, in the experiment's arm order


def wall_panels(done: ExperimentAnalysis) -> list[WallPanel]:
    """The cell's compile-wall endpoints (per rung and in all), from its analysis."""
    a = done.analysis
    return [
        WallPanel(ep.key, ep.label, ep.unit,
                  tuple(mean_interval(a.values[ep.key][arm]) for arm in a.plan.arms))
        for ep in a.endpoints
        if is_compile_wall(ep.key)
    ]  # fmt: skip


@dataclass(frozen=True)
class PassMove:
    """Two consecutive arms of a cell compared pass by pass."""

    before: str
    after: str
    passes: PassAnalysis  # the pair's own per-pass analysis (before is its control)

    def top(self, count: int = TOP_PASSES) -> list[RankedPass]:
        """The passes that moved most, in pass_ab's ranking."""
        return self.passes.comparisons[0].ranked[:count] if self.passes.comparisons else []

    def status(self, ranked: RankedPass) -> str:
        """The pass's judgement by the rule (power.py)."""
        judgement = self.passes.judgement(ranked.key, self.after)
        return NOT_TESTED if judgement is None else judgement.status

    def flagged(self, ranked: RankedPass) -> bool:
        judgement = self.passes.judgement(ranked.key, self.after)
        return judgement is not None and judgement.flagged


def _pair_plan(run: CellRun, before: str, after: str) -> Plan:
    pairs = int(run.experiment["pairs"]) if run.experiment else 0
    return Plan((before, after), tuple((0, 1) for _ in range(pairs)), 0)


def pass_moves(run: CellRun) -> list[PassMove]:
    """Per consecutive pair of the cell's arms, its per-pass analysis (the experiment's own
    statistic of a trial's repeated compiles)."""
    exp = run.experiment or {}
    arms = [a["name"] for a in exp.get("arms", [])]
    statistic = MeasureOptions.from_experiment(exp).statistic
    moves = []
    for before, after in pairwise(arms):
        records = [r for r in run.records if r.arm in (before, after)]
        plan = _pair_plan(run, before, after)
        moves.append(PassMove(before, after, pass_ab.analyse_passes(records, plan, statistic)))
    return moves


def moves_markdown(cell: str, moves: list[PassMove], labels: dict[str, str]) -> str:
    """Markdown: per consecutive pair of arms, the passes that moved most."""
    lines = [f"#### Passes that moved most between consecutive arms: {cell}", ""]
    for move in moves:
        before, after = move.before, move.after
        lines += [f"{labels.get(before, before)} → {labels.get(after, after)}:", ""]
        ranked = move.top()
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
                move.status(r),
            ]
            lines.append(table_row(cells))
        lines.append("")
    return "\n".join(lines)
