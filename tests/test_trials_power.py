"""Measurement power of `ab compile`: the MDE against scipy and simulation, the flag rule on
simulated A/A data, repeated compiles and their statistic, unavailable measures, the counter
module, and A/A and A/A+delta experiments on the tiny preset through the public commands."""

from __future__ import annotations

import json
import math
import os
import re
import resource
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from compile_ahead.commands.main import build_parser
from compile_ahead.profiling.trials import power, stats
from compile_ahead.profiling.trials.analysis import analyse
from compile_ahead.profiling.trials.compile_kind.endpoints import (
    NO_COUNTERS_DEFAULT,
    compile_endpoints,
    default_endpoint,
)
from compile_ahead.profiling.trials.compile_kind.exported_rungs import (
    WORKER,
    MeasureOptions,
    counter_module,
    export_rungs,
)
from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.report import markdown, to_json
from compile_ahead.profiling.trials.runner import TrialRecord


def shown_mde(md: str, label: str) -> float:
    """The MDE the markdown table shows in the row of ``label``."""
    (row,) = [line for line in md.splitlines() if line.startswith(f"| {label} |")]
    (value,) = re.findall(r"MDE \u00b1([0-9.]+)%", row)
    return float(value)


def run_ab(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


# --- the minimal detectable effect ---------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 10, 20, 40])
def test_mde_noncentrality_gives_80_percent_power_by_scipy_nct(n: int) -> None:
    nc = stats.mde_noncentrality(n)
    crit = scipy_stats.t.ppf(0.975, n - 1)
    power = scipy_stats.nct.sf(crit, n - 1, nc) + np.nan_to_num(
        scipy_stats.nct.cdf(-crit, n - 1, nc)
    )
    assert power == pytest.approx(0.80, abs=1e-6)
    # the closed form (t quantiles added) ignores the far tail and the skew: low for few
    # pairs, within 1% from 10 pairs on
    approx = scipy_stats.t.ppf(0.975, n - 1) + scipy_stats.t.ppf(0.80, n - 1)
    assert stats.mde_noncentrality_approx(n) == pytest.approx(approx, rel=1e-12)
    if n <= 5:
        assert approx < nc
    else:
        assert approx == pytest.approx(nc, rel=0.01)


@pytest.mark.parametrize("n", [4, 10])
def test_mde_is_detected_80_percent_of_the_time_in_simulation(n: int) -> None:
    """Independent of the formula: paired t-tests (scipy's ttest_1samp) on simulated
    differences whose true mean is the MDE reject 0 in 80% of the draws."""
    sd = 0.02
    effect = stats.minimal_detectable_effect(sd, n)
    rng = np.random.default_rng(n)
    draws = rng.normal(effect, sd, size=(40000, n))
    p = scipy_stats.ttest_1samp(draws, 0.0, axis=1).pvalue
    assert float(np.mean(p <= 0.05)) == pytest.approx(0.80, abs=0.01)


def _compile_result(wall: list[float], cpu: list[float], warmup: int = 0) -> dict:
    compiles = [
        {"wall_s": w, "cpu_s": c, "instructions": None, "peak_rss_bytes": 100 << 20,
         "warmup": i < warmup}
        for i, (w, c) in enumerate(zip(wall, cpu, strict=True))
    ]  # fmt: skip
    return {
        "rungs": [{"capacity": 16, "compile_s": wall[warmup], "compiles": compiles}],
        "total_read_s": 0.01,
        "measures": {
            "instructions": {"available": False, "reason": "perf_event_open: ENOENT (test)"},
            "cpu": {"available": True},
        },
    }


def _records(plan, result_of) -> list[TrialRecord]:
    out = []
    for slot in plan.slots:
        arm = plan.arms[slot.arm]
        result = result_of(arm, slot.block)
        out.append(TrialRecord(slot.index, slot.block, slot.position, arm, slot.warmup, 0, 1.0,
                               0.0, "", result))  # fmt: skip
    return out


def _simulated(n: int, sd: float, ratio: float = 1.0, seed: int = 0):
    """An A/B of n pairs whose CPU time's log-ratio has SD ``sd`` (and true ratio ``ratio``)."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(1.0, 1.2, n)
    noise = rng.normal(0.0, sd, n)
    plan = make_plan(["A", "B"], n, warmup_per_arm=0)

    def result_of(arm: str, block: int) -> dict:
        cpu = base[block] * (ratio * math.exp(noise[block]) if arm == "B" else 1.0)
        return _compile_result([cpu * 2], [cpu])

    endpoints = compile_endpoints((16,), False, measure=MeasureOptions())
    return analyse(_records(plan, result_of), plan, endpoints), plan


def test_mde_is_in_json_and_markdown_and_shrinks_as_pairs_grow() -> None:
    mdes = []
    for n in (4, 8, 16, 32):
        analysis, _ = _simulated(n, 0.02, seed=n)
        data = to_json(analysis, "t", {}, [], [])
        cpu = next(e for e in data["endpoints"] if e["key"] == "cpu_total")
        comparison = cpu["comparisons"]["B"]
        a, b = np.array(cpu["values"]["A"]), np.array(cpu["values"]["B"])
        sd = float(np.std(np.log(b / a), ddof=1))  # the noise, computed here
        assert comparison["log_sd"] == pytest.approx(sd, rel=1e-9)
        expected = math.exp(stats.mde_noncentrality(n) * sd / math.sqrt(n)) * 100 - 100
        assert comparison["mde_pct"] == pytest.approx(expected, rel=1e-9)
        text = markdown(analysis, "t", {})
        label = "Compile CPU time (user+sys, all threads), all rungs"
        assert shown_mde(text, label) == pytest.approx(comparison["mde_pct"], abs=0.01)
        assert "would have been seen" in text
        mdes.append(comparison["mde_pct"])
    assert mdes == sorted(mdes, reverse=True) and mdes[-1] < mdes[0] / 3


def test_holm_adjustment_of_a_textbook_example() -> None:
    adjusted = power.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    assert adjusted == pytest.approx({"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06})


def test_flag_rule_family_wise_rate_on_simulated_aa_and_detection_of_a_real_change() -> None:
    """Six independent endpoints per simulated A/A experiment: the Holm rule flags something
    in at most 5% of the experiments (a per-endpoint 95% interval alone would in about 26%);
    a 5% change with 2% noise is flagged in 10 pairs."""
    rng = np.random.default_rng(7)
    flagged = uncorrected = 0
    runs, n, k = 400, 10, 6
    for _ in range(runs):
        logs = rng.normal(0.0, 0.02, size=(k, n))
        comparisons = {
            f"e{i}": {"B": stats.paired_summary(np.ones(n), np.exp(logs[i]), "lower")}
            for i in range(k)
        }
        judged = power.judge(comparisons)
        flagged += any(judged[f"e{i}"]["B"].flagged for i in range(k))
        uncorrected += any(judged[f"e{i}"]["B"].detected for i in range(k))
    assert flagged / runs <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / runs)
    assert uncorrected / runs > 0.15
    analysis, _ = _simulated(10, 0.02, ratio=1.05, seed=3)
    assert analysis.judgements["cpu_total"]["B"].flagged
    assert analysis.judgements["cpu_total"]["B"].direction == "regression"


def test_aa_arm_sets_the_noise_floor_of_the_other_comparisons() -> None:
    n = 8
    plan = make_plan(["A", "A-aa", "B"], n, warmup_per_arm=0)
    rng = np.random.default_rng(1)
    noisy = rng.normal(0.0, 0.05, n)  # the A/A arm is noisier than B's comparison

    def result_of(arm: str, block: int) -> dict:
        factor = {"A": 1.0, "A-aa": math.exp(noisy[block]), "B": 1.01 + 0.001 * (block % 2)}
        return _compile_result([2.0 * factor[arm]], [factor[arm]])

    endpoints = compile_endpoints((16,), False, measure=MeasureOptions())
    analysis = analyse(_records(plan, result_of), plan, endpoints, ("A-aa",))
    judged = analysis.judgements["cpu_total"]["B"]
    aa = analysis.comparisons["cpu_total"]["A-aa"]
    assert judged.detected and judged.floor_source == "A/A arm A-aa"
    half = (math.log(aa.ratio_ci_high) - math.log(aa.ratio_ci_low)) / 2
    assert judged.floor_pct == pytest.approx((math.exp(half) - 1) * 100)
    assert not judged.flagged  # +1% is below the A/A arm's floor


# --- repeated compiles, unavailable measures -----------------------------------------------


def test_declared_statistic_reduces_the_repeats_and_leaves_warmups_out() -> None:
    walls = [0.9, 0.30, 0.10, 0.20]  # the first (a warm-up) is left out
    plan = make_plan(["A", "B"], 2, warmup_per_arm=0)
    recs = _records(plan, lambda arm, block: _compile_result(walls, [w / 2 for w in walls], 1))
    for statistic, value in (("min", 0.10), ("median", 0.20)):
        measure = MeasureOptions(repeat=3, compile_warmup=1, statistic=statistic)
        analysis = analyse(recs, plan, compile_endpoints((16,), False, measure=measure))
        assert analysis.values["compile_16"]["A"] == [value, value]
        assert analysis.values["cpu_total"]["A"] == [value / 2, value / 2]
        (ep,) = [e for e in analysis.endpoints if e.key == "cpu_total"]
        assert ep.statistic.startswith(f"{statistic} of 3 compiles")


def test_unmeasurable_endpoint_is_unavailable_with_its_reason_never_zero() -> None:
    analysis, _ = _simulated(4, 0.02)
    assert analysis.values["instructions_total"] == {"A": [None] * 4, "B": [None] * 4}
    assert analysis.unavailable["instructions_total"] == {
        "A": "perf_event_open: ENOENT (test)",
        "B": "perf_event_open: ENOENT (test)",
    }
    assert analysis.comparisons["instructions_total"]["B"] is None
    data = to_json(analysis, "t", {}, [], [])
    entry = next(e for e in data["endpoints"] if e["key"] == "instructions_total")
    assert entry["available"] == {"A": False, "B": False} and 0 not in entry["values"]["A"]
    text = markdown(analysis, "t", {})
    assert "| Instructions (user), all rungs | unavailable | unavailable |" in text
    assert "- Instructions (user), all rungs: A, B: perf_event_open: ENOENT (test)" in text


def _counted(result: dict, instructions: float) -> dict:
    """``result`` as a machine with a PMU reports it: every compile's instructions counted."""
    for rung in result["rungs"]:
        for c in rung["compiles"]:
            c["instructions"] = instructions
    result["measures"]["instructions"] = {"available": True}
    return result


@pytest.mark.parametrize("counted_by", [(), ("A",), ("A", "B")])
def test_default_endpoint_is_instructions_where_every_arm_counts_them(counted_by) -> None:
    plan = make_plan(["A", "B"], 4, warmup_per_arm=0)

    def result_of(arm: str, block: int) -> dict:
        result = _compile_result([2.0 + block / 10], [1.0 + block / 10])
        return _counted(result, 1e9 + block) if arm in counted_by else result

    endpoints = compile_endpoints((16,), False, measure=MeasureOptions())
    analysis = analyse(_records(plan, result_of), plan, endpoints)
    key, rule = default_endpoint(analysis)
    expected = "instructions_total" if counted_by == ("A", "B") else NO_COUNTERS_DEFAULT
    assert key == expected
    analysis.headline, analysis.headline_rule = key, rule
    label = next(ep.label for ep in endpoints if ep.key == key)
    text = markdown(analysis, "t", {})
    assert f"- default endpoint: {label} ({rule})" in text
    verdicts = text.split("Verdicts (what the test supports):\n", 1)[1].splitlines()
    assert verdicts[0].startswith(f"- **default endpoint** {label}, B vs A: ")
    assert sum(line.startswith("- **default endpoint**") for line in verdicts) == 1
    assert to_json(analysis, "t", {}, [], [])["default_endpoint"] == {"key": key, "rule": rule}


def _run_worker(tmp_path: Path, counters: str | None = None, **manifest_keys) -> dict:
    exported = export_rungs("tiny", (16,), "f32", tmp_path / "ir")
    manifest = exported.manifest("CPU", {}, pass_profile=False) | manifest_keys
    path = tmp_path / "m.json"
    path.write_text(json.dumps(manifest))
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if k != "OV_ENABLE_PROFILE_PASS"}
    argv = [sys.executable, "-s", str(WORKER), str(path), str(out)]
    subprocess.run(argv + ([counters] if counters else []), check=True, env=env)
    return json.loads(out.read_text())


def test_worker_keeps_every_compile_and_names_what_it_cannot_measure(tmp_path: Path) -> None:
    result = _run_worker(tmp_path, str(tmp_path / "x.so"), repeat=3, compile_warmup=1)
    (rung,) = result["rungs"]
    compiles = rung["compiles"]
    assert [c["warmup"] for c in compiles] == [True, False, False, False]
    for c in compiles:
        assert c["wall_s"] > 0 and c["cpu_s"] > 0 and c["peak_rss_bytes"] > 0
        assert c["instructions"] is None and c["cycles"] is None  # never 0
    assert rung["compile_s"] == compiles[1]["wall_s"]  # the first measured compile
    for measure in ("instructions", "cycles", "task_clock"):
        status = result["measures"][measure]
        assert status["available"] is False and "not loadable" in status["reason"]
    assert result["measures"]["cpu"] == {"available": True}


def test_worker_counts_what_the_kernel_exposes(tmp_path: Path) -> None:
    module = counter_module()
    assert module is not None, "compile_ahead._perfcounters is built with the package"
    result = _run_worker(tmp_path, module)
    (c,) = result["rungs"][0]["compiles"]
    for measure in ("instructions", "cycles"):
        status = result["measures"][measure]
        if status["available"]:
            assert c[measure] > 0
        else:  # e.g. a VM without a PMU: perf_event_open(...): ... (ENOENT)
            assert c[measure] is None and "perf_event_open" in status["reason"]
    if result["measures"]["task_clock"]["available"]:  # the kernel's two clocks agree
        assert c["task_clock"] == pytest.approx(c["cpu_s"], rel=0.1, abs=0.01)


def test_counter_window_sums_every_thread_like_getrusage() -> None:
    from compile_ahead import _perfcounters

    with pytest.raises(ValueError, match="unknown counter 'bogus'"):
        _perfcounters.CounterWindow(["bogus"])
    window = _perfcounters.CounterWindow(["task-clock"])
    if "task-clock" in window.unavailable:
        pytest.skip(f"this kernel refuses task-clock: {window.unavailable['task-clock']}")
    before = resource.getrusage(resource.RUSAGE_SELF)
    window.start()

    def burn() -> None:
        total = 0
        for i in range(2_000_000):
            total += i

    threads = [threading.Thread(target=burn) for _ in range(2)]  # started inside the window
    for t in threads:
        t.start()
    burn()
    for t in threads:
        t.join()
    reading = window.stop()["task-clock"]
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert reading["unavailable"] is None
    assert reading["value"] / 1e9 == pytest.approx(cpu, rel=0.1, abs=0.01)


# --- A/A and A/A+delta on the tiny preset --------------------------------------------------


@pytest.mark.alone  # real compile timings, judged
def test_aa_on_tiny_flags_nothing_and_states_the_mde(tmp_path: Path) -> None:
    out = tmp_path / "aa"
    assert run_ab(["ab", "compile", "--arm", "A=current", "--aa", "--model", "tiny",
                   "--ladder", "16", "--pairs", "6", "--out", str(out), "--quiet",
                   "--no-plot"]) == 0  # fmt: skip
    data = json.loads((out / "compile_ab.json").read_text())
    assert [a["name"] for a in data["arms"]] == ["A", "A-aa"]
    assert data["arms"][1]["aa_of"] == "A" and data["aa_arms"] == ["A-aa"]
    md = (out / "compile_ab.md").read_text()
    for entry in data["endpoints"]:
        judgement = entry["judgements"]["A-aa"]
        comparison = entry["comparisons"]["A-aa"]
        if comparison is None:  # a measure this machine cannot take: named, never 0
            assert set(entry["unavailable"]) == {"A", "A-aa"}
            assert all(v is None for v in entry["values"]["A"] + entry["values"]["A-aa"])
            assert f"- {entry['label']}: A, A-aa: " in md
            continue
        assert not judgement["flagged"], f"A/A flagged {entry['key']}: {judgement}"
        assert comparison["mde_pct"] == pytest.approx(shown_mde(md, entry["label"]), abs=0.01)
    cpu = next(e for e in data["endpoints"] if e["key"] == "cpu_total")
    assert all(v > 0 for v in cpu["values"]["A"])
    assert "FLAGGED" not in md


@pytest.mark.alone  # real compile timings, judged
def test_calibrate_30_percent_is_detected_on_cpu_time(tmp_path: Path) -> None:
    out = tmp_path / "cal"
    # A tiny rung compiles in ~0.08 s of CPU, so single compiles are noisy: 8 pairs of 5
    # repeats keep the 30% out of the noise (4 pairs of 3 missed it about one run in three).
    assert run_ab(["ab", "calibrate", "--delta", "30%", "--model", "tiny", "--ladder", "16",
                   "--pairs", "8", "--repeat", "5", "--calibration-trials", "2",
                   "--out", str(out), "--quiet", "--no-plot"]) == 0  # fmt: skip
    data = json.loads((out / "compile_ab.json").read_text())
    assert data["title"].startswith("CALIBRATION")
    assert [a["name"] for a in data["arms"]] == ["A", "A-delta"]
    spin = data["arms"][1]["calibration"]["spin_s"]["16"]
    control_cpu = data["calibration"]["control_cpu_s"]["16"]
    assert spin == pytest.approx(0.3 * control_cpu)
    rows = {r["key"]: r for r in data["calibration"]["endpoints"]}
    assert rows["cpu_total"]["delta"]["detected"]
    assert rows["cpu_total"]["delta"]["effect_pct"] > 10
    trials = [t["result"] for t in data["trials"] if t["arm"] == "A-delta"]
    assert all(
        c.get("calibration_spin_s") == spin for t in trials for c in t["rungs"][0]["compiles"]
    )
    assert all("calibration_spin_s" not in c for t in data["trials"] if t["arm"] == "A"
               for c in t["result"]["rungs"][0]["compiles"])  # fmt: skip
    md = (out / "compile_ab.md").read_text()
    assert "### CALIBRATION: A/A and A/A+30%" in md and "CALIBRATION: the control +" in md
    manifest = json.loads((out / "manifest-A.json").read_text())
    assert "calibration_spin_s" not in manifest
