"""The trial runner with fake arms (tiny Python scripts), and the reports it feeds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from compile_ahead.profiling.trials.analysis import Endpoint, analyse, result_field
from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.plot import plot_differences
from compile_ahead.profiling.trials.report import markdown, to_json, write_reports
from compile_ahead.profiling.trials.runner import Arm, TrialFailed, load_records, run_plan

# Writes {"value": base + offset + noise}; noise is seeded by the trial index, so it differs
# between trials but the run is reproducible. FAIL_AT makes one trial exit non-zero.
FAKE_ARM = """
import json, os, random, sys
index = int(os.environ["CA_TRIAL_INDEX"])
if os.environ.get("FAIL_AT") == str(index):
    print("fake arm: injected failure", file=sys.stderr)
    sys.exit(3)
offset = float(sys.argv[2])
noise = random.Random(index).gauss(0.0, 0.05)
with open(sys.argv[1], "w") as fh:
    json.dump({"value": 10.0 + offset + noise, "arm": os.environ["CA_TRIAL_ARM"],
               "index": index}, fh)
"""

ENDPOINTS = [Endpoint("value", "Fake compile wall", "s", "lower", result_field("value"))]


@pytest.fixture
def fake_script(tmp_path: Path) -> Path:
    path = tmp_path / "fake_arm.py"
    path.write_text(FAKE_ARM)
    return path


def arm(name: str, script: Path, offset: float, **env: str) -> Arm:
    return Arm(name, (sys.executable, str(script), "{out}", str(offset)), env=env)


def test_runner_detects_injected_effect(tmp_path: Path, fake_script: Path) -> None:
    plan = make_plan(["A", "B"], 5, warmup_per_arm=1)
    arms = [arm("A", fake_script, 0.0), arm("B", fake_script, -1.0)]
    records = run_plan(plan, arms, tmp_path / "out")
    assert len(records) == 2 + 10
    # the run order is the plan's order, and each trial ran the arm the plan asked for
    for slot, rec in zip(plan.slots, records, strict=True):
        assert (rec.arm, rec.block, rec.warmup) == (plan.arms[slot.arm], slot.block, slot.warmup)
        assert rec.result is not None and rec.result["arm"] == rec.arm
        assert rec.result["index"] == slot.index
    analysis = analyse(records, plan, ENDPOINTS)
    s = analysis.comparisons["value"]["B"]
    assert s is not None and s.n == 5
    assert s.mean_diff == pytest.approx(-1.0, abs=0.15)
    assert s.ci_excludes_zero and s.wins == 5 and s.sign_flip_p == 0.0625
    assert s.percent == pytest.approx(-10.0, abs=1.5)


def test_identical_arms_show_no_systematic_difference(tmp_path: Path, fake_script: Path) -> None:
    plan = make_plan(["A", "B"], 4, warmup_per_arm=0)
    arms = [arm("A", fake_script, 0.0), arm("B", fake_script, 0.0)]
    analysis = analyse(run_plan(plan, arms, tmp_path / "out"), plan, ENDPOINTS)
    s = analysis.comparisons["value"]["B"]
    assert s is not None and abs(s.mean_diff) < 0.2  # noise sd 0.05: far below a 1.0 effect


def test_three_arms_pair_each_treatment_with_the_control(tmp_path: Path, fake_script: Path):
    plan = make_plan(["c", "t1", "t2"], 3, warmup_per_arm=0)
    arms = [arm("c", fake_script, 0.0), arm("t1", fake_script, 0.5), arm("t2", fake_script, 2.0)]
    analysis = analyse(run_plan(plan, arms, tmp_path / "out"), plan, ENDPOINTS)
    assert analysis.comparisons["value"]["t1"].mean_diff == pytest.approx(0.5, abs=0.15)
    assert analysis.comparisons["value"]["t2"].mean_diff == pytest.approx(2.0, abs=0.15)
    text = markdown(analysis, "three arms", {"model": "fake"})
    assert "Paired effect (t1 − c)" in text and "Paired effect (t2 − c)" in text


def test_failure_keeps_completed_trials(tmp_path: Path, fake_script: Path) -> None:
    plan = make_plan(["A", "B"], 3, warmup_per_arm=0)
    arms = [arm("A", fake_script, 0.0, FAIL_AT="3"), arm("B", fake_script, 0.0, FAIL_AT="3")]
    out = tmp_path / "out"
    with pytest.raises(TrialFailed) as info:
        run_plan(plan, arms, out)
    message = str(info.value)
    assert "trial 3" in message and "exit code 3" in message and "injected failure" in message
    assert "3 completed trial(s) kept" in message
    kept = load_records(out)
    assert [r.index for r in kept] == [0, 1, 2, 3]
    assert [r.error is None for r in kept] == [True, True, True, False]
    partial = analyse(kept, plan, ENDPOINTS)
    assert partial.comparisons["value"]["B"].n == 1  # block 0 complete, block 1 half done


def test_missing_result_and_missing_program_are_errors(tmp_path: Path) -> None:
    plan = make_plan(["A", "B"], 1, warmup_per_arm=0)
    silent = [Arm("A", (sys.executable, "-c", "pass")), Arm("B", (sys.executable, "-c", "pass"))]
    with pytest.raises(TrialFailed, match="wrote no result"):
        run_plan(plan, silent, tmp_path / "a")
    missing = [Arm("A", (str(tmp_path / "nope"),)), Arm("B", (str(tmp_path / "nope"),))]
    with pytest.raises(TrialFailed, match="could not start"):
        run_plan(plan, missing, tmp_path / "b")


def test_reports_and_plot(tmp_path: Path, fake_script: Path) -> None:
    plan = make_plan(["A", "B"], 4, warmup_per_arm=0)
    arms = [arm("A", fake_script, 0.0), arm("B", fake_script, -1.0)]
    records = run_plan(plan, arms, tmp_path / "out")
    analysis = analyse(records, plan, ENDPOINTS)
    context = {"model": "tiny [SYNTHETIC weights]"}
    md, js = write_reports(tmp_path, "ab", analysis, "Fake A/B", context, arms, records)
    text = md.read_text()
    assert "| Endpoint | A | B | Paired effect (B − A) |" in text
    assert "SYNTHETIC" in text and "95% CI" in text and "4/4 better" in text
    data = json.loads(js.read_text())
    assert data["design"]["position_balanced"] is True
    comparison = data["endpoints"][0]["comparisons"]["B"]
    assert len(comparison["diffs"]) == 4 and comparison["sign_flip_p"] == 0.125
    assert len(data["trials"]) == 8
    assert to_json(analysis, "t", context, arms, records)["control"] == "A"
    png = plot_differences(analysis, tmp_path / "ab.png", "Fake A/B")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
