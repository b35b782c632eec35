"""The compile kind as the trials engine runs it: the keys of its experiment.json, its
analysis (per-rung endpoints, the headline endpoint, per-pass endpoints with --pass-profile,
the calibration of `ab calibrate`), its report sections and its per-pass plot."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from compile_ahead.profiling.trials.analysis import analyse
from compile_ahead.profiling.trials.compile_kind import calibration, passes
from compile_ahead.profiling.trials.compile_kind.arms import aa_arms
from compile_ahead.profiling.trials.compile_kind.endpoints import (
    compile_endpoints,
    default_endpoint,
)
from compile_ahead.profiling.trials.compile_kind.exported_rungs import MeasureOptions
from compile_ahead.profiling.trials.design import Plan
from compile_ahead.profiling.trials.experiment import ExperimentAnalysis
from compile_ahead.profiling.trials.runner import Arm, TrialRecord


class CompileKind:
    keys: Mapping[str, type] = MappingProxyType(
        {"pass_profile": bool, "counters": bool, "context": dict, "labels": dict}
    )

    def analyse(
        self, exp: dict, records: list[TrialRecord], plan: Plan, arms: list[Arm]
    ) -> ExperimentAnalysis:
        measure = MeasureOptions.from_experiment(exp)
        aa = aa_arms(exp["arms"])
        endpoints = compile_endpoints(
            tuple(exp["ladder"]), exp["pass_profile"], exp["counters"], measure
        )
        analysis = analyse(records, plan, endpoints, aa)
        analysis.headline, analysis.headline_rule = default_endpoint(analysis)
        per_pass = None
        if exp["pass_profile"]:
            per_pass = passes.analyse_passes(records, plan, measure.statistic, aa)
        title = f"Compile A/B: {' vs '.join(plan.arms)}"
        calibrated = exp.get("calibration")
        if calibrated:
            title = f"CALIBRATION (not a real change) {title}"
        context, labels = dict(exp["context"]), dict(exp["labels"])
        return ExperimentAnalysis(
            self, analysis, per_pass, arms, context, labels, "compile_ab", title, calibrated
        )

    def sections(self, a: ExperimentAnalysis) -> tuple[list[str], dict]:
        sections = [] if a.passes is None else [passes.markdown(a.passes, a.labels)]
        extra = {} if a.passes is None else {"passes": passes.to_json(a.passes)}
        if a.calibration:
            rows = calibration.summary(a.analysis, a.calibration)
            sections.insert(0, calibration.markdown(rows, a.calibration))
            extra["calibration"] = {**a.calibration, "endpoints": rows}
        return sections, extra

    def plots(self, a: ExperimentAnalysis, out: Path) -> list[Path]:
        if a.passes is None or not a.passes.passes:
            return []
        return [passes.plot_passes(a.passes, out / f"{a.stem}_passes.png", a.title)]


COMPILE = CompileKind()
