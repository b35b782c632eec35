"""Per-pass endpoints of `ab compile --pass-profile`: every transformation pass, keyed by its
manager and name, compared on its self time (nested managers left out) by the same paired
statistics as the compile wall, ranked by how much it moved, as a table, JSON and a plot.

Each pass is judged by the endpoints' rule (power.py): its log-ratio interval excludes 0, its
p survives Holm's correction over every pass of the comparison, and it moved more than its
noise floor (its A/A comparison's half-width where the experiment has an A/A arm).

Ranking (per treatment arm against the control): passes whose paired-t interval excludes 0
first, then by |median paired difference|, largest first, both directions together; name
breaks ties. A pass absent from a trial that profiled passes took no time there (0 ms). A pass
seen in only one arm of a comparison has no paired effect: it is listed as one-arm-only, with
its mean self time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compile_ahead.output.atomic import write_figure_atomic
from compile_ahead.profiling.trials.analysis import (
    Analysis,
    Endpoint,
    Getter,
    analyse,
    block_results,
)
from compile_ahead.profiling.trials.compile_kind.trial_values import (
    TIME_STATISTIC_DEFAULT,
    pass_self_times,
)
from compile_ahead.profiling.trials.design import Plan
from compile_ahead.profiling.trials.power import FLAG_RULE, Judgement, judge
from compile_ahead.profiling.trials.report import (
    MINUS,
    fmt_effect,
    fmt_judgement,
    fmt_number,
    fmt_pct,
    table_row,
)
from compile_ahead.profiling.trials.runner import TrialRecord
from compile_ahead.profiling.trials.stats import PairedSummary

RANKING = (
    "passes whose paired-t 95% CI excludes 0 first, then by |median paired difference| "
    "(largest first, both directions)"
)
PASS_FLAG_RULE = f"{FLAG_RULE} (for passes: Holm over every pass in both arms)"
TABLE_ROWS = 30  # rows in the markdown table per comparison; the JSON holds every pass
PLOT_ROWS = 20


@dataclass(frozen=True, order=True)
class PassKey:
    manager: str
    name: str

    @property
    def key(self) -> str:
        return f"pass;{self.manager};{self.name}"  # ';' never occurs in a record field


@dataclass(frozen=True)
class RankedPass:
    key: PassKey
    summary: PairedSummary


@dataclass
class PassComparison:
    treatment: str
    ranked: list[RankedPass]  # passes seen in both arms, in ranking order
    # arm -> passes seen in that arm only (of the control and this treatment)
    one_arm_only: dict[str, list[PassKey]] = field(default_factory=dict)


@dataclass
class PassAnalysis:
    analysis: Analysis  # one endpoint per pass, values in ms
    passes: dict[str, PassKey]  # endpoint key -> pass
    comparisons: list[PassComparison]

    def judgement(self, key: PassKey, treatment: str) -> Judgement | None:
        """The pass's judgement against the control (None: not in both arms)."""
        return self.analysis.judgements.get(key.key, {}).get(treatment)

    def flagged(self, comp: PassComparison) -> list[RankedPass]:
        """The comparison's flagged passes, in ranking order."""
        flags = {r.key: self.judgement(r.key, comp.treatment) for r in comp.ranked}
        return [r for r in comp.ranked if (j := flags[r.key]) is not None and j.flagged]

    def mean_ms(self, key: PassKey, arm: str) -> float | None:
        present = [v for v in self.analysis.values[key.key][arm] if v is not None]
        return sum(present) / len(present) if present else None


class SelfTimes:
    """Per-pass self times of each trial result by the declared statistic, computed once per
    result (every pass's getter asks for the same trial)."""

    def __init__(self, statistic: str) -> None:
        self.statistic = statistic
        self._memo: dict[int, tuple[dict, dict | None]] = {}

    def of(self, result: dict) -> dict[str, dict[str, float]] | None:
        held = self._memo.get(id(result))
        if held is None or held[0] is not result:
            held = (result, pass_self_times(result, self.statistic))
            self._memo[id(result)] = held
        return held[1]

    def getter(self, key: PassKey) -> Getter:
        def get(result: dict) -> float | None:
            per_manager = self.of(result)
            if per_manager is None:  # this trial did not profile passes
                return None
            seconds = per_manager.get(key.manager, {}).get(key.name, 0.0)
            return float(seconds) * 1e3

        return get


def seen_passes(
    records: Sequence[TrialRecord], plan: Plan, times: SelfTimes | None = None
) -> dict[str, set[PassKey]]:
    """arm -> every pass that ran in at least one of its measured trials."""
    times = times or SelfTimes(TIME_STATISTIC_DEFAULT)
    seen: dict[str, set[PassKey]] = {arm: set() for arm in plan.arms}
    for arm, results in block_results(records, plan).items():
        for result in results:
            per_manager = None if result is None else times.of(result)
            for manager, passes in (per_manager or {}).items():
                seen[arm].update(PassKey(manager, name) for name in passes)
    return seen


def rank_order(summary: PairedSummary) -> tuple[int, float]:
    """Sort key of the documented ranking (without the name tie-break)."""
    return (0 if summary.ci_excludes_zero else 1, -abs(summary.median_diff))


def analyse_passes(
    records: Sequence[TrialRecord],
    plan: Plan,
    statistic: str = TIME_STATISTIC_DEFAULT,
    aa_arms: tuple[str, ...] = (),
) -> PassAnalysis:
    times = SelfTimes(statistic)
    seen = seen_passes(records, plan, times)
    every = sorted(set().union(*seen.values()))
    endpoints = [
        Endpoint(k.key, f"{k.name} [{k.manager}]", "ms", "lower", times.getter(k)) for k in every
    ]
    analysis = analyse(records, plan, endpoints, aa_arms)
    control = plan.arms[0]
    comparisons = []
    for treatment in plan.arms[1:]:
        ranked: list[RankedPass] = []
        only: dict[str, list[PassKey]] = {control: [], treatment: []}
        for key in every:
            in_control, in_treatment = key in seen[control], key in seen[treatment]
            summary = analysis.comparisons[key.key][treatment]
            if in_control and in_treatment and summary is not None:
                ranked.append(RankedPass(key, summary))
                continue
            analysis.comparisons[key.key][treatment] = None  # no paired effect to speak of
            if in_control != in_treatment:
                only[control if in_control else treatment].append(key)
        ranked.sort(key=lambda r: (*rank_order(r.summary), r.key))
        comparisons.append(PassComparison(treatment, ranked, only))
    analysis.judgements = judge(analysis.comparisons, aa_arms)  # passes in both arms only
    return PassAnalysis(analysis, {k.key: k for k in every}, comparisons)


def _ms(value: float | None) -> str:
    return "\u2014" if value is None else f"{fmt_number(value)} ms"


def markdown(passes: PassAnalysis, arm_labels: dict[str, str] | None = None) -> str:
    """The per-pass section of the compile report: per treatment, the passes that moved most
    (a table of at most TABLE_ROWS rows), every flagged pass, then the passes seen in one arm
    only."""
    labels = arm_labels or {}
    lines = [f"### Transformation passes, self time per pass ({len(passes.passes)} seen)", ""]
    if not passes.passes:
        return "\n".join([*lines, "No per-pass self times in these trial records.", ""])
    lines.append(f"- ranking: {RANKING}")
    lines.append(
        "- self time: a pass's duration minus the nested pass managers it ran, summed over its "
        "runs and the rungs of a trial; effect as in the table above (ms)"
    )
    lines.append(f"- {PASS_FLAG_RULE}")
    for comp in passes.comparisons:
        lines += _comparison_lines(passes, comp, labels)
    return "\n".join(lines) + "\n"


def _comparison_lines(
    passes: PassAnalysis, comp: PassComparison, labels: dict[str, str]
) -> list[str]:
    control, t = passes.analysis.control, comp.treatment
    moved = sum(1 for r in comp.ranked if r.summary.ci_excludes_zero)
    flagged = passes.flagged(comp)
    lines = [
        "",
        f"#### {t} − {control}: {len(comp.ranked)} passes in both arms, {moved} with a CI "
        f"that excludes 0, {len(flagged)} flagged"
        + (f"; the first {TABLE_ROWS}" if len(comp.ranked) > TABLE_ROWS else ""),
        "",
    ]
    header = ["#", "Pass", "Manager", labels.get(control, control), labels.get(t, t)]
    header += [f"Median {t} − {control}", "Direction", f"Paired effect ({t} − {control})"]
    lines.append(table_row(header))
    lines.append(table_row(["---"] * len(header)))
    for rank, r in enumerate(comp.ranked[:TABLE_ROWS], 1):
        s = r.summary
        direction = "slower" if s.median_diff > 0 else "faster" if s.median_diff < 0 else "="
        median = ("+" if s.median_diff > 0 else "") + _ms(s.median_diff)
        effect = fmt_effect(s, "ms") + fmt_judgement(passes.judgement(r.key, t))
        lines.append(
            table_row(
                [str(rank), r.key.name, r.key.manager, _ms(passes.mean_ms(r.key, control)),
                 _ms(passes.mean_ms(r.key, t)), median, direction, effect]
            )
        )  # fmt: skip
    lines += ["", f"Flagged passes ({len(flagged)} of {len(comp.ranked)}):" if flagged
              else f"No pass flagged (of {len(comp.ranked)})."]  # fmt: skip
    for r in flagged:
        j = passes.judgement(r.key, t)
        assert j is not None
        lines.append(
            f"- {r.key.name} [{r.key.manager}]: {fmt_pct(r.summary.effect_pct)}, {j.direction} "
            f"(Holm p={j.holm_p:.3g}, noise floor {fmt_pct(j.floor_pct, signed=False)} from "
            f"{j.floor_source})"
        )
    for arm, keys in comp.one_arm_only.items():
        if not keys:
            continue
        lines += ["", f"Passes in {arm} only ({len(keys)}, mean self time there):"]
        lines += [
            f"- {k.name} [{k.manager}]: {_ms(passes.mean_ms(k, arm))}"
            for k in sorted(keys, key=lambda k: -(passes.mean_ms(k, arm) or 0.0))
        ]
    return lines


def to_json(passes: PassAnalysis) -> dict:
    values = passes.analysis.values
    return {
        "ranking": RANKING,
        "flag_rule": PASS_FLAG_RULE,
        "unit": "ms",
        "comparisons": {
            comp.treatment: {
                "ranked": [
                    {
                        "pass": r.key.name,
                        "manager": r.key.manager,
                        "values": values[r.key.key],
                        "comparison": r.summary.to_dict(),
                        "judgement": _judgement_json(passes.judgement(r.key, comp.treatment)),
                    }
                    for r in comp.ranked
                ],
                "one_arm_only": {
                    arm: [
                        {"pass": k.name, "manager": k.manager, "mean_ms": passes.mean_ms(k, arm)}
                        for k in keys
                    ]
                    for arm, keys in comp.one_arm_only.items()
                },
            }
            for comp in passes.comparisons
        },
    }


def _judgement_json(j: Judgement | None) -> dict | None:
    return None if j is None else j.to_dict()


def plot_passes(passes: PassAnalysis, path: Path, title: str, rows: int = PLOT_ROWS) -> Path:
    """Per treatment, the top-ranked passes as rows: per-block differences as dots, the median
    as a diamond, the mean with its paired-t CI as an error bar, zero marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    comps = passes.comparisons
    height = max(2.5, 0.32 * min(rows, max((len(c.ranked) for c in comps), default=1)) + 1.4)
    fig, axes = plt.subplots(1, len(comps), figsize=(7.5 * len(comps), height), squeeze=False)
    control = passes.analysis.control
    for ax, comp in zip(axes.flat, comps, strict=True):
        top = comp.ranked[:rows]
        for y, r in enumerate(top):
            s = r.summary
            ax.scatter(s.diffs, [y] * len(s.diffs), s=12, color="0.45", zorder=3)
            if s.ci_low is not None and s.ci_high is not None:
                err = [[s.mean_diff - s.ci_low], [s.ci_high - s.mean_diff]]
                color = "C3" if s.ci_excludes_zero else "C0"
                ax.errorbar([s.mean_diff], [y], xerr=err, fmt="o", ms=4, color=color, capsize=3)
            ax.plot([s.median_diff], [y], "D", ms=5, color="k", zorder=4)
        ax.axvline(0.0, color="k", linewidth=0.8)
        # the axis spans the measured differences; wider intervals (few pairs) run off its edge
        spread = [0.0, *(d for r in top for d in r.summary.diffs)]
        pad = 0.08 * (max(spread) - min(spread) or 1.0)
        ax.set_xlim(min(spread) - pad, max(spread) + pad)
        ax.set_yticks(range(len(top)))
        ax.set_yticklabels([_short(f"{r.key.name} [{r.key.manager}]") for r in top], fontsize=7)
        ax.invert_yaxis()  # rank 1 at the top
        ax.set_xlabel(f"self time, {comp.treatment} {MINUS} {control} (ms)", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_title(f"{comp.treatment} {MINUS} {control}: passes that moved most", fontsize=9)
    note = (
        "dots: per-block differences; diamond: median; bar: mean with its paired-t 95% CI "
        "(red: excludes 0; cut at the axis)"
    )
    fig.suptitle(f"{title}\n({note})", fontsize=9)
    fig.tight_layout()
    write_figure_atomic(fig, path)
    plt.close(fig)
    return path


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
