"""The compare page's data for an `ab` results directory, gathered from the analysis objects
the markdown and JSON reports are made of (`trials.experiment.analyse_experiment`), never from
those reports' text.

Every comparison (a treatment arm against the control) is judged under one rule
(`floor.judge`): its paired-t interval excludes 0 and its mean moved at least the noise floor.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compile_ahead.profiling.compare.floor import (
    NoiseFloor,
    Status,
    judge,
    noise_floor,
    typical_relative_sd,
)
from compile_ahead.profiling.trials.analysis import Analysis, Tally, block_results
from compile_ahead.profiling.trials.experiment import (
    ExperimentAnalysis,
    analyse_experiment,
    completion_status,
    load_experiment,
)
from compile_ahead.profiling.trials.pass_ab import PassAnalysis, PassKey
from compile_ahead.profiling.trials.runner import TrialRecord, load_records
from compile_ahead.profiling.trials.stats import Better, PairedSummary

Pair = tuple[float, float]  # (control, treatment) of one complete block


@dataclass(frozen=True)
class Judged:
    summary: PairedSummary | None
    floor: NoiseFloor
    status: Status


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
    is_aa: bool  # the treatment is the control run again (an A/A arm)
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


def load(directory: Path) -> ExperimentPage:
    """The page's data for an `ab` results directory (experiment.json + trials.jsonl)."""
    exp = load_experiment(directory)
    skipped: list[str] = []  # cut-off lines of the trial log
    records = load_records(directory, warn=skipped.append)
    status = completion_status(exp, records)
    done = analyse_experiment(exp, records, status)
    dirs = run_dirs(exp, directory)
    aa = aa_arms(exp, dirs)
    comparisons = [compare_arm(done, records, t, aa) for t in done.analysis.treatments]
    traces: dict[str, Path] = {}
    trials = []
    for r in records:
        trace = trial_trace(r, dirs)
        link = None
        if trace is not None:  # pooled runs may hold traces of one name: then numbered
            link = (
                trace.name if traces.get(trace.name, trace) == trace else f"{r.index}-{trace.name}"
            )
            traces[link] = trace
        trials.append(
            TrialView(
                r.index,
                r.block,
                r.arm,
                r.warmup,
                r.wall_s,
                r.error,
                link,
            )
        )
    return ExperimentPage(
        title=done.title,
        directory=directory,
        status=status,
        notices=skipped + notices(done, records),
        design=design(exp, done),
        arms=arm_views(exp, done, records),
        comparisons=comparisons,
        trials=trials,
        traces=traces,
        counts=list(done.analysis.tallies),
    )


def run_dirs(exp: dict, directory: Path) -> list[Path]:
    """Where the experiment's files are: its directory, and those of the runs pooled into it
    (a pooled directory holds only experiment.json and trials.jsonl)."""
    return [directory, *(Path(p) for p in exp.get("pooled_from") or [])]


def find_file(name: str, dirs: Sequence[Path]) -> Path | None:
    return next((d / name for d in dirs if (d / name).is_file()), None)


def aa_arms(exp: dict, dirs: Sequence[Path]) -> list[str]:
    """Treatment arms that run exactly the control's trial: the same description but the
    name, with the run directory's files their commands name (each arm's manifest) equal."""
    arms = exp["arms"]
    control = _identity(arms[0], dirs)
    return [a["name"] for a in arms[1:] if _identity(a, dirs) == control]


def _identity(arm: dict, dirs: Sequence[Path]) -> dict:
    def part(text: str) -> str:
        local = find_file(Path(text).name, dirs) if "/" in text else None
        if local is not None:
            try:
                return local.read_text()
            except (OSError, UnicodeDecodeError):
                return text
        return text

    described = {k: v for k, v in arm.items() if k not in ("name", "command")}
    return {**described, "command": [part(str(p)) for p in arm.get("command", [])]}


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


def _judged(
    summary: PairedSummary | None,
    noise: PairedSummary | None,
    source: str,
    relative_sd: float = 0.0,
) -> Judged:
    """``summary`` judged against the floor from ``noise`` (an A/A comparison of the same
    endpoint), or from its own differences when there is none; the noise's spread held at
    least at ``relative_sd`` times the control mean."""
    if summary is None:
        return Judged(None, noise_floor((), 0, source), Status.NOT_TESTED)
    basis = noise if noise is not None else summary
    floor = noise_floor(
        basis.diffs,
        summary.n,
        source if noise is not None else "own pairs",
        relative_sd * abs(summary.control_mean),
    )
    return Judged(summary, floor, judge(summary, floor))


def compare_arm(
    done: ExperimentAnalysis, records: Sequence[TrialRecord], treatment: str, aa: list[str]
) -> Comparison:
    analysis = done.analysis
    noise_arm = next((a for a in aa if a != treatment), None)
    source = f"A/A arm {noise_arm}" if noise_arm else "own pairs"
    endpoints = []
    for ep in analysis.endpoints:
        comps = analysis.comparisons[ep.key]
        noise = comps.get(noise_arm) if noise_arm else None
        judged = _judged(comps[treatment], noise, source)
        endpoints.append(
            EndpointRow(
                ep.key, ep.label, ep.unit, ep.better, judged, _pairs(analysis, ep.key, treatment)
            )
        )
    comparison = Comparison(treatment, treatment in aa, endpoints, None)
    if done.passes is not None:
        wall_s = _mean(analysis.values.get("compile_total", {}).get(treatment, []))
        comparison.passes, comparison.one_arm_only = pass_rows(
            done.passes, records, treatment, noise_arm, wall_s
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
    noise_arm: str | None,
    wall_s: float | None,
) -> tuple[list[PassRow], list[OneArmPass]]:
    """The treatment's passes against the control's; ``wall_s``: the treatment's mean compile
    wall, for each pass's share of it."""
    analysis = passes.analysis
    control = analysis.control
    calls = pass_calls(passes, records)
    comp = next(c for c in passes.comparisons if c.treatment == treatment)
    source = f"A/A arm {noise_arm}" if noise_arm else "own pairs"
    noise = {
        r.key: (analysis.comparisons[r.key.key].get(noise_arm) if noise_arm else None) or r.summary
        for r in comp.ranked
    }
    typical = typical_relative_sd([(n.diffs, n.control_mean) for n in noise.values()])
    rows = []
    for ranked in comp.ranked:
        key = ranked.key
        aa = noise[key] if noise_arm else None
        mean_t = passes.mean_ms(key, treatment)
        rows.append(
            PassRow(
                key.name,
                key.manager,
                _judged(ranked.summary, aa, source, typical),
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
