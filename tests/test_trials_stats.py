"""Trial statistics against scipy and brute-force enumeration; error rates on simulated data."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials import stats


def test_paired_t_ci_uses_the_tabulated_t_quantiles() -> None:
    # Student-t 0.975 quantiles from printed tables: df=1 12.706, df=4 2.776
    a = [10.0, 12.0]
    b = [11.0, 14.0]  # diffs 1, 2: mean 1.5, sd 0.7071
    low, high = stats.paired_t_ci(a, b)
    half = 12.7062047 * (math.sqrt(0.5) / math.sqrt(2))
    assert (low, high) == pytest.approx((1.5 - half, 1.5 + half), rel=1e-7)
    diffs = np.array([-1.0, 0.5, 2.0, 1.5, 0.0])
    low, high = stats.paired_t_ci(np.zeros(5), diffs)
    half = 2.7764451 * diffs.std(ddof=1) / math.sqrt(5)
    assert (low, high) == pytest.approx((0.6 - half, 0.6 + half), rel=1e-7)
    assert stats.paired_t_ci([1.0], [2.0]) is None
    assert stats.paired_t_ci([1.0, 2.0], [3.0, 4.0]) == (2.0, 2.0)  # no spread: the point


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
def test_paired_t_ci_matches_scipy_ttest_rel(n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.normal(10.0, 1.0, n)
    b = a + rng.normal(-0.4, 0.3, n)
    ref = scipy_stats.ttest_rel(b, a).confidence_interval(0.95)
    s = stats.paired_summary(a, b, "lower")
    assert s.ci_low == pytest.approx(ref.low, rel=1e-9)
    assert s.ci_high == pytest.approx(ref.high, rel=1e-9)
    log_ref = scipy_stats.ttest_rel(np.log(b), np.log(a)).confidence_interval(0.95)
    assert s.ratio_ci_low == pytest.approx(math.exp(log_ref.low), rel=1e-9)
    assert s.ratio_ci_high == pytest.approx(math.exp(log_ref.high), rel=1e-9)
    lo90, hi90 = stats.paired_t_ci(a, b, 0.90)
    ref90 = scipy_stats.ttest_rel(b, a).confidence_interval(0.90)
    assert (lo90, hi90) == pytest.approx((ref90.low, ref90.high), rel=1e-9)


def brute_force_sign_flip(diffs: list[float]) -> float:
    """Independent reference: every sign vector through itertools.product, exact fractions."""
    observed = abs(sum(diffs))
    hits = 0
    vectors = list(itertools.product((1, -1), repeat=len(diffs)))
    for signs in vectors:
        total = abs(sum(s * d for s, d in zip(signs, diffs, strict=True)))
        if total >= observed - 1e-9:
            hits += 1
    return hits / len(vectors)


@pytest.mark.parametrize("seed", range(12))
def test_sign_flip_p_matches_enumeration(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 11))
    diffs = [float(x) for x in np.round(rng.normal(0.3, 1.0, n), 2)]  # rounding makes ties
    assert stats.sign_flip_p(diffs) == pytest.approx(brute_force_sign_flip(diffs), abs=1e-15)


@pytest.mark.parametrize("n", [2, 3, 5, 9])  # scipy refuses a single pair; ours says p=1
def test_sign_flip_p_matches_scipy_permutation_test(n: int) -> None:
    rng = np.random.default_rng(100 + n)
    d = np.round(rng.normal(0.5, 1.0, n), 1)
    exact = scipy_stats.permutation_test(
        (d,), np.sum, vectorized=True, permutation_type="samples", n_resamples=np.inf
    )
    assert stats.sign_flip_p(d) == pytest.approx(exact.pvalue, abs=1e-15)


def test_sign_flip_p_beyond_exact_is_a_close_monte_carlo_estimate() -> None:
    d = np.round(np.random.default_rng(5).normal(0.4, 1.0, 12), 2)
    estimate = stats.sign_flip_p(d, max_exact=8)  # forced onto the Monte Carlo path
    assert estimate == pytest.approx(brute_force_sign_flip(list(d)), abs=0.01)
    assert estimate == stats.sign_flip_p(d, max_exact=8)  # seeded: repeatable


def test_sign_flip_p_with_ties_and_zeros() -> None:
    for diffs in ([1.0, 1.0, -1.0, 1.0], [0.0, 2.0, 2.0], [0.5, -0.5, 0.5, -0.5], [0.0, 0.0]):
        assert stats.sign_flip_p(diffs) == pytest.approx(brute_force_sign_flip(diffs))


def test_five_pairs_all_one_way_give_the_seed_minimum() -> None:
    diffs = [-18.1, -19.5, -18.9, -19.9, -18.4]
    assert stats.sign_flip_p(diffs) == 0.0625
    assert stats.min_sign_flip_p(5) == 0.0625
    s = stats.paired_summary([84.0] * 5, [84.0 + d for d in diffs], "lower")
    assert s.wins == 5 and s.ci_excludes_zero
    verdict = s.verdict()
    assert "0.0625" in verdict and "no p<0.05 claim" in verdict
    assert not verdict.startswith("effect")


def test_summary_fields() -> None:
    a = [100.0, 110.0, 90.0, 105.0]
    b = [80.0, 99.0, 72.0, 84.0]
    s = stats.paired_summary(a, b, "lower")
    assert s.n == 4
    assert s.mean_diff == pytest.approx(np.mean(np.subtract(b, a)))
    assert s.percent == pytest.approx(s.mean_diff / np.mean(a) * 100)
    assert s.wins == 4 and s.ties == 0
    assert s.geomean_ratio == pytest.approx(math.exp(np.mean(np.log(np.divide(b, a)))))
    assert stats.paired_summary(a, b, "higher").wins == 0
    assert stats.paired_summary(a, b, None).wins is None
    negative = stats.paired_summary([1.0, -1.0], [2.0, 1.0])
    assert negative.geomean_ratio is None and negative.ratio_ci_low is None


def test_strong_replicated_effect_is_called_an_effect() -> None:
    rng = np.random.default_rng(3)
    a = rng.normal(50, 1, 10)
    s = stats.paired_summary(a, a - 5 + rng.normal(0, 0.5, 10), "lower")
    assert s.sign_flip_p == pytest.approx(2 / 1024)
    assert s.verdict().startswith("effect")


def test_bad_input() -> None:
    with pytest.raises(CompileAheadError):
        stats.paired_summary([1.0, 2.0], [1.0])
    with pytest.raises(CompileAheadError):
        stats.paired_summary([], [])
    s = stats.paired_summary([1.0], [2.0])
    assert s.ci_low is None and "no interval" in s.verdict()


def _simulate(effect: float, n: int, experiments: int, seed: int) -> tuple[float, float]:
    """Share of simulated paired experiments whose CI excludes 0 / whose sign-flip p <= .05."""
    rng = np.random.default_rng(seed)
    ci_hits = p_hits = 0
    for _ in range(experiments):
        control = rng.normal(20.0, 2.0, n)  # between-block spread, cancelled by pairing
        treatment = control + effect + rng.normal(0.0, 0.5, n)
        s = stats.paired_summary(control, treatment, "lower")
        ci_hits += s.ci_excludes_zero
        p_hits += s.sign_flip_p <= 0.05
    return ci_hits / experiments, p_hits / experiments


def test_identical_arms_false_positive_rate_is_nominal() -> None:
    # n=5: a z-interval (1.96 instead of t=2.78) would reject ~12% here, not 5%.
    experiments = 3000
    ci_rate, p_rate = _simulate(0.0, 5, experiments, seed=11)
    half_width = 4 * math.sqrt(0.05 * 0.95 / experiments)
    assert abs(ci_rate - 0.05) < half_width
    assert p_rate == 0.0  # with five pairs p >= 0.0625: the exact test can never reject at .05
    ci_rate, p_rate = _simulate(0.0, 8, experiments, seed=12)
    assert abs(ci_rate - 0.05) < half_width
    assert p_rate < 0.05 + half_width  # exact test: size at most alpha


def test_injected_effect_is_detected() -> None:
    ci_rate, p_rate = _simulate(-1.0, 8, 400, seed=13)  # effect = 2 noise sd
    assert ci_rate > 0.95 and p_rate > 0.9


def test_proportional_effect_under_drifting_load_is_named_but_not_claimed() -> None:
    # both arms scale with the load of their block; the treatment is 20% faster in every block
    load = np.array([1.0, 8.0, 1.0, 1.2, 0.9])
    control = 50.0 * load
    treatment = 40.0 * load * np.array([1.01, 0.99, 1.0, 1.02, 0.98])
    s = stats.paired_summary(control, treatment, "lower")
    assert s.ratio_ci_excludes_one and s.ratio_ci_high < 1
    verdict = s.verdict()
    assert "ratio CI" in verdict and "not a significance claim" in verdict
    assert stats.paired_summary(control, control * 1.0, "lower").ratio_ci_excludes_one is False
