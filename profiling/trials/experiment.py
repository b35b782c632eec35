"""An `ab` experiment on disk: experiment.json (what was planned) beside trials.jsonl (what
ran); running it, and turning both into the table, JSON and plot (also for partial runs)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.atomic import write_bytes_atomic
from compile_ahead.output.format_version import FORMAT_KEY, stamped
from compile_ahead.profiling.results_format.experiment import EXPERIMENT as EXPERIMENT
from compile_ahead.profiling.results_format.experiment import load_experiment as load_experiment
from compile_ahead.profiling.trials.analysis import Analysis
from compile_ahead.profiling.trials.design import Plan, make_plan
from compile_ahead.profiling.trials.runner import (
    TRIALS_LOG,
    Arm,
    TrialFailed,
    TrialRecord,
    run_plan,
)


def _progress(quiet: bool) -> Callable[[TrialRecord, int], None]:
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


class Kind(Protocol):
    """An experiment kind (`ab compile`, `ab schedule`): what its experiment.json holds beyond
    the common keys, and how its trial records become an analysis and a report. The engine
    names no kind: callers pass the table of kinds (``trials.kinds.KINDS``)."""

    keys: Mapping[str, type]  # this kind's experiment.json keys, with their JSON types

    def analyse(
        self, exp: dict, records: list[TrialRecord], plan: Plan, arms: list[Arm]
    ) -> ExperimentAnalysis:
        """The analysis of a complete or partial run (the engine marks a partial one)."""
        ...

    def sections(self, a: ExperimentAnalysis) -> tuple[list[str], dict]:
        """Markdown sections after the table, and keys added to the JSON report."""
        ...

    def plots(self, a: ExperimentAnalysis, out: Path) -> list[Path]:
        """PNGs beyond the paired differences' (written under ``out``)."""
        ...


def experiment_json(exp: dict) -> str:
    """experiment.json's text: ``exp`` in the current results format (a pooled or rebuilt
    experiment of older runs is written in the current one)."""
    current = stamped({k: v for k, v in exp.items() if k != FORMAT_KEY})
    return json.dumps(current, indent=1, allow_nan=False)


def save_experiment(out: Path, exp: dict, records: list[TrialRecord]) -> None:
    """experiment.json and the trial log, as a run leaves them (so `ab report` reads them)."""
    for path, text in (
        (out / EXPERIMENT, experiment_json(exp)),
        (
            out / TRIALS_LOG,
            "".join(json.dumps(r.to_dict(), allow_nan=False) + "\n" for r in records),
        ),
    ):
        write_bytes_atomic(path, text.encode())


def _finish(
    no_plot: bool, out: Path, a: ExperimentAnalysis, records: list[TrialRecord], echo: bool
) -> Path:
    from compile_ahead.profiling.trials.report import markdown, write_reports

    sections, extra = a.kind.sections(a)
    md, js = write_reports(
        out, a.stem, a.analysis, a.title, a.context, a.arms, records, a.labels, sections, extra
    )
    if echo:
        print("\n".join([markdown(a.analysis, a.title, a.context, a.labels), *sections]))
    print(f"written: {md}, {js}", file=sys.stderr)
    if not no_plot:
        from compile_ahead.profiling.trials.plot import plot_differences

        pngs = [plot_differences(a.analysis, out / f"{a.stem}.png", a.title)]
        for png in pngs + a.kind.plots(a, out):
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

    kind: Kind
    analysis: Analysis
    passes: Any  # the compile kind's per-pass analysis (ab compile --pass-profile), or None
    arms: list[Arm]
    context: dict[str, str]
    labels: dict[str, str]
    stem: str  # file names of the report: STEM.md, STEM.json
    title: str
    calibration: dict | None = None  # experiment.json's "calibration" (`ab calibrate`)


def analyse_experiment(
    exp: dict, records: list[TrialRecord], kinds: Mapping[str, Kind], status: str | None = None
) -> ExperimentAnalysis:
    """An experiment's analysis from its saved description and trial records, by its kind;
    ``status`` marks a partial one (its files are *_partial, never the final report)."""
    names = [a["name"] for a in exp["arms"]]
    plan = make_plan(names, exp["pairs"], exp["warmup"], exp.get("first_block", 0))
    a = kinds[exp["kind"]].analyse(exp, records, plan, _arms_from(exp))
    if exp.get("pooled_from"):
        runs = len(exp["pooled_from"])
        a.context["pooled"] = f"{runs} run{'s' * (runs != 1)}: {', '.join(exp['pooled_from'])}"
    if exp.get("pooled_repeats"):
        a.context["repeated trials, pooled once"] = "; ".join(exp["pooled_repeats"])
    if exp.get("pooled_interpreters"):
        a.context["run by"] = ", ".join(exp["pooled_interpreters"])
    if status is not None:
        a.context = {"status": status, **a.context}
        a.stem, a.title = f"{a.stem}_partial", f"{a.title} (PARTIAL)"
    return a


def completion_status(exp: dict, records: list[TrialRecord]) -> str | None:
    """None when every planned trial completed, else what a partial report says it is."""
    planned = len(make_plan([a["name"] for a in exp["arms"]], exp["pairs"], exp["warmup"]).slots)
    done = sum(1 for r in records if r.error is None)
    return None if done == planned else f"PARTIAL: {done} of {planned} trials completed"


def report_experiment(
    out: Path,
    exp: dict,
    records: list[TrialRecord],
    kinds: Mapping[str, Kind],
    *,
    no_plot: bool,
    status: str | None = None,
) -> Path:
    """Tables, JSON and plot of an experiment from its saved description and trial records;
    ``status`` marks a partial analysis (written as *_partial, never as the final report)."""
    a = analyse_experiment(exp, records, kinds, status)
    return write_analysis(out, a, records, no_plot=no_plot, echo=status is None)


def write_analysis(
    out: Path, a: ExperimentAnalysis, records: list[TrialRecord], *, no_plot: bool, echo: bool
) -> Path:
    """The table, JSON and plot of an analysis already made (``echo``: print the table)."""
    return _finish(no_plot, out, a, records, echo)


def run_experiment(
    plan: Plan,
    arms: list[Arm],
    out: Path,
    exp: dict,
    kinds: Mapping[str, Kind],
    timeout_s: float | None,
    quiet: bool,
) -> list[TrialRecord]:
    """Save the experiment, run the plan; on a failed trial, analyse what completed into a
    *_partial report beside trials.jsonl, then fail with one line."""
    write_bytes_atomic(out / EXPERIMENT, experiment_json(exp).encode())
    try:
        return run_plan(plan, arms, out, timeout_s=timeout_s, progress=_progress(quiet))
    except TrialFailed as err:
        completed = sum(1 for r in err.records if r.error is None and not r.warmup)
        partial = ""
        if completed:
            status = f"PARTIAL: stopped by a failed trial ({err.records[-1].error})"
            md = report_experiment(out, exp, err.records, kinds, no_plot=True, status=status)
            partial = f"; partial report {md}"
        raise CompileAheadError(
            f"{err} ({completed} measured trial(s) done{partial}; last stderr: "
            f"{(err.records[-1].stderr_tail.splitlines() or ['-'])[-1]})"
        ) from err
