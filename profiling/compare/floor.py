"""The noise floor of a paired comparison, and the rule that flags a change.

Floor: the minimal detectable effect at the comparison's pair count n (two-sided 95% level,
80% power) from the spread of paired differences,

    floor = (t(0.975, n-1) + t(0.80, n-1)) * sd / sqrt(n)

in the endpoint's own units. ``sd`` is the standard deviation of the paired differences of an
A/A comparison (the control against itself in the same design: pure noise) when the
experiment has one, else of the comparison's own differences (noise plus any spread of the
effect itself). Where many endpoints of one kind are compared at once (every pass of a
compile), a few pairs give some of them a spread far below their real noise by chance; their
``sd`` is then held at least at the typical relative spread of all of them (the median over
the passes of sd / control mean) times their own control mean.

Rule: a change is flagged (a regression or an improvement) only when its paired-t 95% interval
excludes 0 and its mean moved at least the floor. A change below the floor is never flagged,
whatever its p; a comparison whose floor cannot be estimated (fewer than 2 pairs) has no
interval either, so nothing is flagged there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy import stats as scipy_stats

from compile_ahead.profiling.trials.stats import Better, PairedSummary

LEVEL = 0.95
POWER = 0.80


@dataclass(frozen=True)
class NoiseFloor:
    value: float | None  # in the endpoint's units; None: not estimable (< 2 pairs)
    source: str  # where the spread came from, e.g. "A/A arm A2" or "own paired differences"
    sd: float | None  # standard deviation of the differences it rests on
    n: int  # the pair count the floor is stated for


def noise_floor(
    noise_diffs: Sequence[float], n_pairs: int, source: str, min_sd: float = 0.0
) -> NoiseFloor:
    """The smallest mean change that ``n_pairs`` pairs detect with 80% power at the 95% level,
    given paired differences ``noise_diffs`` that show the noise (their spread taken as at
    least ``min_sd``)."""
    d = np.asarray([x for x in noise_diffs if math.isfinite(x)], dtype=np.float64)
    if d.size < 2 or n_pairs < 2:
        return NoiseFloor(None, source, None, n_pairs)
    sd = max(float(d.std(ddof=1)), min_sd)
    df = n_pairs - 1
    factor = float(scipy_stats.t.ppf(0.5 + LEVEL / 2, df) + scipy_stats.t.ppf(POWER, df))
    return NoiseFloor(factor * sd / math.sqrt(n_pairs), source, sd, n_pairs)


def typical_relative_sd(samples: Sequence[tuple[Sequence[float], float]]) -> float:
    """The median, over endpoints of one kind, of the spread of their paired differences
    relative to their control mean; ``samples`` holds (differences, control mean) of each.
    0 when none has two differences and a non-zero mean."""
    relative = [
        float(np.std(d, ddof=1)) / abs(mean) for d, mean in samples if len(d) >= 2 and mean != 0
    ]
    return float(np.median(relative)) if relative else 0.0


class Status(StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    CHANGED = "changed"  # flagged, on an endpoint with no better direction
    BELOW_FLOOR = "below the noise floor"  # interval excludes 0, the change is smaller
    NO_EFFECT = "no detectable effect"  # interval includes 0
    NOT_TESTED = "not tested"  # no interval: fewer than 2 pairs

    @property
    def flagged(self) -> bool:
        return self in (Status.REGRESSION, Status.IMPROVEMENT, Status.CHANGED)

    @property
    def css(self) -> str:
        """The page's class for it (the colour of a flagged change), empty when not flagged."""
        return self.name.lower() if self.flagged else ""


def judge(summary: PairedSummary | None, floor: NoiseFloor) -> Status:
    """What the page says of a comparison under the rule above."""
    if summary is None or summary.ci_low is None or summary.ci_high is None:
        return Status.NOT_TESTED
    if not summary.ci_excludes_zero:
        return Status.NO_EFFECT
    if floor.value is None or abs(summary.mean_diff) < floor.value:
        return Status.BELOW_FLOOR
    return direction(summary.mean_diff, summary.better)


def direction(mean_diff: float, better: Better) -> Status:
    if better is None:
        return Status.CHANGED
    worse = mean_diff > 0 if better == "lower" else mean_diff < 0
    return Status.REGRESSION if worse else Status.IMPROVEMENT
