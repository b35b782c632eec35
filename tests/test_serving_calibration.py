"""The simulator's cost model fitted from engine reports (runtime.serving.calibration): runs
simulated under a known cost model must give that model back, since the fit sees only what
the engine recorded (its steps, prefills, compiles and switches), never the model."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.serving.buckets import Bucket, Grid
from compile_ahead.runtime.serving.calibration import fit_cost_model
from compile_ahead.runtime.serving.engine import ServingEngine, replay
from compile_ahead.runtime.serving.policies import make_policy
from compile_ahead.runtime.serving.simulator import CostModel, Linear, SimExecutor
from compile_ahead.runtime.serving.workloads import Arrivals, Lengths, generate_requests

GRID = Grid.of((1, 2, 4), (64, 128, 256))
TRUTH = CostModel(
    compile_s=Linear(base=0.8, per_batch=0.05, per_capacity=0.002),
    step_s=Linear(base=0.01, per_batch=0.002, per_slot=1e-5),
    bucket_bytes=Linear(base=2**30),
    prefill_base_s=0.004,
    prefill_per_token_s=0.0015,
    prefill_compile_s=1.7,
    activate_s=0.003,
    copy_s_per_byte=2e-9,
    kv_bytes_per_slot=36_864,
    background_step_factor=1.6,
    background_compile_factor=1.3,
)
FIXED = {"bucket_bytes": 2**30, "kv_bytes_per_slot": 36_864, "kv": "copy"}


def reports(model: CostModel, seed: int = 0) -> list[dict]:
    trace = generate_requests(
        seed, 60, Arrivals("poisson", 1.5), Lengths("uniform", 4, 60), Lengths("uniform", 8, 120),
        1000, max_slots=256,
    )  # fmt: skip
    out = []
    for policy in ("ahead", "on-demand", "up-front"):
        engine = ServingEngine(GRID, make_policy(policy), SimExecutor(model))
        replay(engine, trace)
        out.append(engine.report())
    return out


@pytest.fixture(scope="module")
def fitted() -> CostModel:
    return CostModel.from_json(fit_cost_model(reports(TRUTH), FIXED))


def test_the_fit_gives_back_the_prefill_line_switch_line_and_compile_extras(fitted):
    assert fitted.prefill_base_s == pytest.approx(TRUTH.prefill_base_s, rel=1e-6)
    assert fitted.prefill_per_token_s == pytest.approx(TRUTH.prefill_per_token_s, rel=1e-6)
    assert fitted.activate_s == pytest.approx(TRUTH.activate_s, rel=1e-6)
    assert fitted.copy_s_per_byte == pytest.approx(TRUTH.copy_s_per_byte, rel=1e-6)
    assert fitted.prefill_compile_s == pytest.approx(TRUTH.prefill_compile_s, rel=1e-6)
    assert fitted.background_compile_factor == pytest.approx(1.3, rel=1e-6)
    assert fitted.kv == "copy" and fitted.kv_bytes_per_slot == 36_864


def test_the_fit_gives_back_every_buckets_compile_and_step(fitted):
    for bucket in GRID:  # measured or from the plane through the measured ones
        assert fitted.compile_s(bucket) == pytest.approx(TRUTH.compile_s(bucket), rel=1e-6)
        # a step that a background compile's end overlaps is counted beside it: a little off
        assert fitted.step_s(bucket) == pytest.approx(TRUTH.step_s(bucket), rel=0.02)
    assert fitted.step_s(Bucket(8, 512)) == pytest.approx(TRUTH.step_s(Bucket(8, 512)), rel=0.05)
    assert fitted.background_step_factor == pytest.approx(1.6, rel=0.05)


def test_a_model_fitted_on_one_trace_predicts_another(fitted):
    for truth, fit in zip(reports(TRUTH, seed=1), reports(fitted, seed=1), strict=True):
        for metric in ("ttft_s", "tpot_s"):
            for p in ("p50", "p99"):
                want = truth["requests_metrics"][metric][p]
                assert fit["requests_metrics"][metric][p] == pytest.approx(want, rel=0.05)


def test_the_compile_factor_counts_only_the_time_the_device_worked_beside_it():
    """At a sparse rate the engine idles through much of its background compiles, which then
    run at their own pace: their time over their time alone understates the slowdown while
    the device works, and the fit from the busy seconds each compile records gives it back."""
    sparse = generate_requests(
        2, 30, Arrivals("poisson", 0.03), Lengths("uniform", 4, 60), Lengths("uniform", 8, 120),
        1000, max_slots=256,
    )  # fmt: skip
    engine = ServingEngine(GRID, make_policy("ahead"), SimExecutor(TRUTH))
    replay(engine, sparse)
    compiles = sorted(engine.report()["engine"]["compiles"], key=lambda c: c["start_s"])
    background = [c for c in compiles[1:] if c["where"] == "background"]
    assert sum(c["busy_s"] < 0.5 * c["seconds"] for c in background) >= 2  # the trace's point
    ratios = []
    for c in background:  # alone for (seconds - busy), slowed by the factor for busy
        alone = TRUTH.compile_s(Bucket(*c["bucket"]))
        assert c["seconds"] - c["busy_s"] + c["busy_s"] / 1.3 == pytest.approx(alone, rel=1e-6)
        ratios.append(c["seconds"] / alone)
    assert statistics.median(ratios) < 1.2  # what the whole compile's time says
    on_demand = ServingEngine(GRID, make_policy("on-demand"), SimExecutor(TRUTH))
    replay(on_demand, sparse)  # compiles alone: the table the factor is fitted against
    fit = fit_cost_model([engine.report(), on_demand.report()], FIXED)
    assert fit["background_compile_factor"] == pytest.approx(1.3, rel=1e-6)


def test_a_compile_slowed_apart_per_activity_is_fitted_apart():
    """A host where a compile runs slower beside a small batch's steps than beside a large
    one's, and slower still beside a prefill: the fit gives each activity's factor back from
    the busy seconds each compile records per activity, and predicts another trace."""
    truth = replace(
        TRUTH,
        background_compile_factors={"step:1": 1.5, "step:2": 2.0, "step:4": 1.2, "prefill": 2.4},
    )
    runs = reports(truth)
    fit = fit_cost_model(runs, FIXED)
    for activity in ("step:2", "step:4", "prefill"):  # each beside 15-65% of the busy seconds
        want = truth.background_compile_factors[activity]
        assert fit["background_compile_factors"][activity] == pytest.approx(want, rel=0.05)
    assert "step:1" not in fit["background_compile_factors"]  # 3%: the single factor prices it
    model = CostModel.from_json(fit)
    for want, got in zip(reports(truth, seed=1), reports(model, seed=1), strict=True):
        for p in ("p50", "p99"):
            measured = want["requests_metrics"]["ttft_s"][p]
            assert got["requests_metrics"]["ttft_s"][p] == pytest.approx(measured, rel=0.05)


def test_reports_without_a_decode_step_are_refused_in_one_line():
    engine = ServingEngine(GRID, make_policy("up-front"), SimExecutor(TRUTH))
    replay(engine, [])
    with pytest.raises(CompileAheadError, match="no decode step was recorded"):
        fit_cost_model([engine.report()], FIXED)
