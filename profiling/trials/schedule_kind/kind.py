"""The schedule kind as the trials engine runs it: the keys of its experiment.json, and its
analysis (the run report's endpoints, boundary readiness and top-1 agreement tallies, the
workload and the upstream baselines described in the context)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from compile_ahead.profiling.trials.analysis import analyse
from compile_ahead.profiling.trials.design import Plan
from compile_ahead.profiling.trials.experiment import ExperimentAnalysis
from compile_ahead.profiling.trials.runner import Arm, TrialRecord
from compile_ahead.profiling.trials.schedule_kind import baselines
from compile_ahead.profiling.trials.schedule_kind.endpoints import schedule_endpoints
from compile_ahead.profiling.trials.schedule_kind.labels import arm_labels, devices, model_label
from compile_ahead.profiling.trials.schedule_kind.tallies import add_tallies


class ScheduleKind:
    keys: Mapping[str, type] = MappingProxyType({"prompt_len": int, "decode_tokens": int})

    def analyse(
        self, exp: dict, records: list[TrialRecord], plan: Plan, arms: list[Arm]
    ) -> ExperimentAnalysis:
        ladder = tuple(exp["ladder"])
        batch = exp.get("batch", 1)  # absent: a batch-1 experiment
        analysis = analyse(records, plan, schedule_endpoints(ladder, batch))
        add_tallies(analysis, records)
        context = {
            "model": model_label(records),
            "devices": devices(records),
            "workload": _workload(exp, ladder),
            "control": plan.arms[0],
            **baselines.describe(plan.arms),
        }
        labels = arm_labels(records)
        title = f"Schedule A/B: {' vs '.join(plan.arms)}"
        return ExperimentAnalysis(self, analysis, None, arms, context, labels, "schedule_ab", title)

    def sections(self, a: ExperimentAnalysis) -> tuple[list[str], dict]:
        return [], {}

    def plots(self, a: ExperimentAnalysis, out: Path) -> list[Path]:
        return []


def _workload(exp: dict, ladder: tuple[int, ...]) -> str:
    """The protocol every trial ran: at B > 1, the batch and each sequence's prompt."""
    rungs = ",".join(map(str, ladder))
    decoded = f"{exp['decode_tokens']} decoded tokens, ladder {rungs}"
    if exp.get("batch", 1) == 1:
        return f"prompt {exp['prompt_len']} tokens, {decoded}"
    lengths = ",".join(map(str, exp.get("prompt_lens") or []))
    return f"batch {exp['batch']}: prompts {lengths} tokens, {decoded} per sequence"


SCHEDULE = ScheduleKind()
