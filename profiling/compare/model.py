"""The compare page's data for an `ab` results directory, gathered from the analysis objects
the markdown and JSON reports are made of (`trials.experiment.analyse_experiment`), never from
those reports' text.

Every comparison (a treatment arm against the control), endpoint or pass, carries the judgement
the trials' analysis made of it (`trials.power`: interval, Holm's correction over its table,
noise floor); the page only shows it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compile_ahead.profiling.results_format.experiment import load_experiment
from compile_ahead.profiling.results_format.records import TrialRecord, load_records
from compile_ahead.profiling.trials.analysis import Analysis, Tally, block_results
from compile_ahead.profiling.trials.compile_kind import calibration as calibration_report
from compile_ahead.profiling.trials.compile_kind.passes import PassAnalysis, PassKey
from compile_ahead.profiling.trials.experiment import (
    ExperimentAnalysis,
    analyse_experiment,
    completion_status,
)
from compile_ahead.profiling.trials.kinds import KINDS
from compile_ahead.profiling.trials.power import NOT_TESTED, Judgement
from compile_ahead.profiling.trials.stats import Better, PairedSummary

Pair = tuple[float, float]  # (control, treatment) of one complete block


# The page's class of a status (the colour of a flagged change); unflagged ones have none.
STATUS_CSS = {
    "regression": "regression",
    "improvement": "improvement",
    "higher": "changed",  # flagged, on an endpoint with no better direction
    "lower": "changed",
}


def status_css(status: str) -> str:
    return STATUS_CSS.get(status, "")


@dataclass(frozen=True)
class Judged:
    """A comparison and the trials' judgement of it."""

    summary: PairedSummary | None
    judgement: Judgement | None
    unavailable: str | None = None  # why an arm has no value for it (never shown as 0)

    @property
    def status(self) -> str:
        if self.unavailable is not None:
            return f"unavailable: {self.unavailable}"
        return NOT_TESTED if self.judgement is None else self.judgement.status

    @property
    def flagged(self) -> bool:
        return self.judgement is not None and self.judgement.flagged

    @property
    def css(self) -> str:
        return status_css(self.status) if self.flagged else ""


@dataclass(frozen=True)
class EndpointRow:
    key: str
    label: str
    unit: str
    better: Better
    judged: Judged
    pairs: tuple[Pair, ...]


@dataclass(frozen=True)
class PassRow:
    name: str
    manager: str
    judged: Judged
    self_ms: tuple[float | None, float | None]  # mean per trial: control, treatment
    calls: tuple[float | None, float | None]  # mean runs per trial: control, treatment
    share: float | None  # the treatment's mean self time over its mean compile wall
    pairs: tuple[Pair, ...]

    @property
    def calls_delta(self) -> float | None:
        a, b = self.calls
        return None if a is None or b is None else b - a


@dataclass(frozen=True)
class OneArmPass:
    name: str
    manager: str
    arm: str
    mean_ms: float | None
    calls: float | None


@dataclass
class Comparison:
    treatment: str
    is_aa: bool  # the treatment is the control run again (an A/A arm, `ab compile --aa`)
    calibration: str | None  # what the arm adds, when it is a calibration arm
    endpoints: list[EndpointRow]
    passes: list[PassRow] | None  # None: the experiment did not profile passes
    one_arm_only: list[OneArmPass] = field(default_factory=list)


@dataclass(frozen=True)
class ArmView:
    name: str
    label: str
    facts: dict[str, str]  # what the arm is: spec, OpenVINO build(s), interpreter, config
    trial_command: str
    measured: int  # measured trials that completed
    failed: int
    first_error: str | None


@dataclass(frozen=True)
class TrialView:
    index: int
    block: int
    arm: str
    warmup: bool
    wall_s: float
    error: str | None
    trace: str | None  # link id of its trace (a key of ExperimentPage.traces)


@dataclass
class Design:
    kind: str  # compile | schedule
    control: str
    pairs: int
    warmup: int
    order: str
    blocks: list[list[str]]
    position_balanced: bool
    carryover_balanced: bool
    context: dict[str, str]
    fingerprint: dict | None  # the machine's, where the experiment recorded one
    rerun: str | None  # the command that reruns the experiment, where it was recorded
    pooled_from: list[str]


@dataclass(frozen=True)
class CalibrationView:
    """An `ab calibrate` experiment: its label, and per endpoint (calibration.summary's rows)
    the noise, the A/A outcome and the spin's effect against the expected one."""

    delta_pct: float
    arm: str
    label: str
    rows: list[dict]


@dataclass
class ExperimentPage:
    title: str
    directory: Path
    status: str | None  # set for a partial experiment
    notices: list[str]
    design: Design
    arms: list[ArmView]
    comparisons: list[Comparison]
    trials: list[TrialView]
    traces: dict[str, Path]  # link id -> trace file
    counts: list[Tally]  # count-style rows (boundaries ready, top-1 agreement): no test
    aa_arms: tuple[str, ...]  # the arms `ab compile --aa` marked as the control run again
    calibration: CalibrationView | None = None
    headline: tuple[str, str] | None = None  # the default endpoint's key and why it is that one


def load(directory: Path) -> ExperimentPage:
    """The page's data for an `ab` results directory (experiment.json + trials.jsonl)."""
    exp = load_experiment(directory, KINDS)
    skipped: list[str] = []  # cut-off lines of the trial log
    records = load_records(directory, warn=skipped.append)
    status = completion_status(exp, records)
    done = analyse_experiment(exp, records, KINDS, status)
    return from_analysis(exp, records, done, directory, run_dirs(exp, directory), skipped)


def from_analysis(
    exp: dict,
    records: list[TrialRecord],
    done: ExperimentAnalysis,
    directory: Path,
    dirs: Sequence[Path],
    notes: Sequence[str] = (),
    link_prefix: str = "",
) -> ExperimentPage:
    """The page's data from an experiment's analysis: ``directory`` is what the page is of,
    ``dirs`` where its trials' files may be, ``notes`` shown first, ``link_prefix`` before
    every trace link id (a page of many experiments keeps them apart)."""
    comparisons = [compare_arm(done, records, t) for t in done.analysis.treatments]
    trials, traces = trial_views(records, dirs, link_prefix)
    return ExperimentPage(
        title=done.title,
        directory=directory,
        status=done.context.get("status"),
        notices=[*notes, *notices(done, records)],
        design=design(exp, done),
        arms=arm_views(exp, done, records),
        comparisons=comparisons,
        trials=trials,
        traces=traces,
        counts=list(done.analysis.tallies),
        aa_arms=done.analysis.aa_arms,
        calibration=calibration_view(done),
        headline=(
            None
            if done.analysis.headline is None
            else (done.analysis.headline, done.analysis.headline_rule)
        ),
    )


def trial_views(
    records: Sequence[TrialRecord], dirs: Sequence[Path], link_prefix: str = ""
) -> tuple[list[TrialView], dict[str, Path]]:
    """The trials, each linked to its trace where one is found; link id -> trace file."""
    traces: dict[str, Path] = {}
    trials = []
    for r in records:
        trace = trial_trace(r, dirs)
        link = None
        if trace is not None:  # pooled runs may hold traces of one name: then numbered
            known = traces.get(link_prefix + trace.name, trace) == trace
            link = link_prefix + (trace.name if known else f"{r.index}-{trace.name}")
            traces[link] = trace
        trials.append(TrialView(r.index, r.block, r.arm, r.warmup, r.wall_s, r.error, link))
    return trials, traces


def calibration_view(done: ExperimentAnalysis) -> CalibrationView | None:
    cal = done.calibration
    if not cal:
        return None
    label = done.context.get("CALIBRATION") or (
        f"arm {cal['arm']} is the control {cal['control']} plus a CPU spin of "
        f"{cal['delta_pct']:g}% of its compile CPU time; not a real change"
    )
    rows = calibration_report.summary(done.analysis, cal)
    return CalibrationView(float(cal["delta_pct"]), str(cal["arm"]), label, rows)


def run_dirs(exp: dict, directory: Path) -> list[Path]:
    """Where the experiment's files are: its directory, and those of the runs pooled into it
    (a pooled directory holds only experiment.json and trials.jsonl)."""
    return [directory, *(Path(p) for p in exp.get("pooled_from") or [])]


def find_file(name: str, dirs: Sequence[Path]) -> Path | None:
    return next((d / name for d in dirs if (d / name).is_file()), None)


def trial_trace(record: TrialRecord, dirs: Sequence[Path]) -> Path | None:
    """A trial's Perfetto trace, where its command wrote one beside its result: RESULT.pftrace
    or RESULT.json.pftrace (e.g. `--trace {out}.pftrace` in an `ab schedule --command`)."""
    name = Path(record.result_path).name
    for candidate in (Path(name).with_suffix(".pftrace").name, name + ".pftrace"):
        if (found := find_file(candidate, dirs)) is not None:
            return found
    return None


def _pairs(analysis: Analysis, key: str, treatment: str) -> tuple[Pair, ...]:
    values = analysis.values[key]
    return tuple(
        (a, b)
        for a, b in zip(values[analysis.control], values[treatment], strict=True)
        if a is not None and b is not None
    )


def compare_arm(
    done: ExperimentAnalysis, records: Sequence[TrialRecord], treatment: str
) -> Comparison:
    analysis = done.analysis
    endpoints = []
    for ep in analysis.endpoints:
        missing = analysis.unavailable.get(ep.key, {})
        judged = Judged(
            analysis.comparisons[ep.key][treatment],
            analysis.judgements.get(ep.key, {}).get(treatment),
            missing.get(treatment) or missing.get(analysis.control),
        )
        pairs = _pairs(analysis, ep.key, treatment)
        endpoints.append(EndpointRow(ep.key, ep.label, ep.unit, ep.better, judged, pairs))
    cal = done.calibration
    calibration = (
        f"CALIBRATION: the control + a spin of {cal['delta_pct']:g}% of its compile CPU time"
        if cal and cal.get("arm") == treatment
        else None
    )
    comparison = Comparison(treatment, treatment in analysis.aa_arms, calibration, endpoints, None)
    if done.passes is not None:
        wall_s = _mean(analysis.values.get("compile_total", {}).get(treatment, []))
        comparison.passes, comparison.one_arm_only = pass_rows(
            done.passes, records, treatment, wall_s
        )
    return comparison


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def pass_calls(
    passes: PassAnalysis, records: Sequence[TrialRecord]
) -> dict[str, dict[PassKey, float | None]]:
    """arm -> pass -> mean runs per measured trial (trials that recorded run counts)."""
    per_block = block_results(records, passes.analysis.plan)
    out: dict[str, dict[PassKey, float | None]] = {}
    for arm, results in per_block.items():
        runs = [r["pass_runs"] for r in results if r and isinstance(r.get("pass_runs"), dict)]
        out[arm] = {
            key: _mean([float(run.get(key.manager, {}).get(key.name, 0)) for run in runs])
            for key in passes.passes.values()
        }
    return out


def pass_rows(
    passes: PassAnalysis,
    records: Sequence[TrialRecord],
    treatment: str,
    wall_s: float | None,
) -> tuple[list[PassRow], list[OneArmPass]]:
    """The treatment's passes against the control's; ``wall_s``: the treatment's mean compile
    wall, for each pass's share of it."""
    analysis = passes.analysis
    control = analysis.control
    calls = pass_calls(passes, records)
    comp = next(c for c in passes.comparisons if c.treatment == treatment)
    rows = []
    for ranked in comp.ranked:
        key = ranked.key
        mean_t = passes.mean_ms(key, treatment)
        rows.append(
            PassRow(
                key.name,
                key.manager,
                Judged(ranked.summary, passes.judgement(key, treatment)),
                (passes.mean_ms(key, control), mean_t),
                (calls[control].get(key), calls[treatment].get(key)),
                None if mean_t is None or not wall_s else mean_t / (wall_s * 1e3),
                _pairs(analysis, key.key, treatment),
            )
        )
    only = [
        OneArmPass(k.name, k.manager, arm, passes.mean_ms(k, arm), calls[arm].get(k))
        for arm, keys in comp.one_arm_only.items()
        for k in keys
    ]
    return rows, only


def design(exp: dict, done: ExperimentAnalysis) -> Design:
    plan = done.analysis.plan
    described = plan.describe()
    fingerprint = exp.get("fingerprint")
    return Design(
        kind=exp["kind"],
        control=plan.arms[0],
        pairs=len(plan.blocks),
        warmup=plan.warmup_per_arm,
        order=described["kind"],
        blocks=described["blocks"],
        position_balanced=described["position_balanced"],
        carryover_balanced=described["carryover_balanced"],
        context=dict(done.context),
        fingerprint=fingerprint if isinstance(fingerprint, dict) else None,
        rerun=rerun_command(exp.get("invocation")),
        pooled_from=[str(p) for p in exp.get("pooled_from") or []],
    )


def rerun_command(invocation: object) -> str | None:
    """The recorded command line, run from where it ran, without its --out (the command then
    writes a new directory of its own)."""
    if not isinstance(invocation, dict) or not isinstance(invocation.get("argv"), list):
        return None
    argv = [str(a) for a in invocation["argv"]]
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            kept.append(arg)
    cwd = invocation.get("cwd")
    command = shlex.join(kept)
    return f"cd {shlex.quote(str(cwd))} && {command}" if isinstance(cwd, str) else command


def arm_views(exp: dict, done: ExperimentAnalysis, records: Sequence[TrialRecord]) -> list[ArmView]:
    views = []
    for arm, described in zip(done.arms, exp["arms"], strict=True):
        measured = [r for r in records if r.arm == arm.name and not r.warmup]
        failed = [r for r in records if r.arm == arm.name and r.error is not None]
        builds = sorted(
            {
                str(r.result["openvino_version"])
                for r in measured
                if r.result and "openvino_version" in r.result
            }
        )
        facts = {
            k: str(described[k])
            for k in ("spec", "schedule", "openvino", "python", "library_path")
            if described.get(k) is not None
        }
        if builds:
            facts["OpenVINO build (trials)"] = ", ".join(builds)
        if isinstance(described.get("config"), dict):
            facts["config"] = ", ".join(f"{k}={v}" for k, v in described["config"].items())
        views.append(
            ArmView(
                arm.name,
                done.labels.get(arm.name, arm.name),
                facts,
                shlex.join(arm.command),
                sum(1 for r in measured if r.error is None),
                len(failed),
                failed[0].error if failed else None,
            )
        )
    return views


def notices(done: ExperimentAnalysis, records: Sequence[TrialRecord]) -> list[str]:
    """What a reader must know before reading a number: failed trials, arms with nothing
    measured, comparisons without a complete pair."""
    out = [
        f"trial {r.index} (arm {r.arm}, {'warm-up' if r.warmup else f'block {r.block}'}) "
        f"failed: {r.error}"
        for r in records
        if r.error is not None
    ]
    plan = done.analysis.plan
    for arm in plan.arms:
        if not any(r.arm == arm and not r.warmup and r.error is None for r in records):
            out.append(f"arm {arm}: no measured trial completed, so it has no values")
    for t in done.analysis.treatments:
        if all(s is None for c in done.analysis.comparisons.values() for s in [c[t]]):
            out.append(f"{t} vs {plan.arms[0]}: no complete pair, nothing to compare")
    return out
