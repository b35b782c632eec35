"""Per-pass endpoints of `ab compile --pass-profile` on hand-made trial records: the ranking,
passes that ran in one arm only, and passes missing from some trials."""

from __future__ import annotations

from pathlib import Path

import pytest

from compile_ahead.profiling.trials.compile_kind import passes as pass_ab
from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.runner import TrialRecord

# manager -> pass -> self seconds, per (arm, block)
SELF_S: dict[tuple[str, int], dict[str, dict[str, float]]] = {
    ("A", 0): {"M": {"steady": 0.0010, "noisy": 0.010, "gone": 0.002, "flaky": 0.001}},
    ("A", 1): {"M": {"steady": 0.0020, "noisy": 0.020}, "N": {"x": 0.003}},
    ("A", 2): {"M": {"steady": 0.0015, "noisy": 0.015}, "N": {"x": 0.003}},
    ("B", 0): {"M": {"steady": 0.0011, "noisy": 0.030, "new": 0.004}, "N": {"x": 0.003}},
    ("B", 1): {"M": {"steady": 0.0021, "noisy": 0.010, "flaky": 0.002}, "N": {"x": 0.003}},
    ("B", 2): {"M": {"steady": 0.0016, "noisy": 0.022}, "N": {"x": 0.003}},
}


def records(plan) -> list[TrialRecord]:
    out = []
    for index, slot in enumerate(plan.slots):
        arm = plan.arms[slot.arm]
        result = {"pass_self_s": SELF_S[(arm, slot.block)]}
        out.append(
            TrialRecord(index, slot.block, slot.position, arm, slot.warmup, 0, 1.0, 0.0, "", result)
        )
    return out


@pytest.fixture
def analysed() -> pass_ab.PassAnalysis:
    plan = make_plan(["A", "B"], 3, warmup_per_arm=0)
    return pass_ab.analyse_passes(records(plan), plan)


def test_ranking_puts_intervals_excluding_zero_first(analysed: pass_ab.PassAnalysis) -> None:
    (comp,) = analysed.comparisons
    order = [r.key.name for r in comp.ranked]
    # steady moves +0.1 ms in every block (CI excludes 0) and outranks noisy, whose median
    # moved more but whose interval includes 0
    assert order[0] == "steady" and comp.ranked[0].summary.ci_excludes_zero
    assert comp.ranked[0].summary.median_diff == pytest.approx(0.1)
    assert order.index("noisy") < order.index("x")  # |median| 5 ms before 0 ms
    assert [pass_ab.rank_order(r.summary) for r in comp.ranked] == sorted(
        pass_ab.rank_order(r.summary) for r in comp.ranked
    )


def test_one_arm_only_passes_are_listed_not_compared(analysed: pass_ab.PassAnalysis) -> None:
    (comp,) = analysed.comparisons
    assert [k.name for k in comp.one_arm_only["A"]] == ["gone"]
    assert [k.name for k in comp.one_arm_only["B"]] == ["new"]
    assert {"gone", "new"}.isdisjoint(r.key.name for r in comp.ranked)
    gone = pass_ab.PassKey("M", "gone")
    assert analysed.analysis.comparisons[gone.key]["B"] is None
    assert analysed.mean_ms(gone, "A") == pytest.approx(2.0 / 3)  # 2 ms once, 0 twice
    md = pass_ab.markdown(analysed)
    assert "Passes in A only (1, mean self time there):" in md
    assert "- new [M]: 1.33 ms" in md


def test_a_pass_missing_from_a_profiled_trial_took_no_time(
    analysed: pass_ab.PassAnalysis,
) -> None:
    flaky = pass_ab.PassKey("M", "flaky")
    assert analysed.analysis.values[flaky.key] == {"A": [1.0, 0.0, 0.0], "B": [0.0, 2.0, 0.0]}
    x = pass_ab.PassKey("N", "x")
    assert analysed.analysis.values[x.key]["A"] == [0.0, 3.0, 3.0]


def test_trials_without_pass_profile_have_no_values() -> None:
    plan = make_plan(["A", "B"], 1, warmup_per_arm=0)
    recs = records(plan)
    recs[0].result = {"total_compile_s": 1.0}  # this trial did not profile passes
    analysed = pass_ab.analyse_passes(recs, plan)
    steady = pass_ab.PassKey("M", "steady")
    assert None in analysed.analysis.values[steady.key][recs[0].arm]


def test_json_and_plot(analysed: pass_ab.PassAnalysis, tmp_path: Path) -> None:
    data = pass_ab.to_json(analysed)
    ranked = data["comparisons"]["B"]["ranked"]
    assert ranked[0]["pass"] == "steady" and ranked[0]["comparison"]["n"] == 3
    assert data["comparisons"]["B"]["one_arm_only"]["B"][0]["pass"] == "new"
    png = pass_ab.plot_passes(analysed, tmp_path / "passes.png", "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
