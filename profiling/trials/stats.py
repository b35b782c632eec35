"""Paired statistics for A/B trials, in the seed's terms.

Differences are treatment minus control, per block. Reported: mean effect in units and as a
percent of the control mean, the paired-t 95% confidence interval, the exact two-sided
sign-flip (randomisation) p-value from all 2^n sign vectors, the wins count, and the geometric
mean of the per-pair ratios. With n pairs the smallest possible sign-flip p is 2 / 2^n (0.0625
for five pairs); the verdict text never claims more than the test can support.
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

EXACT_SIGN_FLIP_MAX_N = 20  # 2^20 sign vectors; beyond that a seeded Monte Carlo estimate


def t_cdf(t: float, df: int) -> float:
    """Student-t CDF for integer degrees of freedom (closed-form series in cos(theta))."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    theta = math.atan2(abs(t), math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    c2 = c * c
    if df % 2 == 1:
        # P(|T| < t) = 2/pi * (theta + sin * (c + 2/3 c^3 + (2*4)/(3*5) c^5 + ...)), df-2 terms
        total, term = 0.0, c
        for j in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * j) / (2 * j + 1)
        central = 2.0 / math.pi * (theta + s * total) if df > 1 else 2.0 * theta / math.pi
    else:
        # P(|T| < t) = sin * (1 + 1/2 c^2 + (1*3)/(2*4) c^4 + ...), df/2 terms
        total, term = 0.0, 1.0
        for j in range(1, df // 2 + 1):
            total += term
            term *= c2 * (2 * j - 1) / (2 * j)
        central = s * total
    central = min(max(central, 0.0), 1.0)
    return 0.5 + 0.5 * central if t >= 0 else 0.5 - 0.5 * central


@lru_cache(maxsize=256)
def t_quantile(q: float, df: int) -> float:
    """Inverse of t_cdf by bisection (monotone, so this is exact to float precision)."""
    if not 0.0 < q < 1.0:
        raise ValueError("q must lie in (0, 1)")
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-14 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def paired_t_ci(diffs: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """Mean difference +- t_{(1+level)/2, n-1} * sd / sqrt(n); None with fewer than 2 pairs."""
    d = np.asarray(diffs, dtype=np.float64)
    n = d.size
    if n < 2:
        return None
    half = t_quantile(0.5 + level / 2.0, n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
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
    observed = abs(float(d.sum()))
    tol = 1e-9 * max(float(np.abs(d).sum()), 1e-300)
    if n <= max_exact:
        sums = np.abs(_sign_matrix(n) @ d)
        return float(np.count_nonzero(sums >= observed - tol)) / float(2**n)
    rng = np.random.default_rng(0)
    draws = 1 << 16
    signs = rng.integers(0, 2, size=(draws, n)) * 2 - 1
    hits = np.count_nonzero(np.abs(signs @ d) >= observed - tol)
    return (hits + 1) / (draws + 1)  # Monte Carlo estimate; never zero


def min_sign_flip_p(n: int) -> float:
    """The smallest two-sided sign-flip p attainable with n pairs (all signs agree)."""
    return 2.0 / 2**n if n >= 1 else 1.0


def geometric_mean_ratio(control: Sequence[float], treatment: Sequence[float]) -> float | None:
    a = np.asarray(control, dtype=np.float64)
    b = np.asarray(treatment, dtype=np.float64)
    if a.size == 0 or np.any(a <= 0) or np.any(b <= 0):
        return None
    return float(np.exp(np.mean(np.log(b / a))))


@dataclass(frozen=True)
class PairedSummary:
    n: int
    control_mean: float
    treatment_mean: float
    mean_diff: float  # treatment - control
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
            return f"no detectable effect: the {self.ci_level:.0%} CI includes 0 ({p_text})"
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
        out["verdict"] = self.verdict()
        return out


def paired_summary(
    control: Sequence[float],
    treatment: Sequence[float],
    better: Better = "lower",
    level: float = 0.95,
) -> PairedSummary:
    a = np.asarray(control, dtype=np.float64)
    b = np.asarray(treatment, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise CompileAheadError(
            f"paired data need equal-length lists, got {a.size} control and {b.size} treatment"
        )
    n = int(a.size)
    if n == 0:
        raise CompileAheadError("no complete pairs to analyse")
    d = b - a
    ci = paired_t_ci(d, level)
    control_mean = float(a.mean())
    ratio_ci = None
    if np.all(a > 0) and np.all(b > 0):
        ratio_ci = paired_t_ci(np.log(b) - np.log(a), level)
    wins: int | None = None
    if better == "lower":
        wins = int(np.count_nonzero(d < 0))
    elif better == "higher":
        wins = int(np.count_nonzero(d > 0))
    return PairedSummary(
        n=n,
        control_mean=control_mean,
        treatment_mean=float(b.mean()),
        mean_diff=float(d.mean()),
        percent=float(d.mean() / control_mean * 100.0) if control_mean != 0 else None,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        ci_level=level,
        sign_flip_p=sign_flip_p(d),
        sign_flip_exact=n <= EXACT_SIGN_FLIP_MAX_N,
        min_possible_p=min_sign_flip_p(n),
        wins=wins,
        ties=int(np.count_nonzero(d == 0)),
        geomean_ratio=geometric_mean_ratio(a, b),
        ratio_ci_low=math.exp(ratio_ci[0]) if ratio_ci else None,
        ratio_ci_high=math.exp(ratio_ci[1]) if ratio_ci else None,
        better=better,
        diffs=tuple(float(x) for x in d),
    )
