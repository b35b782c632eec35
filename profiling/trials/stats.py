"""Paired statistics for A/B trials, in the seed's terms.

Differences are treatment minus control, per block. Reported: mean (and median) effect in units
and as a percent of the control mean, the paired-t 95% confidence interval (scipy's t quantile),
the exact two-sided sign-flip (randomisation) p-value from all 2^n sign vectors, the wins
count, and the geometric mean of the per-pair ratios. With n pairs the smallest possible
sign-flip p is 2 / 2^n (0.0625 for five pairs); the verdict text never claims more than the
test can support.

Power: the noise of a comparison is the SD of its paired log-ratios log(treatment / control);
its minimal detectable effect (MDE) is the smallest true ratio the paired t-test on those logs
detects (two-sided 95%) with 80% power at the comparison's pair count, solved exactly with
the noncentral t distribution (scipy.stats.nct) and stated as a percent change.

scipy is imported inside the functions that compute with it: importing scipy.stats takes
about 2 s, and the command-line parser and every trial's process import this module for its
types and constants.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from compile_ahead.errors import CompileAheadError

Better = Literal["lower", "higher"] | None
# Paired values: a list of floats, or an array of them (the summary passes its arrays on).
Values = Sequence[float] | np.ndarray

# Exact enumeration up to 2^20 sign vectors; beyond that scipy's permutation_test draws a seeded
# Monte Carlo sample. The enumeration is our own because scipy's exact permutation_test gives
# the same p values (tests hold them equal) but is slower: measured (scipy 1.17, numpy 2.4, 2
# cores) 0.008 vs 0.13 ms at n <= 5, 0.02 vs 1.4 ms at n = 10, 5 vs 180 ms at n = 16, 0.13 vs
# 4.6 s at n = 20, and a per-pass A/B computes it for hundreds of endpoints; scipy also refuses
# a single pair, where the answer is p = 1.
EXACT_SIGN_FLIP_MAX_N = 20
MONTE_CARLO_DRAWS = 1 << 16


@lru_cache(maxsize=256)
def _t_quantile(q: float, df: int) -> float:
    from scipy import stats as scipy_stats  # slow to import: here, not at module top

    return float(scipy_stats.t.ppf(q, df))


def paired_t_ci(
    control: Values, treatment: Values, level: float = 0.95
) -> tuple[float, float] | None:
    """The paired-t interval of mean(treatment - control), the interval of scipy's ttest_rel
    (tests hold them equal) from scipy's t quantile: ttest_rel itself costs 0.2 ms a call, and
    a per-pass A/B asks for two intervals per pass. None with fewer than 2 pairs."""
    d = np.asarray(treatment, dtype=np.float64) - np.asarray(control, dtype=np.float64)
    n = d.size
    if n < 2:
        return None
    half = _t_quantile(0.5 + level / 2.0, n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
    mean = float(d.mean())
    return mean - half, mean + half


def _sign_matrix(n: int) -> np.ndarray:
    """All 2^n sign vectors as rows of +-1."""
    bits = (np.arange(2**n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)) & 1
    return 1 - 2 * bits.astype(np.int8)


def sign_flip_p(diffs: Sequence[float], *, max_exact: int = EXACT_SIGN_FLIP_MAX_N) -> float:
    """Two-sided p of the paired randomisation test: the share of sign vectors s whose
    |sum(s * d)| is at least the observed |sum(d)|. Exact enumeration up to ``max_exact`` pairs."""
    d = np.asarray(diffs, dtype=np.float64)
    n = d.size
    if n == 0:
        return 1.0
    if not np.all(np.isfinite(d)):
        raise ValueError("sign-flip test of differences that are not finite")
    scale = float(np.abs(d).max())
    if scale > 0:  # the test is scale-free: sums of huge differences must not overflow
        d = d / scale
    observed = abs(float(d.sum()))
    tol = 1e-9 * max(float(np.abs(d).sum()), 1e-300)
    if n <= max_exact:
        sums = np.abs(_sign_matrix(n) @ d)
        p = float(np.count_nonzero(sums >= observed - tol)) / float(2**n)
        return max(p, min_sign_flip_p(n))  # the observed signs and their flip always count
    # Monte Carlo estimate ((hits + 1) / (draws + 1), never zero), seeded for repeatability
    from scipy import stats as scipy_stats  # slow to import: here, not at module top

    result = scipy_stats.permutation_test(
        (d,),
        np.sum,
        vectorized=True,
        permutation_type="samples",  # one sample: sign flips
        alternative="two-sided",
        n_resamples=MONTE_CARLO_DRAWS,
        rng=np.random.default_rng(0),
    )
    return float(result.pvalue)


MDE_ALPHA = 0.05
MDE_POWER = 0.80


def paired_t_power(noncentrality: float, n: int, alpha: float = MDE_ALPHA) -> float:
    """Power of the two-sided one-sample (paired) t-test with n pairs at the given
    noncentrality (true mean / (sd / sqrt(n)))."""
    from scipy import stats as scipy_stats  # slow to import: here, not at module top

    df = n - 1
    crit = _t_quantile(1.0 - alpha / 2.0, df)
    nct = scipy_stats.nct(df, noncentrality)
    lower = float(nct.cdf(-crit))
    if not math.isfinite(lower):  # scipy's nct underflows to nan far out in the lower tail
        lower = 0.0
    return float(nct.sf(crit)) + lower


@lru_cache(maxsize=256)
def mde_noncentrality(n: int, alpha: float = MDE_ALPHA, power: float = MDE_POWER) -> float:
    """The noncentrality at which the paired t-test with n pairs has the given power."""
    from scipy.optimize import brentq

    if n < 2:
        raise CompileAheadError(f"a minimal detectable effect needs 2 or more pairs, got {n}")
    guess = mde_noncentrality_approx(n, alpha, power)
    high = 2.0 * guess + 10.0
    while paired_t_power(high, n, alpha) < power:
        high *= 2.0
    return float(brentq(lambda nc: paired_t_power(nc, n, alpha) - power, 0.0, high, xtol=1e-10))


def mde_noncentrality_approx(n: int, alpha: float = MDE_ALPHA, power: float = MDE_POWER) -> float:
    """t_(1-alpha/2, n-1) + t_(power, n-1): the usual closed form (it ignores the far tail and
    the noncentral t's skew, so it is slightly low for few pairs)."""
    return _t_quantile(1.0 - alpha / 2.0, n - 1) + _t_quantile(power, n - 1)


def minimal_detectable_effect(
    sd: float, n: int, alpha: float = MDE_ALPHA, power: float = MDE_POWER
) -> float | None:
    """The smallest true mean difference the paired t-test detects with ``power`` given the
    SD of the paired differences and n pairs (None below 2 pairs)."""
    if n < 2 or not math.isfinite(sd):
        return None
    return mde_noncentrality(n, alpha, power) * sd / math.sqrt(n)


def log_ratios(control: Values, treatment: Values) -> np.ndarray | None:
    """log(treatment / control) per pair; None when a value is not positive."""
    a = np.asarray(control, dtype=np.float64)
    b = np.asarray(treatment, dtype=np.float64)
    if a.size == 0 or np.any(a <= 0) or np.any(b <= 0):
        return None
    return np.log(b) - np.log(a)  # b / a itself may overflow


def paired_t_p(diffs: np.ndarray) -> float | None:
    """Two-sided p of the one-sample t-test of ``diffs`` against 0 (None below 2 pairs; 1 for
    all-zero differences, 0 for identical non-zero ones)."""
    n = diffs.size
    if n < 2:
        return None
    mean, sd = float(diffs.mean()), float(diffs.std(ddof=1))
    if sd == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    from scipy import stats as scipy_stats  # slow to import: here, not at module top

    t = mean / (sd / math.sqrt(n))
    return float(2.0 * scipy_stats.t.sf(abs(t), n - 1))


def min_sign_flip_p(n: int) -> float:
    """The smallest two-sided sign-flip p attainable with n pairs (all signs agree)."""
    return 2.0 / 2**n if n >= 1 else 1.0


def geometric_mean_ratio(control: Values, treatment: Values) -> float | None:
    """exp(mean(log(treatment / control))); None when a value is not positive or the ratio
    is past the float range."""
    logs = log_ratios(control, treatment)
    return None if logs is None else _exp(float(np.mean(logs)))


def _exp(x: float) -> float | None:
    """exp(x), or None past the float range (a ratio of absurd values is no ratio)."""
    try:
        return math.exp(x)
    except OverflowError:
        return None


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


class NonFiniteStatistic(ValueError):
    """Finite values whose statistics are not (their sum or spread is past the float range)."""


@dataclass(frozen=True)
class PairedSummary:
    n: int
    control_mean: float
    treatment_mean: float
    mean_diff: float  # treatment - control
    median_diff: float  # median of the per-pair differences (robust to one disturbed block)
    percent: float | None  # mean_diff / control_mean * 100
    ci_low: float | None
    ci_high: float | None
    ci_level: float
    sign_flip_p: float
    sign_flip_exact: bool
    min_possible_p: float
    wins: int | None  # pairs where the treatment is better (needs a direction)
    ties: int
    geomean_ratio: float | None  # exp(mean(log(treatment / control)))
    # exp of the paired-t CI of log(treatment / control): the interval for the ratio, robust to
    # load drift that scales both arms of a block alike (timings on a shared or virtualized host
    # can swing up to 2x)
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    better: Better
    diffs: tuple[float, ...]
    # the noise: SD of the paired log-ratios (None when a value is not positive or n < 2), the
    # paired-t p on those logs, and the MDE as a percent change (from the logs, or from the
    # raw differences over the control mean when logs are not possible)
    log_sd: float | None = None
    log_t_p: float | None = None
    mde_pct: float | None = None

    @property
    def effect_pct(self) -> float | None:
        """The effect as a percent change: the geometric-mean ratio, else the mean percent."""
        if self.geomean_ratio is not None:
            return (self.geomean_ratio - 1.0) * 100.0
        return self.percent

    def mde_text(self) -> str:
        if self.mde_pct is None:
            return ""
        return (
            f"a change larger than \u00b1{self.mde_pct:.3g}% would have been seen "
            f"({MDE_POWER:.0%} power, {self.n} pairs)"
        )

    @property
    def ci_excludes_zero(self) -> bool:
        return (
            self.ci_low is not None
            and self.ci_high is not None
            and (self.ci_low > 0 or self.ci_high < 0)
        )

    @property
    def ratio_ci_excludes_one(self) -> bool:
        return (
            self.ratio_ci_low is not None
            and self.ratio_ci_high is not None
            and (self.ratio_ci_low > 1 or self.ratio_ci_high < 1)
        )

    def verdict(self, alpha: float = 0.05) -> str:
        """Plain words for what the data support, never stronger than the test allows."""
        if self.n < 2:
            return f"n={self.n}: no interval or test possible"
        p = self.sign_flip_p
        p_text = f"sign-flip p={p:.4g}" + ("" if self.sign_flip_exact else " (Monte Carlo)")
        if not self.ci_excludes_zero:
            if self.ratio_ci_excludes_one:
                return (
                    f"the {self.ci_level:.0%} CI of the difference includes 0, but the ratio CI "
                    f"({self.ratio_ci_low:.3f} to {self.ratio_ci_high:.3f}) excludes 1: a "
                    f"consistent proportional effect under drifting load ({p_text}); not a "
                    "significance claim"
                )
            mde = self.mde_text()
            return f"no detectable effect: the {self.ci_level:.0%} CI includes 0 ({p_text})" + (
                f"; {mde}" if mde else ""
            )
        if p <= alpha:
            return f"effect: CI excludes 0 and {p_text} <= {alpha:g}"
        if self.min_possible_p > alpha:
            return (
                f"CI excludes 0; {p_text} (the minimum possible with {self.n} pairs is "
                f"{self.min_possible_p:.4g}), so no p<{alpha:g} claim: read the effect size"
            )
        return f"CI excludes 0 but {p_text} > {alpha:g}: suggestive, not significant"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["diffs"] = list(self.diffs)
        out["ci_excludes_zero"] = self.ci_excludes_zero
        out["ratio_ci_excludes_one"] = self.ratio_ci_excludes_one
        out["effect_pct"] = self.effect_pct
        out["verdict"] = self.verdict()
        return out


def paired_summary(
    control: Sequence[float],
    treatment: Sequence[float],
    better: Better = "lower",
    level: float = 0.95,
) -> PairedSummary:
    """The paired comparison of finite values. A statistic past the float range (huge values)
    is None where it is optional; NonFiniteStatistic where it is not (a mean, a difference)."""
    a = np.asarray(control, dtype=np.float64)
    b = np.asarray(treatment, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise CompileAheadError(
            f"paired data need equal-length lists, got {a.size} control and {b.size} treatment"
        )
    n = int(a.size)
    if n == 0:
        raise CompileAheadError("no complete pairs to analyse")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise NonFiniteStatistic("values that are not finite numbers")
    with np.errstate(over="ignore", invalid="ignore"):
        return _summary(a, b, better, level)


def _summary(a: np.ndarray, b: np.ndarray, better: Better, level: float) -> PairedSummary:
    n = int(a.size)
    d = b - a
    means = (float(np.sum(a / n)), float(np.sum(b / n)), float(np.sum(d / n)))
    if not all(math.isfinite(x) for x in (*means, float(np.median(d)))) or not np.all(
        np.isfinite(d)
    ):
        raise NonFiniteStatistic("differences past the float range")
    control_mean, treatment_mean, mean_diff = means
    ci = paired_t_ci(a, b, level)
    if ci is not None and not (math.isfinite(ci[0]) and math.isfinite(ci[1])):
        ci = None
    logs = log_ratios(a, b)
    ratio_ci = None if logs is None else paired_t_ci(np.zeros(n), logs, level)
    ratio_low, ratio_high = (None, None) if ratio_ci is None else map(_exp, ratio_ci)
    if ratio_low is None or ratio_high is None:
        ratio_low = ratio_high = None
    wins: int | None = None
    if better == "lower":
        wins = int(np.count_nonzero(d < 0))
    elif better == "higher":
        wins = int(np.count_nonzero(d > 0))
    return PairedSummary(
        n=n,
        control_mean=control_mean,
        treatment_mean=treatment_mean,
        mean_diff=mean_diff,
        median_diff=float(np.median(d)),
        percent=_finite(mean_diff / control_mean * 100.0) if control_mean != 0 else None,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        ci_level=level,
        sign_flip_p=sign_flip_p(d),
        sign_flip_exact=n <= EXACT_SIGN_FLIP_MAX_N,
        min_possible_p=min_sign_flip_p(n),
        wins=wins,
        ties=int(np.count_nonzero(d == 0)),
        geomean_ratio=geometric_mean_ratio(a, b),
        ratio_ci_low=ratio_low,
        ratio_ci_high=ratio_high,
        better=better,
        diffs=tuple(float(x) for x in d),
        **_noise(d, logs, control_mean),
    )


def _noise(d: np.ndarray, logs: np.ndarray | None, control_mean: float) -> dict:
    """log_sd, log_t_p and mde_pct of a comparison (see PairedSummary); a value past the
    float range is left out."""
    if d.size < 2:
        return {}
    if logs is not None:
        sd = float(logs.std(ddof=1))
        if not math.isfinite(sd):
            return {}
        mde = minimal_detectable_effect(sd, d.size)
        mde_ratio = None if mde is None else _exp(mde)
        return {
            "log_sd": sd,
            "log_t_p": _finite(paired_t_p(logs)),
            "mde_pct": None if mde_ratio is None else _finite((mde_ratio - 1.0) * 100.0),
        }
    mde = minimal_detectable_effect(float(d.std(ddof=1)), d.size)
    if mde is None or control_mean == 0:
        return {}
    return {"mde_pct": _finite(mde / abs(control_mean) * 100.0)}
