"""Running a schedule experiment (`ab schedule`, `ab baselines`): its arms' trial commands, the
design, the trials and the report, from a configuration the command settled."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from compile_ahead.output.checks import mark_output_dir
from compile_ahead.profiling.trials.design import make_plan
from compile_ahead.profiling.trials.experiment import report_experiment, run_experiment
from compile_ahead.profiling.trials.run_options import DesignOptions
from compile_ahead.profiling.trials.schedule_kind import arms as schedule_arms
from compile_ahead.profiling.trials.schedule_kind import baselines
from compile_ahead.profiling.trials.schedule_kind.kind import SCHEDULE
from compile_ahead.runtime.ladder.settings.capacities import Ladder

_KINDS = {"schedule": SCHEDULE}  # what the engine needs to run and report a schedule experiment


@dataclass(frozen=True)
class ScheduleTrials:
    """What each trial of a schedule experiment runs, checked once by the command."""

    schedules: tuple[str, ...]  # the arms; the first is the control
    model: str
    ladder: Ladder
    prompt_len: int
    decode_tokens: int  # every trial decodes them all, below the top rung
    template: str | None  # a --command template instead of `compile-ahead run`
    run_flags: tuple[str, ...]  # each `compile-ahead run` trial's settled run flags
    model_flags: tuple[str, ...]  # which weights (e.g. --synthetic-dtype), for every arm
    batch: int = 1  # sequences per trial
    prompt_lens: tuple[int, ...] = ()  # B > 1: each sequence's prompt length (batch.py)

    @property
    def upstream(self) -> tuple[str, ...]:
        """The arms that run OpenVINO's own pipelines rather than ours."""
        return tuple(a for a in self.schedules if a in baselines.BASELINES)


def run_schedule_experiment(trials: ScheduleTrials, design: DesignOptions, out: Path) -> int:
    """Check the upstream arms can run, then run every trial into ``out`` and report."""
    if trials.upstream:
        baselines.require_upstream()
    plan = make_plan(trials.schedules, design.pairs, design.warmup, design.first_block)
    arms = schedule_arms.make_arms(
        trials.schedules, trials.model, trials.ladder, trials.prompt_len, trials.decode_tokens,
        trials.template, trials.run_flags, trials.model_flags, trials.prompt_lens,
    )  # fmt: skip
    mark_output_dir(out)
    exp = {
        "kind": "schedule", "arms": [a.describe() for a in arms], "pairs": design.pairs,
        "warmup": design.warmup, "ladder": list(trials.ladder.rungs), "model": trials.model,
        "prompt_len": trials.prompt_len, "decode_tokens": trials.decode_tokens,
        "invocation": design.invocation, "first_block": design.first_block,
    }  # fmt: skip
    if trials.batch > 1:  # a batch-1 experiment's record is what it always was
        exp |= {"batch": trials.batch, "prompt_lens": list(trials.prompt_lens)}
    records = run_experiment(plan, arms, out, exp, _KINDS, design.timeout_s, design.quiet)
    report_experiment(out, exp, records, _KINDS, no_plot=design.no_plot)
    return 0
