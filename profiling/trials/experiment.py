"""An `ab` experiment on disk: experiment.json (what was planned) beside trials.jsonl (what
ran); running it, and turning both into the table, JSON and plot (also for partial runs)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from compile_ahead.atomic import write_bytes_atomic
from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials import calibration as calibration_report
from compile_ahead.profiling.trials import compile_ab, pass_ab, schedule_ab
from compile_ahead.profiling.trials.analysis import Analysis, analyse
from compile_ahead.profiling.trials.design import Plan, make_plan
from compile_ahead.profiling.trials.pass_ab import PassAnalysis
from compile_ahead.profiling.trials.record_values import loads_finite
from compile_ahead.profiling.trials.runner import (
    TRIALS_LOG,
    Arm,
    TrialFailed,
    TrialRecord,
    run_plan,
)


def _progress(quiet: bool):
    def show(record: TrialRecord, total: int) -> None:
        if quiet:
            return
        where = "warm-up" if record.warmup else f"block {record.block}"
        status = "ok" if record.error is None else f"FAILED: {record.error}"
        print(
            f"[{record.index + 1}/{total}] {record.arm} ({where}): {record.wall_s:.1f} s {status}",
            file=sys.stderr,
            flush=True,
        )

    return show


EXPERIMENT = "experiment.json"
# Keys every experiment.json holds, and those of each kind, with their JSON types.
_EXPERIMENT_KEYS: dict[str, type] = {"arms": list, "pairs": int, "warmup": int, "ladder": list}
_KIND_KEYS: dict[str, dict[str, type]] = {
    "compile": {"pass_profile": bool, "counters": bool, "context": dict, "labels": dict},
    "schedule": {"prompt_len": int, "decode_tokens": int},
}


def load_experiment(directory: Path) -> dict:
    """experiment.json of a results directory, checked enough to re-analyse it, or one line
    that says what is wrong with it."""
    path = directory / EXPERIMENT
    if not path.exists():
        raise CompileAheadError(f"{directory}: no {EXPERIMENT} (not an `ab` results dir)")
    try:
        exp = loads_finite(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CompileAheadError(f"{path}: unreadable ({err})") from None
    if not isinstance(exp, dict) or exp.get("kind") not in _KIND_KEYS:
        raise CompileAheadError(f"{path}: not an `ab` experiment (kind compile or schedule)")
    for key, kind in {**_EXPERIMENT_KEYS, **_KIND_KEYS[exp["kind"]]}.items():
        if not isinstance(exp.get(key), kind):
            raise CompileAheadError(f"{path}: {key} is missing or not a JSON {kind.__name__}")
    if not all(isinstance(a, dict) and isinstance(a.get("name"), str) for a in exp["arms"]):
        raise CompileAheadError(f"{path}: every arm needs a name")
    return exp


def save_experiment(out: Path, exp: dict, records: list[TrialRecord]) -> None:
    """experiment.json and the trial log, as a run leaves them (so `ab report` reads them)."""
    for path, text in (
        (out / EXPERIMENT, json.dumps(exp, indent=1, allow_nan=False)),
        (
            out / TRIALS_LOG,
            "".join(json.dumps(r.to_dict(), allow_nan=False) + "\n" for r in records),
        ),
    ):
        write_bytes_atomic(path, text.encode())


def _finish(
    no_plot: bool,
    out: Path,
    stem: str,
    analysis: Analysis,
    title: str,
    context: dict[str, str],
    arms: list[Arm],
    records: list[TrialRecord],
    labels: dict[str, str] | None = None,
    echo: bool = True,
    passes: PassAnalysis | None = None,
    calibration: dict | None = None,
) -> Path:
    from compile_ahead.profiling.trials.report import markdown, write_reports

    sections = [] if passes is None else [pass_ab.markdown(passes, labels)]
    extra = {} if passes is None else {"passes": pass_ab.to_json(passes)}
    if calibration:
        rows = calibration_report.summary(analysis, calibration)
        sections.insert(0, calibration_report.markdown(rows, calibration))
        extra["calibration"] = {**calibration, "endpoints": rows}
    md, js = write_reports(
        out, stem, analysis, title, context, arms, records, labels, sections, extra
    )
    if echo:
        print("\n".join([markdown(analysis, title, context, labels), *sections]))
    print(f"written: {md}, {js}", file=sys.stderr)
    if not no_plot:
        from compile_ahead.profiling.trials.plot import plot_differences

        png = plot_differences(analysis, out / f"{stem}.png", title)
        print(f"written: {png}", file=sys.stderr)
        if passes is not None and passes.passes:
            png = pass_ab.plot_passes(passes, out / f"{stem}_passes.png", title)
            print(f"written: {png}", file=sys.stderr)
    return md


def _arms_from(exp: dict) -> list[Arm]:
    fixed = ("name", "command", "env", "unset_env")
    return [
        Arm(
            d["name"],
            tuple(d["command"]),
            dict(d.get("env", {})),
            tuple(d.get("unset_env", ())),
            info={k: v for k, v in d.items() if k not in fixed},
        )
        for d in exp["arms"]
    ]


@dataclasses.dataclass
class ExperimentAnalysis:
    """Everything a report of an experiment is made of: the markdown, the JSON, the plots and
    the compare page all read these objects."""

    analysis: Analysis
    passes: PassAnalysis | None  # per-pass endpoints (ab compile --pass-profile)
    arms: list[Arm]
    context: dict[str, str]
    labels: dict[str, str]
    stem: str  # file names of the report: STEM.md, STEM.json
    title: str
    calibration: dict | None = None  # experiment.json's "calibration" (`ab calibrate`)


def analyse_experiment(
    exp: dict, records: list[TrialRecord], status: str | None = None
) -> ExperimentAnalysis:
    """An experiment's analysis from its saved description and trial records; ``status``
    marks a partial one (its files are *_partial, never the final report)."""
    names = [a["name"] for a in exp["arms"]]
    plan = make_plan(names, exp["pairs"], exp["warmup"], exp.get("first_block", 0))
    arms = _arms_from(exp)
    ladder = tuple(exp["ladder"])
    passes = None
    calibration = None
    if exp["kind"] == "compile":
        measure = compile_ab.MeasureOptions.from_experiment(exp)
        aa = compile_ab.aa_arms(exp["arms"])
        endpoints = compile_ab.compile_endpoints(
            ladder, exp["pass_profile"], exp["counters"], measure
        )
        analysis = analyse(records, plan, endpoints, aa)
        analysis.headline, analysis.headline_rule = compile_ab.default_endpoint(analysis)
        if exp["pass_profile"]:
            passes = pass_ab.analyse_passes(records, plan, measure.statistic, aa)
        context = dict(exp["context"])
        labels = dict(exp["labels"])
        stem, title = "compile_ab", f"Compile A/B: {' vs '.join(plan.arms)}"
        calibration = exp.get("calibration")
        if calibration:
            title = f"CALIBRATION (not a real change) {title}"
    else:
        from compile_ahead.profiling.trials import baselines

        analysis = analyse(records, plan, schedule_ab.schedule_endpoints(ladder))
        schedule_ab.add_tallies(analysis, records)
        context = {
            "model": schedule_ab.model_label(records),
            "devices": schedule_ab.devices(records),
            "workload": f"prompt {exp['prompt_len']} tokens, {exp['decode_tokens']} decoded "
            f"tokens, ladder {','.join(map(str, ladder))}",
            "control": plan.arms[0],
            **baselines.describe(plan.arms),
        }
        labels = schedule_ab.arm_labels(records)
        stem, title = "schedule_ab", f"Schedule A/B: {' vs '.join(plan.arms)}"
    if exp.get("pooled_from"):
        runs = len(exp["pooled_from"])
        context["pooled"] = f"{runs} run{'s' * (runs != 1)}: {', '.join(exp['pooled_from'])}"
    if exp.get("pooled_repeats"):
        context["repeated trials, pooled once"] = "; ".join(exp["pooled_repeats"])
    if exp.get("pooled_interpreters"):
        context["run by"] = ", ".join(exp["pooled_interpreters"])
    if status is not None:
        context = {"status": status, **context}
        stem, title = f"{stem}_partial", f"{title} (PARTIAL)"
    return ExperimentAnalysis(analysis, passes, arms, context, labels, stem, title, calibration)


def completion_status(exp: dict, records: list[TrialRecord]) -> str | None:
    """None when every planned trial completed, else what a partial report says it is."""
    planned = len(make_plan([a["name"] for a in exp["arms"]], exp["pairs"], exp["warmup"]).slots)
    done = sum(1 for r in records if r.error is None)
    return None if done == planned else f"PARTIAL: {done} of {planned} trials completed"


def report_experiment(
    out: Path, exp: dict, records: list[TrialRecord], *, no_plot: bool, status: str | None = None
) -> Path:
    """Tables, JSON and plot of an experiment from its saved description and trial records;
    ``status`` marks a partial analysis (written as *_partial, never as the final report)."""
    a = analyse_experiment(exp, records, status)
    return write_analysis(out, a, records, no_plot=no_plot, echo=status is None)


def write_analysis(
    out: Path, a: ExperimentAnalysis, records: list[TrialRecord], *, no_plot: bool, echo: bool
) -> Path:
    """The table, JSON and plot of an analysis already made (``echo``: print the table)."""
    return _finish(
        no_plot, out, a.stem, a.analysis, a.title, a.context, a.arms, records, a.labels,
        echo, a.passes, a.calibration,
    )  # fmt: skip


def run_experiment(
    plan: Plan, arms: list[Arm], out: Path, exp: dict, timeout_s: float | None, quiet: bool
) -> list[TrialRecord]:
    """Save the experiment, run the plan; on a failed trial, analyse what completed into a
    *_partial report beside trials.jsonl, then fail with one line."""
    write_bytes_atomic(out / EXPERIMENT, json.dumps(exp, indent=1, allow_nan=False).encode())
    try:
        return run_plan(plan, arms, out, timeout_s=timeout_s, progress=_progress(quiet))
    except TrialFailed as err:
        completed = sum(1 for r in err.records if r.error is None and not r.warmup)
        partial = ""
        if completed:
            status = f"PARTIAL: stopped by a failed trial ({err.records[-1].error})"
            md = report_experiment(out, exp, err.records, no_plot=True, status=status)
            partial = f"; partial report {md}"
        raise CompileAheadError(
            f"{err} ({completed} measured trial(s) done{partial}; last stderr: "
            f"{(err.records[-1].stderr_tail.splitlines() or ['-'])[-1]})"
        ) from err
