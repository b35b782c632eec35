"""Flags on the per-pass table of `ab compile --pass-profile`: each pass judged by the
endpoints' rule (interval, Holm's correction over the passes of the comparison, noise floor),
shown in the markdown and the JSON alike. Simulated A/A experiments with heavy-tailed noise
through the same analysis code measure the rate of false flags."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from compile_ahead.profiling.trials.compile_kind import passes as pass_ab
from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.runner import TrialRecord

PASSES = 215  # as many as a compile of a decoder has
PAIRS = 8


def _records(plan, self_ms) -> list[TrialRecord]:
    """Trial records whose results hold per-pass self times: ``self_ms(arm, block)`` gives the
    milliseconds of every pass of that trial."""
    out = []
    for slot in plan.slots:
        arm = plan.arms[slot.arm]
        ms = self_ms(arm, slot.block)
        result = {"pass_self_s": {"M": {f"p{i:03d}": float(v) / 1e3 for i, v in enumerate(ms)}}}
        out.append(TrialRecord(slot.index, slot.block, slot.position, arm, False, 0, 1.0, 0.0,
                               "", result))  # fmt: skip
    return out


def _heavy_tailed_aa(rng: np.random.Generator, plan):
    """Two arms that run the same thing: pass means from 2 us to 200 ms, each trial slowed or
    sped up as a whole (Student t, 3 degrees of freedom, ~3%), each pass's own noise Student t
    with 2 degrees of freedom (infinite variance; ~2%, ~15% for passes under 50 us), timed to
    the microsecond."""
    means = np.exp(rng.uniform(math.log(0.002), math.log(200.0), PASSES))
    scale = np.where(means < 0.05, 0.15, 0.02)
    drawn = {}
    for slot in plan.slots:
        shock = 0.03 * rng.standard_t(3)
        ms = means * np.exp(shock + scale * rng.standard_t(2, PASSES))
        drawn[(plan.arms[slot.arm], slot.block)] = np.maximum(np.round(ms, 3), 0.001)
    return lambda arm, block: drawn[(arm, block)]


def _flagged_in_json(passes: pass_ab.PassAnalysis, treatment: str) -> list[str]:
    ranked = pass_ab.to_json(passes)["comparisons"][treatment]["ranked"]
    return [r["pass"] for r in ranked if r["judgement"]["flagged"]]


def _flagged_in_markdown(text: str) -> list[str]:
    return re.findall(r"^- (\S+) \[M\]: .*?, (?:regression|improvement) \(Holm p=", text, re.M)


def test_aa_pass_table_flags_at_most_5_percent_of_experiments_under_heavy_tails() -> None:
    """215 passes, 8 pairs: the interval alone (what a per-pass floor equal to it adds
    nothing to) flags some pass in nearly every A/A experiment; with Holm's correction over
    the passes, at most 5% of experiments flag anything (binomial margin of 2 SE)."""
    rng = np.random.default_rng(31)
    plan = make_plan(["A", "B"], PAIRS, 0)
    runs = 120
    any_flag = any_detected = false_flags = 0
    for _ in range(runs):
        passes = pass_ab.analyse_passes(_records(plan, _heavy_tailed_aa(rng, plan)), plan)
        flagged = _flagged_in_json(passes, "B")
        judgements = [j["B"] for j in passes.analysis.judgements.values() if j.get("B")]
        assert len(judgements) == PASSES
        any_flag += bool(flagged)
        false_flags += len(flagged)
        any_detected += any(j.detected for j in judgements)
    assert any_detected / runs > 0.9
    assert any_flag / runs <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / runs)
    assert false_flags / runs < 0.1  # false flags per A/A comparison


def test_pass_below_the_aa_floor_is_never_flagged_and_reports_agree() -> None:
    """A +1% change in every pair of one pass (the smallest sign-flip p 8 pairs allow) stays
    below the floor the A/A arm sets for it (its A/A comparison spreads ~3%); a +30% change is
    flagged; the markdown lists exactly the passes the JSON flags."""
    plan = make_plan(["A", "A-aa", "B"], 6, 0)
    rng = np.random.default_rng(5)
    aa_noise = rng.normal(0.0, 0.03, (6, 4))
    steady = rng.normal(0.0, 0.01, (6, 4))
    base = np.array([10.0, 20.0, 5.0, 8.0])

    def self_ms(arm: str, block: int) -> np.ndarray:
        if arm == "A":
            return base * np.exp(steady[block])
        if arm == "A-aa":
            return base * np.exp(steady[block] + aa_noise[block])
        return base * np.exp(steady[block]) * np.array([1.01, 1.30, 1.0, 1.0])

    records = _records(plan, self_ms)
    passes = pass_ab.analyse_passes(records, plan, aa_arms=("A-aa",))
    ranked = {r["pass"]: r for r in pass_ab.to_json(passes)["comparisons"]["B"]["ranked"]}
    small, big = ranked["p000"], ranked["p001"]
    assert small["comparison"]["ratio_ci_excludes_one"]
    assert small["comparison"]["sign_flip_p"] == pytest.approx(2 / 2**6)
    assert small["judgement"]["floor_source"] == "A/A arm A-aa"
    assert small["judgement"]["floor_pct"] > 1.0
    assert small["judgement"]["status"] == "below the noise floor"
    assert not small["judgement"]["flagged"]
    assert big["judgement"]["flagged"] and big["judgement"]["status"] == "regression"
    text = pass_ab.markdown(passes)
    assert _flagged_in_markdown(text) == _flagged_in_json(passes, "B") == ["p001"]
    assert "Holm over every pass in both arms" in text
    assert "No pass flagged (of 4)." in text  # the A/A arm's own comparison
