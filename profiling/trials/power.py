"""What a comparison could have seen, and which changes are flagged.

Per endpoint and treatment arm (against the control):
- detected: the paired-t 95% interval of the log-ratio excludes 0 (what the minimal detectable
  effect, stats.minimal_detectable_effect, refers to);
- noise floor: the half-width of that interval as a percent change, from an A/A arm of the same
  experiment when it has one (the control run again as another arm, `ab compile --aa`), else
  from the comparison's own paired differences;
- flagged: detected, still significant after Holm's correction over every endpoint of the table
  (so an A/A run flags anything at most 5% of the time, however many endpoints it has), and
  larger than the noise floor. A change smaller than the floor is never flagged, whatever its p.

The per-pass table of `ab compile --pass-profile` is such a table: each pass is an endpoint,
and Holm's correction runs over every pass seen in both arms of a comparison. Holm rather than
Benjamini-Hochberg: it bounds the chance of any false flag (what an A/A run must show) under
any dependence between the tests, and the passes of one trial are dependent (a slow trial
slows all of them); the same rule then holds for the endpoint and the pass tables.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from compile_ahead.profiling.trials.stats import MDE_ALPHA, PairedSummary

FLAG_RULE = (
    "flagged: the 95% interval of the log-ratio excludes 0, the paired-t p on the logs stays "
    f"<= {MDE_ALPHA:g} after Holm's correction over the table's endpoints, and the change "
    "exceeds the noise floor"
)


# What a judgement says when nothing is flagged, in the rule's order.
NOT_TESTED = "not tested"  # no log-ratio interval: under 2 pairs, or a value that is not > 0
NO_EFFECT = "no detectable effect"  # the interval includes 0
NOT_SIGNIFICANT = "not significant after Holm"  # its p does not survive the correction
BELOW_FLOOR = "below the noise floor"  # significant, but no larger than the floor
FLAGGED_DIRECTIONS = ("regression", "improvement", "higher", "lower")


@dataclass(frozen=True)
class Judgement:
    detected: bool  # the log-ratio interval excludes 0
    holm_p: float | None  # paired-t p on the logs, Holm-adjusted over the table's endpoints
    floor_pct: float | None  # the noise floor as a percent change
    floor_source: str  # "A/A arm NAME" or "own paired differences"
    flagged: bool
    direction: str  # "regression", "improvement", "higher", "lower" or "" when not flagged
    tested: bool = True  # the comparison has a log-ratio interval

    @property
    def status(self) -> str:
        """The direction when flagged, else the first part of the rule it fails."""
        if self.flagged:
            return self.direction
        if not self.tested:
            return NOT_TESTED
        if not self.detected:
            return NO_EFFECT
        if self.holm_p is None or self.holm_p > MDE_ALPHA:
            return NOT_SIGNIFICANT
        return BELOW_FLOOR

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status}


def half_width_log(summary: PairedSummary) -> float | None:
    """The half-width of the log-ratio's 95% interval (on the log scale)."""
    if summary.ratio_ci_low is None or summary.ratio_ci_high is None:
        return None
    return (math.log(summary.ratio_ci_high) - math.log(summary.ratio_ci_low)) / 2.0


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (monotone, capped at 1)."""
    order = sorted(pvalues, key=lambda k: (pvalues[k], k))
    m = len(order)
    adjusted: dict[str, float] = {}
    running = 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (m - i) * pvalues[key]))
        adjusted[key] = running
    return adjusted


def _direction(summary: PairedSummary) -> str:
    effect = summary.effect_pct or 0.0
    if summary.better is None:
        return "higher" if effect > 0 else "lower"
    worse = effect > 0 if summary.better == "lower" else effect < 0
    return "regression" if worse else "improvement"


def judge(
    comparisons: Mapping[str, Mapping[str, PairedSummary | None]],
    aa_arms: tuple[str, ...] = (),
) -> dict[str, dict[str, Judgement | None]]:
    """endpoint key -> treatment -> Judgement (None where there is no comparison)."""
    treatments = {t for per in comparisons.values() for t in per}
    out: dict[str, dict[str, Judgement | None]] = {k: {} for k in comparisons}
    for treatment in sorted(treatments):
        family = {
            key: per[treatment].log_t_p  # type: ignore[union-attr]
            for key, per in comparisons.items()
            if per.get(treatment) is not None and per[treatment].log_t_p is not None  # type: ignore[union-attr]
        }
        adjusted = holm(family)  # type: ignore[arg-type]
        for key, per in comparisons.items():
            summary = per.get(treatment)
            if summary is None:
                out[key][treatment] = None
                continue
            out[key][treatment] = _judgement(summary, adjusted.get(key), per, aa_arms, treatment)
    return out


def _judgement(
    summary: PairedSummary,
    holm_p: float | None,
    per_treatment: Mapping[str, PairedSummary | None],
    aa_arms: tuple[str, ...],
    treatment: str,
) -> Judgement:
    source, floor = "own paired differences", half_width_log(summary)
    for aa in aa_arms:
        reference = per_treatment.get(aa)
        if aa != treatment and reference is not None and half_width_log(reference) is not None:
            source, floor = f"A/A arm {aa}", half_width_log(reference)
            break
    detected = summary.ratio_ci_excludes_one
    ratio = summary.geomean_ratio
    flagged = (
        detected
        and holm_p is not None
        and holm_p <= MDE_ALPHA
        and ratio is not None
        and floor is not None
        and abs(math.log(ratio)) > floor
    )
    floor_pct = None if floor is None else (math.exp(floor) - 1.0) * 100.0
    return Judgement(
        detected,
        holm_p,
        floor_pct,
        source,
        flagged,
        _direction(summary) if flagged else "",
        summary.ratio_ci_low is not None and summary.ratio_ci_high is not None,
    )
